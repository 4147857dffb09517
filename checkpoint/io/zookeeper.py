"""ZooKeeper high availability (kazoo): checkpoint ID counter, completed-checkpoint store and the
ZOOKEEPER recovery factory; leader election is `checkpoint.io.zookeeper_election`, the bounded
client calls `checkpoint.io.zookeeper_client` (the only modules that import
kazoo).

Theory of operation
-------------------
Layout, one subtree per job::

    /barrierflow/<cluster_id>/<job_id>/checkpoint-counter          next checkpoint id (decimal)
    /barrierflow/<cluster_id>/<job_id>/checkpoints/<id:019d>       {"metadata_path", "checksum"}
    /barrierflow/<cluster_id>/<job_id>/leader/<nonce>__<seq:010d>  ephemeral sequential, one per contender

* **Counter**: read value and version, write value+1 with `set(..., version=)`; a `BadVersionError`
  means another coordinator won the race, so read again (the compare-and-set loop of Flink's
  `ZooKeeperCheckpointIDCounter` / kazoo's `Counter`).
* **Store**: `DefaultCompletedCheckpointStore` (checkpoint/io/ha_store.py) over
  `ZooKeeperStateHandleStore`, whose keys are the zero-padded ids, so names sort like ids.
* **Election** (`checkpoint.io.zookeeper_election`): an ephemeral sequential znode per contender;
  the lowest sequence leads.
* **Fencing**: a leader's `FencingToken` names its election znode; the store registers a checkpoint
  in one multi-op (`check` that znode's version + `create` the pointer). An ephemeral znode dies
  with its session, so a deposed leader whose session expired can never register a checkpoint,
  even if it has not noticed yet.

Every call is bounded by `operation_timeout`: `*_async().get(timeout=)` (a plain kazoo call blocks
while SUSPENDED), a call made while the client is not CONNECTED fails at once with
`HighAvailabilityError`, and connecting gives up after the same timeout (`start_within`: kazoo's own
`start(timeout)` then waits another session timeout for a server that never answers), naming the
hosts and what a TCP probe of each found (refused, or accepting but silent).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from concurrent.futures import Executor

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)

from checkpoint.ids import INITIAL_CHECKPOINT_ID, CheckpointIDCounter, check_count
from checkpoint.io.ha_store import DefaultCompletedCheckpointStore, PointerMissingError
from checkpoint.io.recovery import (
    DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_SESSION_TIMEOUT,
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
from checkpoint.io.zookeeper_client import ensure_path, require_connected, start_within, wait
from checkpoint.io.zookeeper_election import ZooKeeperLeaderElection
from checkpoint.storage.layout import CheckpointStorage

log = logging.getLogger(__name__)

ROOT = "/barrierflow"
COUNTER_NODE = "checkpoint-counter"
CHECKPOINTS_NODE = "checkpoints"
LEADER_NODE = "leader"
#: bound on compare-and-set rounds of one counter update
MAX_CAS_ATTEMPTS = 1000

_CHECKPOINT_NAME = re.compile(r"^\d{19}$")


def job_path(cluster_id: str, job_id: str) -> str:
    """`/barrierflow/<cluster_id>/<job_id>`, with both names validated."""
    return f"{ROOT}/{check_name('cluster_id', cluster_id)}/{check_name('job_id', job_id)}"


# -- checkpoint ID counter ---------------------------------------------------------------------


class ZooKeeperCheckpointIDCounter(CheckpointIDCounter):
    """A checkpoint id counter shared by every coordinator of a job, in one znode.

    Args:
        client: a started kazoo client.
        path: the counter znode (`.../<job_id>/checkpoint-counter`).
        timeout: bound on each ZooKeeper call, seconds.

    Raises (every method but `shutdown`):
        HighAvailabilityError: not CONNECTED, timed out, the znode is missing (not started) or
            holds something other than a positive integer.
    """

    def __init__(self, client: KazooClient, path: str, *, timeout: float = DEFAULT_OPERATION_TIMEOUT) -> None:
        self.client = client
        self.path = path
        self.timeout = timeout

    def start(self) -> None:
        """Create the znode holding 1 unless it exists (idempotent; an existing count is kept)."""
        ensure_path(self.client, self.path.rpartition("/")[0] or "/", self.timeout)
        with contextlib.suppress(NodeExistsError):
            wait(self.client.create_async(self.path, str(INITIAL_CHECKPOINT_ID).encode()),
                  f"create {self.path}", self.timeout)

    def _read(self) -> tuple[int, int]:
        require_connected(self.client, f"read checkpoint counter {self.path}")
        try:
            data, stat = wait(self.client.get_async(self.path), f"read {self.path}", self.timeout)
        except NoNodeError:
            raise HighAvailabilityError(f"checkpoint counter {self.path} does not exist (call start())") from None
        try:
            value = int(data.decode("ascii"))
            check_count(value)
        except (UnicodeDecodeError, ValueError):
            raise HighAvailabilityError(f"checkpoint counter {self.path} holds {data!r}, not a positive integer") \
                from None
        return value, stat.version

    def get_and_increment(self) -> int:
        for _ in range(MAX_CAS_ATTEMPTS):
            value, version = self._read()
            try:
                wait(self.client.set_async(self.path, str(value + 1).encode(), version),
                      f"increment {self.path}", self.timeout)
            except BadVersionError:
                continue  # another coordinator incremented first
            except NoNodeError:
                raise HighAvailabilityError(f"checkpoint counter {self.path} was deleted") from None
            return value
        raise HighAvailabilityError(f"checkpoint counter {self.path}: no compare-and-set succeeded in "
                                    f"{MAX_CAS_ATTEMPTS} attempts")

    def get(self) -> int:
        return self._read()[0]

    def set_count(self, count: int) -> None:
        check_count(count)
        require_connected(self.client, f"set checkpoint counter {self.path}")
        try:
            wait(self.client.set_async(self.path, str(count).encode()), f"set {self.path}", self.timeout)
        except NoNodeError:
            raise HighAvailabilityError(f"checkpoint counter {self.path} does not exist (call start())") from None

    def shutdown(self, discard: bool = False) -> None:
        """Nothing to release; with `discard` (the job is finished for good), delete the znode."""
        if discard:
            require_connected(self.client, f"delete {self.path}")
            with contextlib.suppress(NoNodeError):
                wait(self.client.delete_async(self.path), f"delete {self.path}", self.timeout)

    def __repr__(self) -> str:
        return f"ZooKeeperCheckpointIDCounter({self.path!r})"


# -- completed-checkpoint pointers -------------------------------------------------------------


class ZooKeeperStateHandleStore:
    """Checkpoint pointers as children of one znode, named by zero-padded id (a `StateHandleStore`)."""

    def __init__(self, client: KazooClient, path: str, *, timeout: float = DEFAULT_OPERATION_TIMEOUT) -> None:
        self.client = client
        self.path = path
        self.timeout = timeout

    def describe(self, checkpoint_id: int) -> str:
        return f"{self.path}/{checkpoint_id:019d}"

    def list_ids(self) -> list[int]:
        require_connected(self.client, f"list {self.path}")
        try:
            names = wait(self.client.get_children_async(self.path), f"list {self.path}", self.timeout)
        except NoNodeError:
            return []
        ids = []
        for name in names:
            if _CHECKPOINT_NAME.match(name):
                ids.append(int(name))
            else:
                log.warning("ignoring znode %s/%s: not a checkpoint id", self.path, name)
        return sorted(ids)

    def get(self, checkpoint_id: int) -> bytes:
        node = self.describe(checkpoint_id)
        require_connected(self.client, f"read {node}")
        try:
            data, _ = wait(self.client.get_async(node), f"read {node}", self.timeout)
        except NoNodeError:
            raise PointerMissingError(f"{node} disappeared") from None
        return data

    def add(self, checkpoint_id: int, data: bytes, fencing_token: FencingToken | None) -> None:
        node = self.describe(checkpoint_id)
        ensure_path(self.client, self.path, self.timeout)
        if fencing_token is None:
            try:
                wait(self.client.create_async(node, data), f"create {node}", self.timeout)
            except NodeExistsError:
                raise CheckpointExistsError(f"{node} already exists") from None
            return
        if not fencing_token.node.startswith(self.path.rsplit("/", 1)[0] + "/"):
            raise HighAvailabilityError(f"fencing token of {fencing_token.contender_id!r} names no election znode of "
                                        f"this job ({fencing_token.node!r}): use the job's ZooKeeperLeaderElection")
        transaction = self.client.transaction()
        transaction.check(fencing_token.node, fencing_token.version)
        transaction.create(node, data)
        check, create = wait(transaction.commit_async(), f"create {node} fenced by {fencing_token.node}",
                              self.timeout)
        if isinstance(check, NoNodeError | BadVersionError):
            raise NotLeaderError(f"contender {fencing_token.contender_id!r} lost leadership: its election node "
                                 f"{fencing_token.node} is gone or changed, so {node} was not created")
        if isinstance(create, NodeExistsError):
            raise CheckpointExistsError(f"{node} already exists")
        for outcome in (check, create):
            if isinstance(outcome, Exception):
                raise HighAvailabilityError(f"ZooKeeper refused to create {node}: {type(outcome).__name__}")

    def remove(self, checkpoint_id: int) -> None:
        node = self.describe(checkpoint_id)
        require_connected(self.client, f"delete {node}")
        with contextlib.suppress(NoNodeError):
            wait(self.client.delete_async(node), f"delete {node}", self.timeout)

    def remove_all(self) -> None:
        """Delete the pointer directory itself (after `discard_all_checkpoints`)."""
        require_connected(self.client, f"delete {self.path}")
        with contextlib.suppress(NoNodeError, NotEmptyError):
            wait(self.client.delete_async(self.path), f"delete {self.path}", self.timeout)

    def __repr__(self) -> str:
        return f"ZooKeeperStateHandleStore({self.path!r})"


class ZooKeeperCompletedCheckpointStore(DefaultCompletedCheckpointStore):
    """Completed checkpoints of one job: metadata in `storage`, pointers under `<base_path>/checkpoints`.

    Args:
        client: a started kazoo client.
        base_path: the job's znode, `/barrierflow/<cluster_id>/<job_id>`.
        storage: where metadata and state files live.
        retained: how many completed checkpoints to keep (>= 1).
        job_id: defaults to the last segment of `base_path`.
        leader_election: fences `add_checkpoint` (see the module header).
        timeout: bound on each ZooKeeper call, seconds.
    """

    def __init__(self, client: KazooClient, base_path: str, storage: CheckpointStorage, retained: int = 1, *,
                 job_id: str | None = None, leader_election: LeaderElection | None = None,
                 timeout: float = DEFAULT_OPERATION_TIMEOUT, discard_executor: Executor | None = None) -> None:
        if not base_path.startswith("/") or base_path.endswith("/"):
            raise ValueError(f"invalid base_path {base_path!r}: must be an absolute znode path")
        handles = ZooKeeperStateHandleStore(client, f"{base_path}/{CHECKPOINTS_NODE}", timeout=timeout)
        super().__init__(handles, storage, job_id or base_path.rpartition("/")[2], retained,
                         leader_election=leader_election, discard_executor=discard_executor)
        self.base_path = base_path

    def discard_all_checkpoints(self) -> None:
        super().discard_all_checkpoints()
        self.handles.remove_all()


# -- the ZOOKEEPER recovery factory ------------------------------------------------------------


class ZooKeeperCheckpointRecoveryFactory(CheckpointRecoveryFactory):
    """ZOOKEEPER mode: counter, store and election of each job under `/barrierflow/<cluster_id>/<job_id>`.

    Args:
        hosts: ZooKeeper connection string; ignored when `client` is given.
        cluster_id: first path segment under `/barrierflow`.
        session_timeout: requested session timeout, seconds (the server clamps it to its range).
        operation_timeout: bound on each ZooKeeper call, and on connecting, seconds.
        client: an already started kazoo client to use (not closed by `close()`).

    Raises:
        ValueError: a bad `cluster_id` or timeout.
        HighAvailabilityError: (on first use) ZooKeeper cannot be reached within `operation_timeout`.
    """

    mode = RecoveryMode.ZOOKEEPER

    def __init__(self, hosts: str = "", *, cluster_id: str = "default", session_timeout: float = DEFAULT_SESSION_TIMEOUT,
                 operation_timeout: float = DEFAULT_OPERATION_TIMEOUT, client: KazooClient | None = None) -> None:
        check_name("cluster_id", cluster_id)
        for option, value in (("session_timeout", session_timeout), ("operation_timeout", operation_timeout)):
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"invalid {option}={value!r}: must be a number of seconds > 0")
        if client is None and not hosts:
            raise ValueError("ZooKeeper recovery needs hosts='host:port[,host:port...]' or a client")
        self.hosts = hosts
        self.cluster_id = cluster_id
        self.session_timeout = float(session_timeout)
        self.operation_timeout = float(operation_timeout)
        self._client = client
        self._own_client = client is None
        self._lock = threading.Lock()

    @property
    def client(self) -> KazooClient:
        """The kazoo client, connected on first use.

        Raises:
            HighAvailabilityError: not connected within `operation_timeout` (names the hosts and
                what a TCP probe of each found).
        """
        with self._lock:
            if self._client is None:
                client = KazooClient(hosts=self.hosts, timeout=self.session_timeout,
                                     connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 1.5,
                                                       "max_delay": 1.0})
                start_within(client, self.hosts, self.operation_timeout)
                self._client = client
            return self._client

    def job_path(self, job_id: str) -> str:
        return job_path(self.cluster_id, job_id)

    def create_store(self, job_id: str, storage: CheckpointStorage, retained: int, *,
                     leader_election: LeaderElection | None = None,
                     discard_executor: Executor | None = None) -> ZooKeeperCompletedCheckpointStore:
        return ZooKeeperCompletedCheckpointStore(self.client, self.job_path(job_id), storage, retained,
                                                 job_id=job_id, leader_election=leader_election,
                                                 timeout=self.operation_timeout, discard_executor=discard_executor)

    def create_id_counter(self, job_id: str) -> ZooKeeperCheckpointIDCounter:
        return ZooKeeperCheckpointIDCounter(self.client, f"{self.job_path(job_id)}/{COUNTER_NODE}",
                                            timeout=self.operation_timeout)

    def create_leader_election(self, job_id: str, contender_id: str, *,
                               on_grant: LeaderCallback | None = None,
                               on_revoke: LeaderCallback | None = None) -> ZooKeeperLeaderElection:
        return ZooKeeperLeaderElection(self.client, f"{self.job_path(job_id)}/{LEADER_NODE}", contender_id,
                                       on_grant, on_revoke, timeout=self.operation_timeout)

    def session(self) -> tuple[int, bytes] | None:
        """This process's ZooKeeper session (id, password), for `close_session` by a watcher."""
        with self._lock:
            client = self._client
        return tuple(client.client_id) if client is not None and client.client_id else None  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._own_client:
            client.stop()
            client.close()

    def __repr__(self) -> str:
        return f"ZooKeeperCheckpointRecoveryFactory(hosts={self.hosts!r}, cluster_id={self.cluster_id!r})"
