"""A kazoo client's calls bounded in time, connecting within a deadline, and ending a dead
process's session: what every ZooKeeper high-availability module (`checkpoint.io.zookeeper`,
`checkpoint.io.zookeeper_election`) shares."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError

from checkpoint.io.recovery import DEFAULT_OPERATION_TIMEOUT, HighAvailabilityError, ZooKeeperSuspendedError


def require_connected(client: KazooClient, what: str) -> None:
    """Raise at once unless `client` is CONNECTED (a plain kazoo call would block while SUSPENDED)."""
    if client.state != KazooState.CONNECTED:
        error = ZooKeeperSuspendedError if client.state == KazooState.SUSPENDED else HighAvailabilityError
        raise error(f"cannot {what}: ZooKeeper client is {client.state}, not CONNECTED")


# Outcomes callers handle themselves; everything else becomes HighAvailabilityError.
_PASS_THROUGH = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)


def wait(result: Any, what: str, timeout: float) -> Any:
    """Wait for a kazoo async result, translating failures into `HighAvailabilityError`."""
    try:
        return result.get(timeout=timeout)
    except _PASS_THROUGH:
        raise
    except KazooTimeoutError as exc:
        raise HighAvailabilityError(f"ZooKeeper did not answer within {timeout} s: {what}") from exc
    except KazooException as exc:
        raise HighAvailabilityError(f"ZooKeeper failed to {what}: {type(exc).__name__} {exc}") from exc


def ensure_path(client: KazooClient, path: str, timeout: float) -> None:
    """Create `path` and its parents if missing, bounded by `timeout`."""
    require_connected(client, f"create {path}")
    wait(client.ensure_path_async(path), f"create {path}", timeout)


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
