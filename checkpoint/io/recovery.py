"""High-availability services: recovery modes, leader election, and the factory that builds a job's
checkpoint store, ID counter and leader election for one mode (Flink's
`HighAvailabilityServices`).

Theory of operation
-------------------
A coordinator needs three things that must outlive it: the completed checkpoints (a
`CompletedCheckpointStore`), the next checkpoint id (a `CheckpointIDCounter`), and the knowledge of
whether it is the one coordinator allowed to act for the job (a `LeaderElection`).
`CheckpointRecoveryFactory` (alias `HighAvailabilityServices`) hands out all three for a
`RecoveryMode`, like Flink's `CheckpointRecoveryFactory` plus its leader services
(`checkpoint/io/ha_services.py:create_recovery_factory` picks one for a mode):

* `STANDALONE`: the checkpoint module's in-memory counter and storage-backed store, and an election
  that this single contender always wins. No failover between processes.
* `ZOOKEEPER`: everything lives under `/barrierflow/<cluster_id>/<job_id>/` in ZooKeeper
  (`checkpoint/io/zookeeper.py`, which builds on this module).

The simulator uses `checkpoint/io/ha_memory.py`, an in-memory stand-in for ZooKeeper with sessions
that can be expired, through the same interface.

Fencing: leadership can be lost at any moment (a session expires while the leader is paused), so
"check `is_leader`, then write" is racy. A leader therefore takes a `FencingToken` when it writes;
the store hands the token to the backend, which checks it atomically together with the write
(a ZooKeeper multi-op `check` + `create`), so a deposed leader can never add a checkpoint.
"""

from __future__ import annotations

import abc
import enum
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from checkpoint.ids import CheckpointIDCounter, StandaloneCheckpointIDCounter
from checkpoint.storage.errors import HighAvailabilityError
from checkpoint.storage.layout import CheckpointStorage
from checkpoint.storage.store import CompletedCheckpointStore, StandaloneCompletedCheckpointStore

#: seconds any one ZooKeeper call may take, connecting included (`set_high_availability(...,
#: operation_timeout=)`): a healthy ensemble answers in milliseconds; an unreachable one fails
#: the job within seconds instead of blocking (kazoo waits for ever while disconnected)
DEFAULT_OPERATION_TIMEOUT = 5.0
#: seconds a ZooKeeper session outlives its client's last heartbeat, unless configured
#: (`set_high_availability(session_timeout=)`): a dead leader is replaced this long after it died
DEFAULT_SESSION_TIMEOUT = 10.0

#: what leader-election callbacks look like: no arguments, called on grant or on revoke
LeaderCallback = Callable[[], None]


class RecoveryMode(enum.Enum):
    """How a job's coordinator state survives the coordinator (Flink's high-availability mode)."""

    #: no recovery across processes; ids and checkpoints live with the coordinator
    STANDALONE = "standalone"
    #: counter, completed-checkpoint pointers and leader election in ZooKeeper
    ZOOKEEPER = "zookeeper"

    @classmethod
    def parse(cls, value: RecoveryMode | str) -> RecoveryMode:
        """Accept the enum or its name/value in any case.

        Raises:
            ValueError: an unknown mode (the message lists the allowed ones).
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for mode in cls:
                if value.strip().lower() == mode.value:
                    return mode
        allowed = ", ".join(m.name for m in cls)
        raise ValueError(f"invalid recovery mode {value!r}: must be one of {allowed}")


class ZooKeeperSuspendedError(HighAvailabilityError):
    """The client lost its connection and is trying to get it back (kazoo's SUSPENDED): the
    session, and what it holds, may still survive; a caller may retry within the session timeout."""


class NotLeaderError(HighAvailabilityError):
    """A contender that is not (or no longer) the leader tried to act as one."""


class CheckpointExistsError(HighAvailabilityError):
    """A checkpoint with this id is already registered (two writers used the same id)."""


@dataclass(frozen=True, slots=True)
class FencingToken:
    """Proof of leadership, checked by the backend atomically with each write.

    Attributes:
        contender_id: who holds it.
        epoch: increases with every leadership grant in the job (the ZooKeeper sequence number of
            the contender's election node), so tokens of older leaders are recognisable.
        node: backend detail (the ZooKeeper election znode that must still exist).
        version: backend detail (that znode's data version).
    """

    contender_id: str
    epoch: int
    node: str = ""
    version: int = 0


class LeaderElection(abc.ABC):
    """One contender's view of the leader election for one job.

    Callbacks (`on_grant`, `on_revoke`) may run on a background thread (ZooKeeper) or
    synchronously inside the call that changed leadership (in-memory); they must not block.
    """

    def __init__(self, contender_id: str, on_grant: LeaderCallback | None = None,
                 on_revoke: LeaderCallback | None = None) -> None:
        if not isinstance(contender_id, str) or not contender_id:
            raise ValueError(f"invalid contender_id {contender_id!r}: must be a non-empty string")
        self.contender_id = contender_id
        self._on_grant = on_grant
        self._on_revoke = on_revoke

    @abc.abstractmethod
    def start(self) -> None:
        """Join the election (idempotent)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Leave the election; leadership, if held, is revoked (idempotent)."""

    @property
    @abc.abstractmethod
    def is_leader(self) -> bool:
        """Whether this contender currently believes it leads (use `fencing_token` to write)."""

    @abc.abstractmethod
    def await_leadership(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds to become leader; returns `is_leader`."""

    @abc.abstractmethod
    def fencing_token(self) -> FencingToken:
        """The token to write with.

        Raises:
            NotLeaderError: this contender is not the leader.
        """


class StandaloneLeaderElection(LeaderElection):
    """The only contender there is: leader from `start()` until `stop()`."""

    def __init__(self, contender_id: str, on_grant: LeaderCallback | None = None,
                 on_revoke: LeaderCallback | None = None) -> None:
        super().__init__(contender_id, on_grant, on_revoke)
        self._leader = False
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            granted = not self._leader
            self._leader = True
        if granted and self._on_grant is not None:
            self._on_grant()

    def stop(self) -> None:
        with self._lock:
            revoked = self._leader
            self._leader = False
        if revoked and self._on_revoke is not None:
            self._on_revoke()

    @property
    def is_leader(self) -> bool:
        return self._leader

    def await_leadership(self, timeout: float) -> bool:
        return self._leader

    def fencing_token(self) -> FencingToken:
        if not self._leader:
            raise NotLeaderError(f"contender {self.contender_id!r} is not started, so it is not the leader")
        return FencingToken(self.contender_id, 0)

    def __repr__(self) -> str:
        return f"StandaloneLeaderElection({self.contender_id!r}, leader={self._leader})"


def check_name(kind: str, value: str) -> str:
    """Validate a job or cluster id that becomes one ZooKeeper path segment / storage directory.

    Raises:
        ValueError: empty, not a string, or containing '/' (the message names `kind`).
    """
    if not isinstance(value, str) or not value or "/" in value or value in (".", "..") or "\0" in value:
        raise ValueError(f"invalid {kind} {value!r}: must be a non-empty name without '/'")
    return value


class CheckpointRecoveryFactory(abc.ABC):
    """Builds a job's completed-checkpoint store, ID counter and leader election for one mode."""

    mode: RecoveryMode

    @abc.abstractmethod
    def create_store(self, job_id: str, storage: CheckpointStorage, retained: int, *,
                     leader_election: LeaderElection | None = None,
                     discard_executor: Executor | None = None) -> CompletedCheckpointStore:
        """A store keeping the latest `retained` checkpoints, metadata written through `storage`.

        With `leader_election`, `add_checkpoint` is fenced: it raises `NotLeaderError` unless that
        contender leads. With `discard_executor`, dropped checkpoints' files are deleted on it
        (`flush()` waits for them). Call `recover()` on it before use.
        """

    @abc.abstractmethod
    def create_id_counter(self, job_id: str) -> CheckpointIDCounter:
        """The job's checkpoint id counter (call `start()` before use)."""

    @abc.abstractmethod
    def create_leader_election(self, job_id: str, contender_id: str, *,
                               on_grant: LeaderCallback | None = None,
                               on_revoke: LeaderCallback | None = None) -> LeaderElection:
        """One contender's leader election for the job (call `start()` to join)."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections (idempotent)."""

    def __enter__(self) -> CheckpointRecoveryFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Flink calls the bundle of these services HighAvailabilityServices; same interface here.
HighAvailabilityServices = CheckpointRecoveryFactory


class StandaloneCheckpointRecoveryFactory(CheckpointRecoveryFactory):
    """STANDALONE mode: storage-backed store, in-memory counter, always-leader election.

    The counter of a job is kept by the factory, so a coordinator restarted in the same process
    continues the ids.
    """

    mode = RecoveryMode.STANDALONE

    def __init__(self) -> None:
        self._counters: dict[str, CheckpointIDCounter] = {}
        self._lock = threading.Lock()

    def create_store(self, job_id: str, storage: CheckpointStorage, retained: int, *,
                     leader_election: LeaderElection | None = None,
                     discard_executor: Executor | None = None) -> CompletedCheckpointStore:
        return StandaloneCompletedCheckpointStore(storage, check_name("job_id", job_id),
                                                  retained, discard_executor=discard_executor)

    def create_id_counter(self, job_id: str) -> CheckpointIDCounter:
        check_name("job_id", job_id)
        with self._lock:
            return self._counters.setdefault(job_id, StandaloneCheckpointIDCounter())

    def create_leader_election(self, job_id: str, contender_id: str, *,
                               on_grant: LeaderCallback | None = None,
                               on_revoke: LeaderCallback | None = None) -> LeaderElection:
        check_name("job_id", job_id)
        return StandaloneLeaderElection(contender_id, on_grant, on_revoke)

    def __repr__(self) -> str:
        return f"StandaloneCheckpointRecoveryFactory(jobs={sorted(self._counters)})"


@dataclass(frozen=True)
class HighAvailabilityConfig:
    """What `env.set_high_availability(...)` configured."""

    mode: RecoveryMode = RecoveryMode.STANDALONE
    hosts: str | None = None
    cluster_id: str = "default"
    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    #: seconds any one ZooKeeper call (and connecting) may take
    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT

    @classmethod
    def of(cls, mode: RecoveryMode | str, *, hosts: str | None = None, cluster_id: str = "default",
           session_timeout: float = DEFAULT_SESSION_TIMEOUT,
           operation_timeout: float = DEFAULT_OPERATION_TIMEOUT) -> HighAvailabilityConfig:
        for option, value in (("session_timeout", session_timeout), ("operation_timeout", operation_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValueError(f"high availability: {option} must be > 0 seconds, got {value!r}")
        return cls(RecoveryMode.parse(mode), hosts, check_name("cluster_id", cluster_id), float(session_timeout),
                   float(operation_timeout))

    @property
    def enabled(self) -> bool:
        return self.mode is not RecoveryMode.STANDALONE

