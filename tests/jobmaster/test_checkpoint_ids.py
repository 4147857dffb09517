"""`resume_checkpoint_ids`: the one rule by which every coordinator of a run — the first, a
standalone replacement, a promoted standby, on either executor — sets its id counter, so no
checkpoint id is used twice (`checkpoint-ids-increase`), across failover, HA and runs sharing a
checkpoint directory."""

from __future__ import annotations

import dataclasses

import pytest

from checkpoint.completed import CompletedCheckpoint
from checkpoint.ids import StandaloneCheckpointIDCounter
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore
from checkpoint.storage.store import StandaloneCompletedCheckpointStore
from runtime.jobmaster.coordination.coordinators import resume_checkpoint_ids
from runtime.workloads.seeded import make_env, random_spec
from vocabulary.handles import TaskAcknowledgement, TaskId

JOB = "job"
TASK = TaskId("map", 0)


def completed(storage: CheckpointStorage, checkpoint_id: int) -> CompletedCheckpoint:
    handle = storage.write_task_file(JOB, checkpoint_id, "map[0]/keyed", b"state")
    ack = TaskAcknowledgement(TASK, checkpoint_id, {"keyed": (handle,)}, state_bytes=handle.size)
    return CompletedCheckpoint(JOB, checkpoint_id, float(checkpoint_id), checkpoint_id + 0.5, {TASK: ack})


def test_ids_continue_above_a_newer_checkpoint_skipped_as_corrupt() -> None:
    """The newest retained checkpoint is 1, but 2 exists (its metadata corrupt): a counter that
    does not know of it (a fresh HA counter) must not hand out 2 again, overwriting its files."""
    storage = CheckpointStorage(MemoryBlobStore())
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=2)
    store.add_checkpoint(completed(storage, 1))
    second = completed(storage, 2)
    store.add_checkpoint(second)
    storage.blob_store.put(second.metadata_path, b"torn")
    fresh = StandaloneCompletedCheckpointStore(storage, JOB, retained=2)
    assert [c.checkpoint_id for c in fresh.recover()] == [1]
    counter = StandaloneCheckpointIDCounter()
    resume_checkpoint_ids(counter, fresh, storage, JOB, first_checkpoint_id=1)
    assert counter.get() == 3


def test_ids_continue_after_the_restored_checkpoint_and_never_go_back() -> None:
    storage = CheckpointStorage(MemoryBlobStore())
    store = StandaloneCompletedCheckpointStore(storage, JOB)
    counter = StandaloneCheckpointIDCounter()
    resume_checkpoint_ids(counter, store, storage, JOB, first_checkpoint_id=8)
    assert counter.get() == 8
    counter.set_count(20)  # another contender advanced the shared counter
    resume_checkpoint_ids(counter, store, storage, JOB, first_checkpoint_id=8)
    assert counter.get() == 20


def run_ids(directory: str) -> list[int]:
    env = make_env(random_spec(3), mode="aligned")
    env.checkpoint_config = dataclasses.replace(env.checkpoint_config, storage=directory, retained=2)
    env.set_high_availability("zookeeper", cluster_id="sim")
    result = env.execute(JOB, executor="sim", seed=1)
    return [c.id for c in result.checkpoints]


@pytest.mark.slow
def test_a_second_ha_run_in_the_same_directory_does_not_reuse_the_first_runs_ids(tmp_path) -> None:
    """The simulator's HA id counter lives in memory, one per run (ZooKeeper's outlives the run):
    a second run in the same checkpoint directory handed out ids 1, 2, ... again and overwrote
    the first run's retained checkpoints (chk-<id> files of another run)."""
    first = run_ids(str(tmp_path))
    kept = sorted(p.name for p in (tmp_path / JOB).glob("chk-*"))
    second = run_ids(str(tmp_path))
    assert first and second
    assert min(second) > max(first), (first, second)
    assert set(kept) <= {p.name for p in (tmp_path / JOB).glob("chk-*")}, "the first run's checkpoints were overwritten"
