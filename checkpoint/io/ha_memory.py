"""In-memory high-availability services: ZooKeeper's role, played inside one process (simulator).

Theory of operation
-------------------
`InMemoryCoordinationService` is a tiny model of what the HA code needs from ZooKeeper:

* **sessions**: a contender opens one; `expire_session` kills it, as ZooKeeper does when a client
  is cut off longer than its session timeout. Expiry is the only way leadership is lost without
  `stop()`.
* **election**: per job, contenders queue in join order, each with an increasing *epoch* (the
  ZooKeeper sequence number of its ephemeral node); the leader is the earliest live one. An expired
  contender leaves the queue; by default it rejoins at the back with a new session, the way
  `ZooKeeperLeaderElection` does after kazoo reconnects.
* **pointers**: per job, checkpoint id -> pointer bytes; a fenced add checks the token (the epoch
  must still be the job's current leader) in the same critical section as the write, which is what
  the ZooKeeper multi-op `check` + `create` gives.
* **counters**: per job, the next checkpoint id.
* **availability**: `set_available(False)` makes every call fail with `HighAvailabilityError`
  (a ZooKeeper outage), for fault injection.

Leadership callbacks run synchronously, after the change and outside the lock, in the order the
changes happened; no threads, no time, so a seeded simulation replays exactly.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from checkpoint.ids import INITIAL_CHECKPOINT_ID, CheckpointIDCounter, check_count
from checkpoint.io.ha_store import DefaultCompletedCheckpointStore, PointerMissingError
from checkpoint.io.recovery import (
    CheckpointExistsError,
    CheckpointRecoveryFactory,
    FencingToken,
    HighAvailabilityError,
    LeaderCallback,
    LeaderElection,
    NotLeaderError,
    RecoveryMode,
    check_name,
)
from checkpoint.storage.layout import CheckpointStorage


@dataclass
class _Contender:
    election: InMemoryLeaderElection
    session: int
    epoch: int


@dataclass
class _Job:
    next_id: int = INITIAL_CHECKPOINT_ID
    pointers: dict[int, bytes] = field(default_factory=dict)
    contenders: list[_Contender] = field(default_factory=list)
    leader: _Contender | None = None


Effects = list[Callable[[], None]]


class InMemoryCoordinationService:
    """The shared "ensemble": sessions, elections, pointers and counters of every job."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._jobs: dict[str, _Job] = {}
        self._live_sessions: set[int] = set()
        self._session_ids = itertools.count(1)
        self._epochs = itertools.count(0)
        self._available = True
        #: how many sessions were expired (stats)
        self.num_expired_sessions = 0

    def _job(self, job_id: str) -> _Job:
        self._check_available()
        return self._jobs.setdefault(job_id, _Job())

    def _check_available(self) -> None:
        if not self._available:
            raise HighAvailabilityError("in-memory coordination service is unavailable (injected outage)")

    def set_available(self, available: bool) -> None:
        """Simulate an outage: while unavailable, every call raises `HighAvailabilityError`."""
        self._available = bool(available)

    # -- sessions and election --

    def open_session(self) -> int:
        with self._lock:
            self._check_available()
            session = next(self._session_ids)
            self._live_sessions.add(session)
            return session

    def session_alive(self, session: int) -> bool:
        return session in self._live_sessions

    def expire_session(self, session: int) -> None:
        """End a session: its contenders leave their elections (leadership moves on); each of them
        that asked to rejoin does so with a new session, at the back of the queue."""
        with self._lock:
            if session not in self._live_sessions:
                return
            self._live_sessions.discard(session)
            self.num_expired_sessions += 1
            effects: Effects = []
            expired_by_job: dict[str, list[_Contender]] = {}
            for job_id in sorted(self._jobs):
                job = self._jobs[job_id]
                expired_by_job[job_id] = [c for c in job.contenders if c.session == session]
                job.contenders = [c for c in job.contenders if c.session != session]
                effects.extend(self._elect(job))
            for job_id in sorted(self._jobs):
                for contender in expired_by_job.get(job_id, []):
                    if contender.election.rejoin_on_expiry and self._available:
                        effects.extend(self._join(job_id, contender.election, self.open_session()))
                    else:
                        contender.election._detach()
        _run(effects)

    def _join(self, job_id: str, election: InMemoryLeaderElection, session: int) -> Effects:
        with self._lock:
            job = self._job(job_id)
            election._session = session
            job.contenders.append(_Contender(election, session, next(self._epochs)))
            return self._elect(job)

    def _leave(self, job_id: str, election: InMemoryLeaderElection) -> Effects:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return []
            job.contenders = [c for c in job.contenders if c.election is not election]
            return self._elect(job)

    def _elect(self, job: _Job) -> Effects:
        """Make the earliest live contender the leader; returns the callbacks to run after the lock."""
        live = [c for c in job.contenders if c.session in self._live_sessions]
        new = live[0] if live else None
        if new is job.leader:
            return []
        old, job.leader = job.leader, new
        effects: Effects = []
        if old is not None:
            effects.extend(old.election._revoke(old.epoch))
        if new is not None:
            effects.extend(new.election._grant(new.epoch))
        return effects

    def leader_of(self, job_id: str) -> str | None:
        """Contender id of the job's current leader, if any."""
        with self._lock:
            job = self._jobs.get(job_id)
            return job.leader.election.contender_id if job is not None and job.leader is not None else None

    def check_token(self, job_id: str, token: FencingToken) -> None:
        """Raises NotLeaderError unless `token` belongs to the job's current leader."""
        with self._lock:
            job = self._job(job_id)
            if job.leader is None or job.leader.epoch != token.epoch:
                raise NotLeaderError(f"contender {token.contender_id!r} (epoch {token.epoch}) is no longer "
                                     f"the leader of job {job_id!r}")

    # -- pointers --

    def list_pointers(self, job_id: str) -> list[int]:
        with self._lock:
            return sorted(self._job(job_id).pointers)

    def get_pointer(self, job_id: str, checkpoint_id: int) -> bytes:
        with self._lock:
            try:
                return self._job(job_id).pointers[checkpoint_id]
            except KeyError:
                raise PointerMissingError(f"no pointer for checkpoint {checkpoint_id} of job {job_id!r}") from None

    def add_pointer(self, job_id: str, checkpoint_id: int, data: bytes, token: FencingToken | None) -> None:
        with self._lock:
            job = self._job(job_id)
            if token is not None:
                self.check_token(job_id, token)
            if checkpoint_id in job.pointers:
                raise CheckpointExistsError(f"checkpoint {checkpoint_id} of job {job_id!r} already exists")
            job.pointers[checkpoint_id] = bytes(data)

    def put_pointer(self, job_id: str, checkpoint_id: int, data: bytes) -> None:
        """Overwrite a pointer unconditionally (tests: corruption, another writer)."""
        with self._lock:
            self._job(job_id).pointers[checkpoint_id] = bytes(data)

    def remove_pointer(self, job_id: str, checkpoint_id: int) -> None:
        with self._lock:
            self._job(job_id).pointers.pop(checkpoint_id, None)

    # -- counters --

    def get_and_increment(self, job_id: str) -> int:
        with self._lock:
            job = self._job(job_id)
            value = job.next_id
            job.next_id += 1
            return value

    def get_count(self, job_id: str) -> int:
        with self._lock:
            return self._job(job_id).next_id

    def set_count(self, job_id: str, count: int) -> None:
        check_count(count)
        with self._lock:
            self._job(job_id).next_id = count

    def __repr__(self) -> str:
        return (f"InMemoryCoordinationService(jobs={sorted(self._jobs)}, sessions={len(self._live_sessions)}, "
                f"expired={self.num_expired_sessions})")


    def close_session(self, session: int) -> None:
        """End a session on purpose (a contender stopping): like expiry, without rejoining."""
        with self._lock:
            if session not in self._live_sessions:
                return
            self._live_sessions.discard(session)
            effects: Effects = []
            for job_id in sorted(self._jobs):
                job = self._jobs[job_id]
                job.contenders = [c for c in job.contenders if c.session != session]
                effects.extend(self._elect(job))
        _run(effects)


def _run(effects: Effects) -> None:
    for effect in effects:
        effect()


class InMemoryLeaderElection(LeaderElection):
    """A contender in an `InMemoryCoordinationService` election (see the module header).

    Args:
        rejoin_on_expiry: after its session expires, rejoin with a new one (as the ZooKeeper
            election does when kazoo reconnects); False models a coordinator that died with it.
    """

    def __init__(self, service: InMemoryCoordinationService, job_id: str, contender_id: str,
                 on_grant: LeaderCallback | None = None, on_revoke: LeaderCallback | None = None, *,
                 rejoin_on_expiry: bool = True) -> None:
        super().__init__(contender_id, on_grant, on_revoke)
        self.service = service
        self.job_id = check_name("job_id", job_id)
        self.rejoin_on_expiry = rejoin_on_expiry
        self._session: int | None = None
        self._leader_epoch: int | None = None
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        session = self.service.open_session()
        self._started = True
        _run(self.service._join(self.job_id, self, session))

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        effects = self.service._leave(self.job_id, self)
        session, self._session = self._session, None
        _run(effects)
        if session is not None:
            self.service.close_session(session)

    def _detach(self) -> None:
        """Out of the election after an expiry without rejoining; `start()` joins again."""
        self._session = None
        self._started = False

    def expire_session(self) -> None:
        """Fault injection: this contender's session expires (it loses leadership, then rejoins
        if `rejoin_on_expiry`)."""
        if self._session is not None:
            self.service.expire_session(self._session)

    @property
    def session(self) -> int | None:
        return self._session

    @property
    def is_leader(self) -> bool:
        return self._leader_epoch is not None

    def await_leadership(self, timeout: float) -> bool:
        # Nothing happens while a single-threaded simulation waits: answer at once.
        return self.is_leader

    def fencing_token(self) -> FencingToken:
        epoch = self._leader_epoch
        if epoch is None:
            raise NotLeaderError(f"contender {self.contender_id!r} is not the leader of job {self.job_id!r} "
                                 f"(leader: {self.service.leader_of(self.job_id)!r})")
        return FencingToken(self.contender_id, epoch)

    def _grant(self, epoch: int) -> Effects:
        self._leader_epoch = epoch
        return [self._on_grant] if self._on_grant is not None else []

    def _revoke(self, epoch: int) -> Effects:
        if self._leader_epoch != epoch:
            return []
        self._leader_epoch = None
        return [self._on_revoke] if self._on_revoke is not None else []

    def __repr__(self) -> str:
        return (f"InMemoryLeaderElection(job={self.job_id!r}, contender={self.contender_id!r}, "
                f"session={self._session}, leader={self.is_leader})")


class InMemoryStateHandleStore:
    """The pointers of one job in an `InMemoryCoordinationService` (a `StateHandleStore`)."""

    def __init__(self, service: InMemoryCoordinationService, job_id: str) -> None:
        self.service = service
        self.job_id = check_name("job_id", job_id)

    def list_ids(self) -> list[int]:
        return self.service.list_pointers(self.job_id)

    def get(self, checkpoint_id: int) -> bytes:
        return self.service.get_pointer(self.job_id, checkpoint_id)

    def add(self, checkpoint_id: int, data: bytes, fencing_token: FencingToken | None) -> None:
        self.service.add_pointer(self.job_id, checkpoint_id, data, fencing_token)

    def remove(self, checkpoint_id: int) -> None:
        self.service.remove_pointer(self.job_id, checkpoint_id)

    def describe(self, checkpoint_id: int) -> str:
        return f"memory:/barrierflow/{self.job_id}/checkpoints/{checkpoint_id:019d}"

    def __repr__(self) -> str:
        return f"InMemoryStateHandleStore(job={self.job_id!r})"


class InMemoryCheckpointIDCounter(CheckpointIDCounter):
    """A job's id counter in an `InMemoryCoordinationService`, shared by every coordinator."""

    def __init__(self, service: InMemoryCoordinationService, job_id: str) -> None:
        self.service = service
        self.job_id = check_name("job_id", job_id)

    def start(self) -> None:
        self.service.get_count(self.job_id)  # creates the job's counter; fails if unavailable

    def get_and_increment(self) -> int:
        return self.service.get_and_increment(self.job_id)

    def get(self) -> int:
        return self.service.get_count(self.job_id)

    def set_count(self, count: int) -> None:
        self.service.set_count(self.job_id, count)

    def shutdown(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"InMemoryCheckpointIDCounter(job={self.job_id!r})"


class InMemoryHighAvailabilityServices(CheckpointRecoveryFactory):
    """HA services backed by an `InMemoryCoordinationService`; they behave like ZOOKEEPER mode.

    Several instances sharing one service are several coordinator processes sharing one ensemble.
    """

    mode = RecoveryMode.ZOOKEEPER

    def __init__(self, service: InMemoryCoordinationService | None = None) -> None:
        self.service = service if service is not None else InMemoryCoordinationService()

    def create_store(self, job_id: str, storage: CheckpointStorage, retained: int, *,
                     leader_election: LeaderElection | None = None,
                     discard_executor: Executor | None = None) -> DefaultCompletedCheckpointStore:
        return DefaultCompletedCheckpointStore(InMemoryStateHandleStore(self.service, job_id), storage, job_id,
                                               retained, leader_election=leader_election,
                                               discard_executor=discard_executor)

    def create_id_counter(self, job_id: str) -> InMemoryCheckpointIDCounter:
        return InMemoryCheckpointIDCounter(self.service, job_id)

    def create_leader_election(self, job_id: str, contender_id: str, *,
                               on_grant: LeaderCallback | None = None,
                               on_revoke: LeaderCallback | None = None) -> InMemoryLeaderElection:
        return InMemoryLeaderElection(self.service, job_id, contender_id, on_grant, on_revoke)

    def __repr__(self) -> str:
        return f"InMemoryHighAvailabilityServices({self.service!r})"
