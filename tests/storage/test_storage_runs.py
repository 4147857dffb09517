"""Runs sharing a checkpoint directory: a new run of a job never recovers another
run's checkpoints unless asked to (`restore_from`), never reuses their ids or overwrites their
files, and `checkpoints gc` keeps the id counter."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.completed import CompletedCheckpoint
from checkpoint.ids import StorageCheckpointIDCounter
from checkpoint.io.ha_memory import InMemoryHighAvailabilityServices
from checkpoint.io.tools import (
    CheckpointToolError,
    list_checkpoints,
    load_checkpoint,
    open_checkpoints,
)
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore
from checkpoint.storage.store import StandaloneCompletedCheckpointStore, run_of
from operators import CollectSink
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.cli import main as cli
from runtime.jobmaster.result import JobFailedError
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.fault_plan import CoordinatorCrash, TaskCrash
from vocabulary.handles import TaskAcknowledgement, TaskId
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 37}"} for i in range(3000)]


def job_env(storage: Path) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=16)
    env.enable_checkpointing(interval=0.002, storage=str(storage), retained=2, tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.001))
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


def expected_output():
    env = StreamEnvironment(parallelism=1)
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return multiset(env.execute("ref", executor="sim").output("out"))


def metadata_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("job/chk-*/_metadata"))}


def test_a_new_run_after_gc_neither_reuses_ids_nor_recovers_the_old_runs_checkpoints(tmp_path: Path) -> None:
    # regression: gc deleted <job>/_checkpoint_counter as an orphan, the next run started its ids at
    # 1 again and overwrote the first run's chk-N directories, and a coordinator crash then
    # recovered the first run's checkpoint (UnknownTransactionError, or its state)
    first = job_env(tmp_path).execute("job", executor="sim", seed=1)
    assert cli(["checkpoints", "gc", str(tmp_path)]) == 0
    assert (tmp_path / "job" / "_checkpoint_counter").is_file()
    before = metadata_files(tmp_path)
    first_ids = {c.id for c in first.completed_checkpoints}
    second = job_env(tmp_path).execute("job", executor="sim", seed=2,
                                       faults=FaultPlan.of(CoordinatorCrash(at_fraction=0.5)))
    assert multiset(second.output("out")) == expected_output()
    assert second.restarts == 1
    assert min(c.id for c in second.checkpoints) > max(first_ids)
    after = metadata_files(tmp_path)
    assert {k: after.get(k) for k in before} == before, "the first run's checkpoints were overwritten"
    runs = {info.run_id for info in list_checkpoints(open_checkpoints(str(tmp_path)), "job") if info.valid}
    assert runs == {first.run_id, second.run_id} and first.run_id != second.run_id


def test_a_coordinator_crash_before_a_new_runs_first_checkpoint_starts_it_from_scratch(tmp_path: Path) -> None:
    # regression: the crashed coordinator's successor recovered the previous run's newest checkpoint
    job_env(tmp_path).execute("job", executor="sim", seed=1)
    second = job_env(tmp_path).execute("job", executor="sim", seed=3,
                                       faults=FaultPlan.of(CoordinatorCrash(at=0.0005)))
    assert second.restarts == 1
    assert second.restored_checkpoints == [None]
    assert multiset(second.output("out")) == expected_output()


def test_restore_from_takes_the_newest_runs_checkpoint_unless_a_run_is_named(tmp_path: Path) -> None:
    first = job_env(tmp_path).execute("job", executor="sim", seed=1)
    second = job_env(tmp_path).execute("job", executor="sim", seed=2)
    newest = max(c.id for c in second.completed_checkpoints)
    completed, _ = load_checkpoint(str(tmp_path))
    assert (completed.checkpoint_id, completed.properties["run_id"]) == (newest, second.run_id)
    named, _ = load_checkpoint(str(tmp_path), run_id=first.run_id)
    assert (named.checkpoint_id, named.properties["run_id"]) == (max(c.id for c in first.completed_checkpoints),
                                                                 first.run_id)
    with pytest.raises(CheckpointToolError, match=rf"no checkpoint of run 'nope' of job 'job' in {tmp_path}; "
                       rf"runs: .*{first.run_id}"):
        load_checkpoint(str(tmp_path), run_id="nope")
    # asked for: a run in the same directory restores the first run's checkpoint and goes on from it
    restored = job_env(tmp_path).restore_from(str(tmp_path), run_id=first.run_id).execute(
        "job", executor="sim", seed=4, committer=first.committer)
    assert restored.metrics.records_in == 0, "restored from the first run's final checkpoint: nothing to read"
    assert multiset(restored.output("out")) == expected_output()


# --------------------------------------------------------------------------- units


def make_checkpoint(storage: CheckpointStorage, checkpoint_id: int) -> CompletedCheckpoint:
    task = TaskId("count", 0)
    handle = storage.write_task_file("pv", checkpoint_id, "count-0.state", f"state-{checkpoint_id}".encode())
    ack = TaskAcknowledgement(task, checkpoint_id, {"keyed": (handle,)}, state_bytes=handle.size)
    return CompletedCheckpoint("pv", checkpoint_id, float(checkpoint_id), checkpoint_id + 0.5, {task: ack})


def ids(checkpoints) -> list[int]:
    return [c.checkpoint_id for c in checkpoints]


def _storage_with_checkpoints(ids: list[int], run_id: str):
    storage = CheckpointStorage(MemoryBlobStore())
    store = StandaloneCompletedCheckpointStore(storage, "pv", retained=len(ids), run_id=run_id)
    for checkpoint_id in ids:
        store.add_checkpoint(make_checkpoint(storage, checkpoint_id))
    return storage


def test_a_lost_counter_continues_above_every_checkpoint_directory_and_never_goes_back() -> None:
    storage = _storage_with_checkpoints([7, 8], "first")
    counter = StorageCheckpointIDCounter(storage, "pv")
    counter.start()  # no counter file (lost, or written by an older version): above chk-8
    assert counter.get() == 9
    counter.set_count(3)  # e.g. a restore of checkpoint 2 into the same directory
    assert counter.get_and_increment() == 9
    assert storage.blob_store.get("pv/_checkpoint_counter") == b"10"


def test_recovery_ignores_other_runs_checkpoints_and_never_discards_them() -> None:
    storage = _storage_with_checkpoints([1, 2], "first")
    second = StandaloneCompletedCheckpointStore(storage, "pv", retained=1, run_id="second")
    assert second.recover() == [] and second.highest_checkpoint_id_seen == 2
    for checkpoint_id in (3, 4):
        second.add_checkpoint(make_checkpoint(storage, checkpoint_id))
    again = StandaloneCompletedCheckpointStore(storage, "pv", retained=1, run_id="second")
    assert ids(again.recover()) == [4] and run_of(again.get_latest_checkpoint()) == "second"
    assert storage.list_checkpoint_ids("pv") == [1, 2, 4], "the first run's checkpoints must stay"

    services = InMemoryHighAvailabilityServices()  # the same, with the index in (simulated) ZooKeeper
    first = services.create_store("pv", storage, 2)
    first.run_id = "first"
    for checkpoint_id in (5, 6):
        first.add_checkpoint(make_checkpoint(storage, checkpoint_id))
    third = services.create_store("pv", storage, 1)
    third.run_id = "third"
    assert third.recover() == []
    third.add_checkpoint(make_checkpoint(storage, 7))
    third.add_checkpoint(make_checkpoint(storage, 8))
    later = services.create_store("pv", storage, 1)
    later.run_id = "third"
    assert ids(later.recover()) == [8]
    assert {5, 6} <= set(storage.list_checkpoint_ids("pv")), "recovery discarded another run's checkpoints"


@pytest.mark.parametrize("crash", [False, True])
def test_a_restore_into_another_directory_continues_ids_above_the_restored_checkpoint(tmp_path: Path,
                                                                                        crash: bool) -> None:
    fragile = job_env(tmp_path / "first")
    fragile.set_restart_strategy(RestartStrategy.no_restart())
    with pytest.raises(JobFailedError):
        fragile.execute("job", executor="sim", seed=1, faults=FaultPlan.of(TaskCrash(task="count[0]", after_records=1400)))
    restored_id = load_checkpoint(str(tmp_path / "first"))[0].checkpoint_id
    assert restored_id >= 2  # a fresh counter in the new directory would reuse its id
    env = job_env(tmp_path / "second").restore_from(str(tmp_path / "first"))
    faults = FaultPlan.of(CoordinatorCrash(at=0.001)) if crash else FaultPlan()  # recovery reads the new counter
    second = env.execute("job", executor="sim", seed=2, faults=faults)
    ids = [c.id for c in second.checkpoints]
    assert ids and min(ids) > restored_id, (restored_id, ids)
    assert min(int(p.name[4:]) for p in (tmp_path / "second" / "job").glob("chk-*")) > restored_id
