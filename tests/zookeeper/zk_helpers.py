"""Helpers shared by the ZooKeeper tests (checkpoint builders, the counter worker process)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

from checkpoint.completed import CompletedCheckpoint
from checkpoint.storage.layout import CheckpointStorage
from vocabulary.handles import TaskAcknowledgement, TaskId

#: long enough that a client starved of CPU on a loaded machine keeps its session (expiry tests
#: expire sessions on purpose: `expire_session`)
SESSION_TIMEOUT = 10.0
CONNECTION_RETRY = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}

def new_client(hosts: str, **kwargs) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT, connection_retry=CONNECTION_RETRY, **kwargs)
    client.start(timeout=10)
    return client


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `predicate` until true; returns the seconds it took. Fails the test on timeout."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - start


def expire_session(client: KazooClient, hosts: str, timeout: float = 10.0) -> None:
    """Force a real session expiry: a second client takes over the session and closes it; the
    first client then sees LOST and reconnects with a new session."""
    states: list[str] = []
    lost = threading.Event()

    def listener(state: str) -> None:
        states.append(state)
        if state == KazooState.LOST:
            lost.set()

    old_session = client.client_id[0]
    client.add_listener(listener)
    try:
        thief = KazooClient(hosts=hosts, client_id=client.client_id, timeout=SESSION_TIMEOUT,
                            connection_retry=CONNECTION_RETRY)
        thief.start(timeout=10)
        thief.stop()
        thief.close()
        if not lost.wait(timeout):
            pytest.fail(f"client never saw its session expire (states: {states})")
        wait_until(lambda: client.connected and client.client_id[0] != old_session, timeout,
                   "a new session after expiry")
    finally:
        client.remove_listener(listener)


def make_checkpoint(storage: CheckpointStorage, job_id: str, checkpoint_id: int) -> CompletedCheckpoint:
    """A one-task checkpoint whose state file is written through `storage`."""
    task = TaskId("count", 0)
    handle = storage.write_task_file(job_id, checkpoint_id, "count-0.state", f"state-{checkpoint_id}".encode())
    ack = TaskAcknowledgement(task, checkpoint_id, {"keyed": (handle,)}, state_bytes=handle.size)
    return CompletedCheckpoint(job_id, checkpoint_id, float(checkpoint_id), checkpoint_id + 0.5, {task: ack})


def increment_worker(repo_root: str, hosts: str, path: str, count: int, barrier, results) -> None:
    """Child process: take `count` ids from the shared counter, report them in order."""
    sys.path.insert(0, repo_root)
    from kazoo.client import KazooClient

    from checkpoint.io.zookeeper import ZooKeeperCheckpointIDCounter

    client = KazooClient(hosts=hosts, timeout=4.0)
    client.start(timeout=10)
    try:
        counter = ZooKeeperCheckpointIDCounter(client, path)
        counter.start()
        barrier.wait(timeout=60)
        results.put([counter.get_and_increment() for _ in range(count)])
    finally:
        client.stop()
        client.close()


REPO_ROOT = str(Path(__file__).resolve().parents[2])
