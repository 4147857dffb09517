"""ZooKeeper leader election with fencing: one contender per coordinator process.

Each contender creates an ephemeral sequential znode under the job's `leader` node; the lowest
sequence leads; every other contender watches only its predecessor (no herd effect). Leadership is
revoked as soon as the connection is SUSPENDED or LOST; after a reconnect within the session the
contender checks again, after a LOST session it rejoins with a new znode. The znode name carries a
per-join nonce, so a create whose reply was lost is found again rather than duplicated. A leader's
`FencingToken` names its znode (see `checkpoint.io.zookeeper` for how the store checks it). The
work runs on one thread per contender: kazoo callbacks and watches must not block, so they only
enqueue events for it.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import threading
import uuid
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError

from checkpoint.io.recovery import (
    DEFAULT_OPERATION_TIMEOUT,
    FencingToken,
    HighAvailabilityError,
    LeaderCallback,
    LeaderElection,
    NotLeaderError,
)
from checkpoint.io.zookeeper_client import ensure_path, require_connected, wait

log = logging.getLogger(__name__)

_CONTENDER_NAME = re.compile(r"^([0-9a-f]{32})__(\d{10})$")
_JOIN, _CHECK, _REVOKE = "join", "check", "revoke"


class ZooKeeperLeaderElection(LeaderElection):
    """One contender in a ZooKeeper leader election (see this module's header).

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
                wait(self.client.delete_async(node), f"delete {node}", self.timeout)

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
            data, _ = wait(self.client.get_async(f"{self.path}/{children[0]}"), f"read {self.path}", self.timeout)
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
        ensure_path(self.client, self.path, self.timeout)
        try:
            node = wait(self.client.create_async(prefix, self.contender_id.encode(), ephemeral=True, sequence=True),
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
        require_connected(self.client, f"list {self.path}")
        try:
            names = wait(self.client.get_children_async(self.path), f"list {self.path}", self.timeout)
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
            exists = wait(self.client.exists_async(predecessor, watch=self._on_predecessor_event),
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
