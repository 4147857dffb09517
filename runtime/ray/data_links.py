"""Data calls between workers over TCP sockets instead of Ray actor calls (`data_transport="socket"`,
the default).

A Ray actor call costs a worker ~0.6-1 ms of CPU on each side when the calls come a few hundred a
second (its threads wake for every call), a frame on a socket ~0.1-0.2 ms
(`benchmarks.transport_cost`), and the data calls (`push`, `add_credits`: `SENT_METHODS`) are
most of a job's calls. So with `data_transport="socket"` they go as frames on one TCP
connection per sending process and receiving worker, as Flink's TaskManagers exchange buffers over
their own Netty connections while the control messages go through its RPC system:

* `DataInbox`: a worker's listening socket on its node's address. Each connection is read by a
  thread of its own, which hands every call to the worker exactly as Ray's call would
  (`WorkerActor.send`: the subtask's mailbox). A connection must first send the inbox's token,
  which only a Ray call to the worker gives (`WorkerActor.data_address`): the socket takes pickles,
  so no one else may write to it.
* `DataLink`: the connection from this process to one worker's inbox. Frames are written whole
  under a lock, so the calls of one channel (always sent from one thread) keep their order.
* `ReportsBySocket`: the tasks' reports to the coordinator (acknowledgements, declines, "source
  finished", batched per worker by `WorkerReports`) as frames to the coordinator actor's inbox,
  whose address the driver hands to the tasks in their deployment.

Failure. A link to a worker that died drops what is sent to it, as a Ray call whose result no
one reads is lost (the driver finds the death by its heartbeats and fails the job over; the next
attempt's workers are other actors, with links of their own), and tries to reconnect at most once
a `RECONNECT_INTERVAL`. A frame lost on a connection that broke while both ends lived is a gap in
the channel's sequence numbers, which the receiver's check turns into a task failure. A worker
that lives but does not tell its address within `CONNECT_TIMEOUT` (a busy or starting process) is
neither: what is sent to it cannot be dropped — a channel's last frames (its end of partition)
have no later frame to show the gap, and the receiver would wait for them forever — so `send`
raises `DataLinkError` and the sending task fails over instead.
"""

from __future__ import annotations

import hmac
import logging
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("barrierflow.ray")

#: what `data_transport` may be: Ray actor calls or `DataLink` sockets
DATA_TRANSPORTS = ("ray", "socket")
#: the executor's default: sockets (see the module docstring and `benchmarks/README.md`)
DEFAULT_DATA_TRANSPORT = "socket"
#: seconds between attempts to reach a worker whose connection failed
RECONNECT_INTERVAL = 1.0
#: seconds a connection attempt or a worker's address lookup may take
CONNECT_TIMEOUT = 10.0

#: the method of a frame to a worker that carries the coordinator's control messages
#: (`(None, CONTROL, items)`: `WorkerActor.control`)
CONTROL = "control"

_HEADER = struct.Struct("!I")
_TOKEN_BYTES = 32


class DataLinkError(RuntimeError):
    """A frame could not be sent to an actor that may still be alive (see the module docstring)."""


def check_data_transport(value: str) -> str:
    """Raises: ValueError naming the option and what it may be."""
    if value not in DATA_TRANSPORTS:
        raise ValueError(f"data_transport must be one of {', '.join(map(repr, DATA_TRANSPORTS))}, got {value!r}")
    return value


class DataInbox:
    """An actor's listening socket: every frame of every connection is a call handed to
    `deliver`, in the order the connection carried them (a worker's: `(subtask, method, args)`; the
    coordinator's: a report `(items, cause)`).

    Args:
        deliver: takes one call (`WorkerActor.send`, `CoordinatorActor.report`); what it raises is
            logged, the connection goes on.
        host: the address to listen on (the node's).
    """

    def __init__(self, deliver: Callable[[Any], None], host: str) -> None:
        self._deliver = deliver
        #: frames delivered (`WorkerActor.calls`)
        self.frames = 0
        self.token = os.urandom(_TOKEN_BYTES)
        self._server = socket.create_server((host, 0))
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        threading.Thread(target=self._accept, daemon=True, name="barrierflow-inbox").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._read, args=(conn,), daemon=True, name="barrierflow-inbox-conn").start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb", buffering=1 << 16) as reader:
            if not hmac.compare_digest(reader.read(_TOKEN_BYTES), self.token):
                log.warning("barrierflow ray: a connection to a worker's data inbox without its token was closed")
                return
            while header := reader.read(_HEADER.size):
                body = reader.read(_HEADER.unpack(header)[0]) if len(header) == _HEADER.size else b""
                try:
                    call = pickle.loads(body)
                except Exception:  # a sender that died mid-frame: the connection ends here
                    return
                self.frames += 1
                try:
                    self._deliver(call)
                except Exception:
                    log.exception("barrierflow ray: a call that came on an actor's socket failed")

    def close(self) -> None:
        self._server.close()


class DataLink:
    """This process's connection to one actor's `DataInbox` (a worker's, or the coordinator's for
    the reports); `send` never raises (see the module)."""

    def __init__(self, actor: Any, address: tuple[str, int, bytes] | None = None) -> None:
        from ray import cloudpickle  # (here, as `ray` below: see `_connect`)

        #: Ray's pickler, as a Ray call's arguments are pickled (a class defined in the driver's
        #: `__main__` goes by value); the inbox reads it with `pickle.loads`
        self._dumps = cloudpickle.dumps
        self._actor = actor
        #: (host, port, token) when the caller knew it; else asked of the actor on first connect
        self._address = address
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._failed_at: float | None = None

    def send(self, call: tuple[Any, str, tuple[Any, ...]]) -> None:
        """Send one call to the actor: `(subtask, method, args)` to a worker, `(items, cause)` to the
        coordinator.

        Raises:
            DataLinkError: the actor did not tell its address within `CONNECT_TIMEOUT` (nothing
                was sent; the next send asks again).
        """
        frame = self._dumps(call, protocol=5)
        header = _HEADER.pack(len(frame))
        with self._lock:
            if self._socket is None and not self._connect():
                return
            try:
                _send_frame(self._socket, header, frame)
            except OSError as exc:
                self._lost(f"sending failed: {exc}")

    def _connect(self) -> bool:
        if self._failed_at is not None and time.monotonic() - self._failed_at < RECONNECT_INTERVAL:
            return False
        import ray  # (here: the handles' module is imported where Ray is not, e.g. by the benchmarks' parsers)
        from ray.exceptions import GetTimeoutError

        try:
            host, port, token = self._address or ray.get(self._actor.data_address.remote(), timeout=CONNECT_TIMEOUT)
        except GetTimeoutError as exc:  # alive but busy or starting: not a death, so nothing may be dropped
            raise DataLinkError(f"{self._actor} did not tell its data address within {CONNECT_TIMEOUT:g} s: "
                                f"frames to it cannot be sent") from exc
        except Exception as exc:  # the worker died (a Ray error): dropped, as its calls were
            self._lost(f"asking its address failed: {exc}")
            return False
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(token)
        except Exception as exc:  # its process is gone (its inbox refuses or resets): dropped, as its calls were
            self._lost(f"connecting failed: {exc}")
            return False
        self._socket, self._failed_at = sock, None
        return True

    def _lost(self, why: str) -> None:
        if self._socket is not None:
            self._socket.close()
        self._socket, self._failed_at = None, time.monotonic()
        log.info("barrierflow ray: data link to %s: %s (what is sent meanwhile is dropped)", self._actor, why)


def _send_frame(sock: socket.socket, header: bytes, frame: bytes) -> None:
    """Write `header` then `frame` whole, without joining them (a frame may be tens of KB)."""
    sent = sock.sendmsg((header, frame))
    if sent < len(header):
        sock.sendall(header[sent:])
        sent = len(header)
    if sent - len(header) < len(frame):
        sock.sendall(memoryview(frame)[sent - len(header):])


_links: dict[Any, DataLink] = {}
_links_lock = threading.Lock()


def link_to(actor: Any, address: tuple[str, int, bytes] | None = None) -> DataLink:
    """This process's `DataLink` to `actor` (one per actor, made on first use; `address`: its
    inbox's, when known, so the first send asks the actor nothing)."""
    key = actor._actor_id  # (an actor's id is never reused)
    link = _links.get(key)
    if link is None:
        with _links_lock:
            link = _links.setdefault(key, DataLink(actor, address))
    return link


class _Report:
    __slots__ = ("_link",)

    def __init__(self, link: DataLink) -> None:
        self._link = link

    def remote(self, items: list[tuple[Any, ...]], cause: str) -> None:
        self._link.send((items, cause))


class ReportsBySocket:
    """Where a task sends its reports (`WorkerReports`) when they go as frames: `report.remote(items,
    cause)` is a frame to the coordinator actor's inbox (`CoordinatorActor.data_address`, asked
    once per attempt by the driver, so a worker never waits on a busy coordinator to connect).
    Picklable: it travels in deployments."""

    def __init__(self, coordinator: Any, address: tuple[str, int, bytes]) -> None:
        self.coordinator, self.address = coordinator, address

    @property
    def report(self) -> _Report:
        return _Report(link_to(self.coordinator, self.address))
