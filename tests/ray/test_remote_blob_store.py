"""`RemoteBlobStore` (in-memory checkpoint storage reached through a Ray actor) under threads.

The coordinator actor uses one from two threads at once: its timer thread (the checkpoint id
counter's `put` on every trigger) and its discard thread (deleting dropped checkpoints). Before
the fix, its list of outstanding deletes was shared unguarded: `ray.wait` raised AssertionError
inside the timer callback that triggered the final checkpoint, nothing retriggered it, and the
job hung until the driver gave up (CI: `test_hung_task_is_detected_by_heartbeats_and_replaced`,
`test_a_coordinator_crash_before_notifying_on_ray`)."""

from __future__ import annotations

import threading

import pytest

N = 2000


@pytest.mark.ray
def test_deletes_and_puts_from_two_threads_neither_fail_nor_get_lost(ray_session) -> None:
    from runtime.ray.services import BlobStoreService, RemoteBlobStore

    ray = ray_session
    store = RemoteBlobStore(ray.remote(BlobStoreService).remote())
    for i in range(N):
        store.put(f"old/{i}", b"x")
    errors: list[BaseException] = []

    def run(work) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(exc)

    def delete_all() -> None:
        for i in range(N):
            store.delete(f"old/{i}")

    def put_all() -> None:
        for i in range(N // 2):
            store.put(f"new/{i}", b"y")

    threads = [threading.Thread(target=run, args=(delete_all,)), threading.Thread(target=run, args=(put_all,))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish within 120 s"
    assert errors == [], errors
    assert len(store.list("new/")) == N // 2
    assert store.list("old/") == [], "some deletes never ran"
