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


@pytest.mark.ray
def test_a_call_to_a_killed_in_memory_storage_says_what_the_driver_says_of_it(ray_session) -> None:
    """A task or the coordinator finding the storage actor dead words it as the driver's ping does
    (one message, whoever notices first), on one line."""
    from checkpoint.storage.layout import StorageError
    from runtime.ray.service_deaths import MEMORY_STORAGE_DIED
    from runtime.ray.services import BlobStoreService, RemoteBlobStore

    ray = ray_session
    handle = ray.remote(BlobStoreService).remote()
    store = RemoteBlobStore(handle)
    store.put("job/chk-1/_metadata", b"{}")
    ray.kill(handle, no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError):  # (a kill lands asynchronously: wait until it did)
        for _ in range(1000):
            ray.get(handle.ping.remote(), timeout=60)
    with pytest.raises(StorageError) as gone:
        store.get("job/chk-1/_metadata")
    message = str(gone.value)
    assert message.startswith(f"{MEMORY_STORAGE_DIED}, and every checkpoint with it") and "(get: " in message, message
    assert "\n" not in message and "enable_checkpointing(storage=DIR)" in message, message
