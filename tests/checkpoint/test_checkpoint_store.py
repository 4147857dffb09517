from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from ckpt_testkit import FailingBlobStore

from checkpoint.completed import CompletedCheckpoint
from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore, StorageError
from checkpoint.storage.store import StandaloneCompletedCheckpointStore
from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId

JOB = "job-1"
TASK = TaskId("map", 0)


@pytest.fixture(params=["memory", "fs"])
def storage(request, tmp_path) -> CheckpointStorage:
    blob = MemoryBlobStore() if request.param == "memory" else FsBlobStore(str(tmp_path / "chk"))
    return CheckpointStorage(blob)


def make_checkpoint(storage: CheckpointStorage, checkpoint_id: int, *extra: StateHandle) -> CompletedCheckpoint:
    own = storage.write_task_file(JOB, checkpoint_id, "map[0]/keyed", f"state-{checkpoint_id}".encode())
    ack = TaskAcknowledgement(TASK, checkpoint_id, {"keyed": (own, *extra)}, state_bytes=own.size)
    return CompletedCheckpoint(JOB, checkpoint_id, float(checkpoint_id), checkpoint_id + 0.5, {TASK: ack})


def files(storage: CheckpointStorage) -> list[str]:
    return storage.blob_store.list(f"{JOB}/")


def test_retained_keeps_latest_and_deletes_dropped_files(storage) -> None:
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=2)
    assert store.get_latest_checkpoint() is None and store.retained == 2
    assert store.add_checkpoint(make_checkpoint(storage, 1)) == []
    assert store.add_checkpoint(make_checkpoint(storage, 2)) == []
    dropped = store.add_checkpoint(make_checkpoint(storage, 5))
    assert [c.checkpoint_id for c in dropped] == [1]
    assert [c.checkpoint_id for c in store.get_all_checkpoints()] == [2, 5]
    assert store.get_latest_checkpoint().metadata_path == f"{JOB}/chk-5/_metadata"
    assert files(storage) == [
        f"{JOB}/chk-2/_metadata", f"{JOB}/chk-2/taskowned/map[0]/keyed",
        f"{JOB}/chk-5/_metadata", f"{JOB}/chk-5/taskowned/map[0]/keyed",
    ]


def test_files_referenced_by_retained_checkpoints_survive(storage) -> None:
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=1)
    first = make_checkpoint(storage, 1)
    store.add_checkpoint(first)
    reused = next(first.state_handles())  # chk-2 references a file in chk-1's directory
    shared = storage.write_shared_file(JOB, "sst-7", b"shared")
    loose = storage.write_file(f"{JOB}/merged/seg-1", b"segments")
    store.add_checkpoint(make_checkpoint(storage, 2, reused, shared, loose))
    assert storage.blob_store.exists(reused.path)
    assert not storage.blob_store.exists(f"{JOB}/chk-1/_metadata")
    store.add_checkpoint(make_checkpoint(storage, 3))
    # dropping chk-2 deletes what only it referenced, except shared/ (the registry's business)
    assert not storage.blob_store.exists(reused.path)
    assert not storage.blob_store.exists(loose.path)
    assert storage.blob_store.exists(shared.path)


def test_add_rejects_wrong_job_and_old_ids(storage) -> None:
    store = StandaloneCompletedCheckpointStore(storage, JOB)
    store.add_checkpoint(make_checkpoint(storage, 3))
    with pytest.raises(ValueError, match="not newer than the latest retained checkpoint 3"):
        store.add_checkpoint(make_checkpoint(storage, 3))
    other = CompletedCheckpoint("other", 4, 0.0, 1.0, {})
    with pytest.raises(ValueError, match="job 'other'"):
        store.add_checkpoint(other)
    with pytest.raises(ValueError, match="retained"):
        StandaloneCompletedCheckpointStore(storage, JOB, retained=0)


def test_failed_metadata_write_leaves_store_unchanged() -> None:
    blob = FailingBlobStore(MemoryBlobStore())
    storage = CheckpointStorage(blob)
    store = StandaloneCompletedCheckpointStore(storage, JOB)
    store.add_checkpoint(make_checkpoint(storage, 1))
    second = make_checkpoint(storage, 2)
    blob.fail_writes(1)
    with pytest.raises(StorageError):
        store.add_checkpoint(second)
    assert [c.checkpoint_id for c in store.get_all_checkpoints()] == [1]
    assert blob.exists(f"{JOB}/chk-1/_metadata")
    assert store.add_checkpoint(second)[0].checkpoint_id == 1  # retry works


def test_recover_after_restart(storage) -> None:
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=2)
    for checkpoint_id in (1, 2, 3):
        store.add_checkpoint(make_checkpoint(storage, checkpoint_id))
    fresh = StandaloneCompletedCheckpointStore(storage, JOB, retained=2)
    recovered = fresh.recover()
    assert [c.checkpoint_id for c in recovered] == [2, 3]
    assert recovered == store.get_all_checkpoints()
    assert fresh.highest_checkpoint_id_seen == 3


def test_recover_keeps_at_most_retained_and_discards_older(storage) -> None:
    wide = StandaloneCompletedCheckpointStore(storage, JOB, retained=3)
    for checkpoint_id in (1, 2, 3):
        wide.add_checkpoint(make_checkpoint(storage, checkpoint_id))
    narrow = StandaloneCompletedCheckpointStore(storage, JOB, retained=1)
    assert [c.checkpoint_id for c in narrow.recover()] == [3]
    assert storage.list_checkpoint_ids(JOB) == [3]


@pytest.mark.parametrize("target", ["metadata", "state", "missing-state", "missing-metadata"])
def test_recover_skips_corrupt_checkpoint_with_warning(storage, caplog, target) -> None:
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=1)
    store.add_checkpoint(make_checkpoint(storage, 1))
    latest = make_checkpoint(storage, 2)
    store.add_checkpoint(latest)
    # keep chk-1 around too: a store with retained=1 deleted it, so write it again
    storage.write_metadata(make_checkpoint(storage, 1))
    blob = storage.blob_store
    bad_path = latest.metadata_path if target.endswith("metadata") else next(latest.state_handles()).path
    if target.startswith("missing"):
        blob.delete(bad_path)
    else:
        data = bytearray(blob.get(bad_path))
        data[len(data) // 2] ^= 0x10
        blob.put(bad_path, bytes(data))
    fresh = StandaloneCompletedCheckpointStore(storage, JOB, retained=1)
    with caplog.at_level(logging.INFO, logger="checkpoint.storage.store"):
        recovered = fresh.recover()
    assert [c.checkpoint_id for c in recovered] == [1]
    # no metadata is what every checkpoint that never completed leaves: said, but not as a warning
    # (a restore names what it skips itself); damage is a warning
    level = logging.INFO if target == "missing-metadata" else logging.WARNING
    skipped = [r.getMessage() for r in caplog.records if r.levelno == level and "skipping" in r.getMessage()]
    assert len(skipped) == 1 and "checkpoint 2" in skipped[0] and bad_path in skipped[0]
    assert not [r for r in caplog.records if r.levelno > level]
    assert fresh.highest_checkpoint_id_seen == 2  # new ids must not reuse chk-2
    assert 2 in storage.list_checkpoint_ids(JOB)  # left for inspection


def test_recover_with_nothing_in_storage(storage) -> None:
    store = StandaloneCompletedCheckpointStore(storage, JOB)
    assert store.recover() == [] and store.highest_checkpoint_id_seen == 0


def test_discard_all_checkpoints(storage) -> None:
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=2)
    store.add_checkpoint(make_checkpoint(storage, 1))
    store.add_checkpoint(make_checkpoint(storage, 2))
    shared = storage.write_shared_file(JOB, "s", b"x")
    store.discard_all_checkpoints()
    assert store.get_all_checkpoints() == [] and store.num_checkpoints == 0
    assert files(storage) == [shared.path]


def test_cleanup_failure_is_logged_not_raised(caplog) -> None:
    class NoDelete(MemoryBlobStore):
        def delete(self, path: str) -> None:
            raise StorageError(f"cannot delete {path}")

    storage = CheckpointStorage(NoDelete())
    store = StandaloneCompletedCheckpointStore(storage, JOB)
    store.add_checkpoint(make_checkpoint(storage, 1))
    with caplog.at_level(logging.WARNING, logger="checkpoint.storage.store"):
        dropped = store.add_checkpoint(make_checkpoint(storage, 2))
    assert [c.checkpoint_id for c in dropped] == [1]
    assert "could not delete the files of checkpoint 1" in caplog.text


def test_discards_on_an_executor_leave_the_completion_and_delete_later(storage, held_executor) -> None:
    executor = held_executor
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=1, discard_executor=executor)
    first = make_checkpoint(storage, 1)
    store.add_checkpoint(first)
    reused = next(first.state_handles())
    store.add_checkpoint(make_checkpoint(storage, 2, reused))
    # the completion did not wait for the delete: chk-1 is dropped but its files are still there
    assert [c.checkpoint_id for c in store.get_all_checkpoints()] == [2]
    assert storage.blob_store.exists(f"{JOB}/chk-1/_metadata") and len(executor.jobs) == 1
    executor.run_all()
    assert not storage.blob_store.exists(f"{JOB}/chk-1/_metadata")
    assert storage.blob_store.exists(reused.path)  # chk-2 still references it
    store.add_checkpoint(make_checkpoint(storage, 3))
    executor.run_all()
    assert files(storage) == [f"{JOB}/chk-3/_metadata", f"{JOB}/chk-3/taskowned/map[0]/keyed"]


def test_shutdown_waits_for_the_deletes_and_a_failed_one_is_logged(caplog) -> None:
    class SlowDelete(MemoryBlobStore):
        fail = False

        def delete(self, path: str) -> None:
            time.sleep(0.02)
            if self.fail:
                raise StorageError(f"cannot delete {path}")
            super().delete(path)

    blob = SlowDelete()
    storage = CheckpointStorage(blob)
    with ThreadPoolExecutor(1) as executor:
        store = StandaloneCompletedCheckpointStore(storage, JOB, retained=1, discard_executor=executor)
        store.add_checkpoint(make_checkpoint(storage, 1))
        store.add_checkpoint(make_checkpoint(storage, 2))  # drops chk-1: deleted on the thread
        store.shutdown()
        assert files(storage) == [f"{JOB}/chk-2/_metadata", f"{JOB}/chk-2/taskowned/map[0]/keyed"]
        blob.fail = True
        store.add_checkpoint(make_checkpoint(storage, 3))
        with caplog.at_level(logging.WARNING, logger="checkpoint.storage.store"):
            store.shutdown()
    assert "could not delete the files of checkpoint 2" in caplog.text
    assert [c.checkpoint_id for c in store.get_all_checkpoints()] == [3]
