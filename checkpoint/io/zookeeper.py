"""ZooKeeper high availability (kazoo): checkpoint ID counter, completed-checkpoint store, leader
election with fencing, and the ZOOKEEPER recovery factory. The only module that imports kazoo.

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
* **Election**: each contender creates an ephemeral sequential znode; the lowest sequence leads;
  every other contender watches only its predecessor (no herd effect). Leadership is revoked as
  soon as the connection is SUSPENDED or LOST; after a reconnect within the session the contender
  checks again, after a LOST session it rejoins with a new znode. The znode name carries a
  per-join nonce, so a create whose reply was lost is found again rather than duplicated.
* **Fencing**: a leader's `FencingToken` names its election znode; the store registers a checkpoint
  in one multi-op (`check` that znode's version + `create` the pointer). An ephemeral znode dies
  with its session, so a deposed leader whose session expired can never register a checkpoint,
  even if it has not noticed yet.

Every call is bounded by `operation_timeout`: `*_async().get(timeout=)` (a plain kazoo call blocks
while SUSPENDED), a call made while the client is not CONNECTED fails at once with
`HighAvailabilityError`, and connecting gives up after the same timeout (`start_within`: kazoo's own
`start(timeout)` then waits another session timeout for a server that never answers), naming the
hosts and what a TCP probe of each found (refused, or accepting but silent). Election
work runs on one thread per contender: kazoo callbacks and watches must not block, so they only
enqueue events for it.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import socket
import threading
import uuid
from concurrent.futures import Executor
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError

from checkpoint.ids import INITIAL_CHECKPOINT_ID, CheckpointIDCounter, check_count
from checkpoint.io.ha_store import DefaultCompletedCheckpointStore, PointerMissingError
from checkpoint.io.recovery import (
    DEFAULT_OPERATION_TIMEOUT,
    CheckpointExistsError,
    CheckpointRecoveryFactory,
    FencingToken,
    HighAvailabilityError,
    LeaderCallback,
    LeaderElection,
    NotLeaderError,
    RecoveryMode,
    ZooKeeperSuspendedError,
    check_name,
    check_retained,
)
from checkpoint.io.storage import CheckpointStorage

log = logging.getLogger(__name__)

ROOT = "/barrierflow"
COUNTER_NODE = "checkpoint-counter"
CHECKPOINTS_NODE = "checkpoints"
LEADER_NODE = "leader"
#: bound on compare-and-set rounds of one counter update
MAX_CAS_ATTEMPTS = 1000

_CHECKPOINT_NAME = re.compile(r"^\d{19}$")
_CONTENDER_NAME = re.compile(r"^([0-9a-f]{32})__(\d{10})$")


def job_path(cluster_id: str, job_id: str) -> str:
    """`/barrierflow/<cluster_id>/<job_id>`, with both names validated."""
    return f"{ROOT}/{check_name('cluster_id', cluster_id)}/{check_name('job_id', job_id)}"


def _require_connected(client: KazooClient, what: str) -> None:
    if client.state != KazooState.CONNECTED:
        error = ZooKeeperSuspendedError if client.state == KazooState.SUSPENDED else HighAvailabilityError
        raise error(f"cannot {what}: ZooKeeper client is {client.state}, not CONNECTED")


# Outcomes callers handle themselves; everything else becomes HighAvailabilityError.
_PASS_THROUGH = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)


def _wait(result: Any, what: str, timeout: float) -> Any:
    """Wait for a kazoo async result, translating failures into `HighAvailabilityError`."""
    try:
        return result.get(timeout=timeout)
    except _PASS_THROUGH:
        raise
    except KazooTimeoutError as exc:
        raise HighAvailabilityError(f"ZooKeeper did not answer within {timeout} s: {what}") from exc
    except KazooException as exc:
        raise HighAvailabilityError(f"ZooKeeper failed to {what}: {type(exc).__name__} {exc}") from exc


def _ensure_path(client: KazooClient, path: str, timeout: float) -> None:
    _require_connected(client, f"create {path}")
    _wait(client.ensure_path_async(path), f"create {path}", timeout)


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
        _ensure_path(self.client, self.path.rpartition("/")[0] or "/", self.timeout)
        with contextlib.suppress(NodeExistsError):
            _wait(self.client.create_async(self.path, str(INITIAL_CHECKPOINT_ID).encode()),
                  f"create {self.path}", self.timeout)

    def _read(self) -> tuple[int, int]:
        _require_connected(self.client, f"read checkpoint counter {self.path}")
        try:
            data, stat = _wait(self.client.get_async(self.path), f"read {self.path}", self.timeout)
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
                _wait(self.client.set_async(self.path, str(value + 1).encode(), version),
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
        _require_connected(self.client, f"set checkpoint counter {self.path}")
        try:
            _wait(self.client.set_async(self.path, str(count).encode()), f"set {self.path}", self.timeout)
        except NoNodeError:
            raise HighAvailabilityError(f"checkpoint counter {self.path} does not exist (call start())") from None

    def shutdown(self, discard: bool = False) -> None:
        """Nothing to release; with `discard` (the job is finished for good), delete the znode."""
        if discard:
            _require_connected(self.client, f"delete {self.path}")
            with contextlib.suppress(NoNodeError):
                _wait(self.client.delete_async(self.path), f"delete {self.path}", self.timeout)

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
        _require_connected(self.client, f"list {self.path}")
        try:
            names = _wait(self.client.get_children_async(self.path), f"list {self.path}", self.timeout)
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
        _require_connected(self.client, f"read {node}")
        try:
            data, _ = _wait(self.client.get_async(node), f"read {node}", self.timeout)
        except NoNodeError:
            raise PointerMissingError(f"{node} disappeared") from None
        return data

    def add(self, checkpoint_id: int, data: bytes, fencing_token: FencingToken | None) -> None:
        node = self.describe(checkpoint_id)
        _ensure_path(self.client, self.path, self.timeout)
        if fencing_token is None:
            try:
                _wait(self.client.create_async(node, data), f"create {node}", self.timeout)
            except NodeExistsError:
                raise CheckpointExistsError(f"{node} already exists") from None
            return
        if not fencing_token.node.startswith(self.path.rsplit("/", 1)[0] + "/"):
            raise HighAvailabilityError(f"fencing token of {fencing_token.contender_id!r} names no election znode of "
                                        f"this job ({fencing_token.node!r}): use the job's ZooKeeperLeaderElection")
        transaction = self.client.transaction()
        transaction.check(fencing_token.node, fencing_token.version)
        transaction.create(node, data)
        check, create = _wait(transaction.commit_async(), f"create {node} fenced by {fencing_token.node}",
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
        _require_connected(self.client, f"delete {node}")
        with contextlib.suppress(NoNodeError):
            _wait(self.client.delete_async(node), f"delete {node}", self.timeout)

    def remove_all(self) -> None:
        """Delete the pointer directory itself (after `discard_all_checkpoints`)."""
        _require_connected(self.client, f"delete {self.path}")
        with contextlib.suppress(NoNodeError, NotEmptyError):
            _wait(self.client.delete_async(self.path), f"delete {self.path}", self.timeout)

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
        super().__init__(handles, storage, job_id or base_path.rpartition("/")[2], check_retained(retained),
                         leader_election=leader_election, discard_executor=discard_executor)
        self.base_path = base_path

    def discard_all_checkpoints(self) -> None:
        super().discard_all_checkpoints()
        self.handles.remove_all()


# -- leader election ---------------------------------------------------------------------------


_JOIN, _CHECK, _REVOKE = "join", "check", "revoke"


class ZooKeeperLeaderElection(LeaderElection):
    """One contender in a ZooKeeper leader election (see the module header).

    Args:
        client: a started kazoo client (its session carries the contender's znode).
        path: the election znode (`.../<job_id>/leader`).
        contender_id: who this is (stored in the znode, for operators and logs).
        on_grant, on_revoke: called on the election thread when leadership changes; must not block.
        timeout: bound on each ZooKeeper call, seconds.
    """

    def __init__(self, client: KazooClient, path: str, contender_id: str, on_grant: LeaderCallback | None = None,
                 on_revoke: LeaderCallback | None = None, *,
                 timeout: float = DEFAULT_OPERATION_TIMEOUT) -> None:
        super().__init__(contender_id, on_grant, on_revoke)
        self.client = client
        self.path = path
        self.timeout = timeout
        self._events: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._granted = threading.Event()
        self._thread: threading.Thread | None = None
        self._nonce = ""
        self._node: str | None = None
        self._node_version = 0
        self._epoch: int | None = None
        self._revoke_due = False
        #: leadership grants so far (stats and tests)
        self.num_grants = 0

    # -- public --

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=f"leader-election-{self.contender_id}",
                                            daemon=True)
        self.client.add_listener(self._on_connection_state)
        self._thread.start()
        self._events.put(_JOIN)

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self.client.remove_listener(self._on_connection_state)
        self._events.put(None)
        if thread is not threading.current_thread():  # stop() may be called from a callback
            thread.join(timeout=2 * self.timeout)
        if self._set_leader(None) or self._revoke_due:
            self._revoke_due = False
            self._callback(self._on_revoke)
        node, self._node = self._node, None
        if node is not None and self.client.state == KazooState.CONNECTED:
            # If this fails, the znode still goes when the session ends.
            with contextlib.suppress(HighAvailabilityError, NoNodeError):
                _wait(self.client.delete_async(node), f"delete {node}", self.timeout)

    @property
    def is_leader(self) -> bool:
        return self._epoch is not None and self.client.state == KazooState.CONNECTED

    def await_leadership(self, timeout: float) -> bool:
        self._granted.wait(timeout)
        return self.is_leader

    def fencing_token(self) -> FencingToken:
        with self._lock:
            epoch, node, version = self._epoch, self._node, self._node_version
        if epoch is None or node is None or self.client.state != KazooState.CONNECTED:
            raise NotLeaderError(f"contender {self.contender_id!r} is not the leader of {self.path} "
                                 f"(client {self.client.state})")
        return FencingToken(self.contender_id, epoch, node, version)

    @property
    def node(self) -> str | None:
        """This contender's election znode, if it has one."""
        return self._node

    def current_leader(self) -> str | None:
        """Contender id of whoever holds the lowest election znode now (reads ZooKeeper)."""
        children = self._children()
        if not children:
            return None
        try:
            data, _ = _wait(self.client.get_async(f"{self.path}/{children[0]}"), f"read {self.path}", self.timeout)
        except NoNodeError:
            return None
        return data.decode("utf-8", "replace")

    # -- kazoo callbacks (connection thread; must not block) --

    def _on_connection_state(self, state: str) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            if self._set_leader(None):
                self._revoke_due = True
                self._events.put(_REVOKE)
        else:
            # CONNECTED again: same session (our znode is still there) or, after LOST, a new one
            # (`_check` finds our znode gone and rejoins).
            self._events.put(_CHECK)

    def _on_predecessor_event(self, event: Any) -> None:
        self._events.put(_CHECK)

    # -- the election thread --

    def _run(self) -> None:
        while True:
            event = self._events.get()
            if event is None:
                return
            try:
                self._handle(event)
            except (HighAvailabilityError, KazooException) as exc:
                # Retried on the next CONNECTED event; if still connected, poll again shortly.
                log.warning("leader election %s for %r: %s failed: %s", self.path, self.contender_id, event, exc)
                if self.client.state == KazooState.CONNECTED and self._thread is not None:
                    threading.Timer(0.1, self._events.put, args=(_CHECK,)).start()

    def _handle(self, event: str) -> None:
        if event == _REVOKE:
            if self._revoke_due:
                self._revoke_due = False
                self._callback(self._on_revoke)
        elif self.client.state == KazooState.CONNECTED and self._thread is not None:
            if self._node is None:
                self._join()
            self._check()

    def _join(self) -> None:
        self._nonce = uuid.uuid4().hex
        prefix = f"{self.path}/{self._nonce}__"
        _ensure_path(self.client, self.path, self.timeout)
        try:
            node = _wait(self.client.create_async(prefix, self.contender_id.encode(), ephemeral=True, sequence=True),
                         f"create {prefix}", self.timeout)
        except HighAvailabilityError:
            # The reply may be lost while the znode exists: look for our nonce before retrying.
            node = next((f"{self.path}/{c}" for c in self._children() if c.startswith(self._nonce)), None)
            if node is None:
                raise
        with self._lock:
            self._node, self._node_version = node, 0

    def _children(self) -> list[str]:
        """Election znodes, lowest sequence first."""
        _require_connected(self.client, f"list {self.path}")
        try:
            names = _wait(self.client.get_children_async(self.path), f"list {self.path}", self.timeout)
        except NoNodeError:
            return []
        return sorted((n for n in names if _CONTENDER_NAME.match(n)), key=lambda n: n[-10:])

    def _check(self) -> None:
        while True:
            node = self._node
            assert node is not None
            children = self._children()
            name = node.rpartition("/")[2]
            if name not in children:
                # Our znode is gone (the session expired while we were disconnected): rejoin.
                self._set_leader(None, notify=True)
                self._join()
                continue
            index = children.index(name)
            if index == 0:
                self._grant(int(name[-10:]))
                return
            self._set_leader(None, notify=True)
            predecessor = f"{self.path}/{children[index - 1]}"
            exists = _wait(self.client.exists_async(predecessor, watch=self._on_predecessor_event),
                           f"watch {predecessor}", self.timeout)
            if exists is not None:
                return  # woken by the watch when the predecessor goes

    def _grant(self, epoch: int) -> None:
        if self.client.state != KazooState.CONNECTED or self._thread is None:
            return
        with self._lock:
            if self._epoch == epoch:
                return
            self._epoch = epoch
            self.num_grants += 1
        log.info("contender %r leads %s (epoch %d)", self.contender_id, self.path, epoch)
        self._callback(self._on_grant)
        if self._epoch == epoch:  # the callback may have stopped the election
            self._granted.set()

    def _set_leader(self, epoch: int | None, notify: bool = False) -> bool:
        """Drop leadership (epoch None); returns whether it was held. Safe from any thread."""
        with self._lock:
            was = self._epoch is not None
            self._epoch = epoch
            if epoch is None:
                self._granted.clear()
        if was and notify:
            self._callback(self._on_revoke)
        return was

    def _callback(self, callback: LeaderCallback | None) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("leader election callback of %r failed", self.contender_id)

    def __repr__(self) -> str:
        return f"ZooKeeperLeaderElection({self.path!r}, contender={self.contender_id!r}, leader={self.is_leader})"


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

    def __init__(self, hosts: str = "", *, cluster_id: str = "default", session_timeout: float = 10.0,
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


def close_session(hosts: str, session: tuple[int, bytes], timeout: float = DEFAULT_OPERATION_TIMEOUT) -> None:
    """End the ZooKeeper session `session` on behalf of a process known to be dead.

    Its ephemeral nodes (a leader's election node) go at once instead of after the session
    timeout, so a standby is elected in milliseconds. Safe only when the owner is certainly dead
    (for a live owner this is a forced expiry: it sees LOST and steps down).

    Raises:
        HighAvailabilityError: ZooKeeper was not reached within `timeout` (names the hosts).
    """
    client = KazooClient(hosts=hosts, client_id=session, timeout=timeout)
    start_within(client, hosts, timeout)
    try:
        client.stop()
    finally:
        client.close()


def start_within(client: KazooClient, hosts: str, timeout: float) -> None:
    """Connect `client` within `timeout` seconds, or raise `HighAvailabilityError` at once.

    kazoo's own `start(timeout)` stops the client when the time is up and waits for that, which
    against a server that accepts connections but never answers takes another session timeout;
    here the failed client is stopped on a daemon thread instead.
    """
    event = client.start_async()
    if event.wait(timeout) and client.connected:
        return
    threading.Thread(target=_discard_client, args=(client,), name="barrierflow-zk-discard", daemon=True).start()
    raise HighAvailabilityError(f"cannot connect to ZooKeeper at {hosts} within {timeout:g} s "
                                f"({probe_hosts(hosts)})")


def _discard_client(client: KazooClient) -> None:
    with contextlib.suppress(Exception):
        client.stop()
        client.close()


def probe_hosts(hosts: str, timeout: float = 1.0) -> str:
    """What a plain TCP connection to each `host:port` of a connection string finds (for errors)."""
    found = []
    for entry in hosts.split("/", 1)[0].split(","):
        host, _, port = entry.strip().rpartition(":")
        if not host:
            host, port = entry.strip(), "2181"
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                found.append(f"{host}:{port} accepts connections but did not complete a ZooKeeper handshake")
        except ValueError:
            found.append(f"{entry.strip()}: not host:port")
        except OSError as exc:
            found.append(f"{host}:{port}: {exc.strerror or exc}")
    return "; ".join(found)
