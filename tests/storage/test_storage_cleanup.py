"""What failed attempts leave on disk is cleaned up: a failover leaves the `chk-N` directory
of the checkpoint in progress, and an interrupted write a `.tmp-` file. Once recovery completes, and when the job
ends, the files of this run's checkpoints that are neither retained nor pending go; files a
retained checkpoint references, and an earlier run's checkpoints, never do."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.io.cleanup import checkpoint_id_of, unreferenced_files
from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.tools import collect_garbage, open_checkpoints, read_checkpoint
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore
from operators import CollectSink
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.sim.executor import SimExecutor
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 37}"} for i in range(3000)]
BACKENDS = {
    "full": {},
    "incremental": dict(state_backend="incremental"),
    "incremental+merge": dict(state_backend="incremental", file_merging=True),
}


def count_env(storage: Path | None, **options) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=16)
    env.enable_checkpointing(interval=0.002, storage=str(storage) if storage else None, retained=2,
                             tolerable_failures=100, **options)
    env.set_restart_strategy(RestartStrategy.fixed_delay(50, 0.001))
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


def reference_output():
    return multiset(count_env(None).execute("ref", executor="sim").output("out"))


class WatchedSim(SimExecutor):
    """Records, at every redeployment, the checkpoint directories on disk and the retained ids."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at_deploy: list[tuple[list[int], list[int]]] = []

    def _deploy(self) -> None:
        super()._deploy()
        ids = [i for i in self.storage.list_checkpoint_ids(self.job_id) if i >= self.first_checkpoint_id]
        self.at_deploy.append((ids, [c.checkpoint_id for c in self.store.get_all_checkpoints()]))


def left_over(root: Path) -> list[str]:
    """What `barrierflow checkpoints gc` would remove, but for the id counter (item 6 decides it)."""
    report = collect_garbage(open_checkpoints(str(root)), "job", dry_run=True)
    return [path for path, _ in report.removed if not path.endswith("_checkpoint_counter")]


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_eight_crashes_leave_no_orphan_checkpoint_behind(tmp_path: Path, backend: str) -> None:
    graph = count_env(tmp_path, **BACKENDS[backend]).get_job_graph("job")
    sim = WatchedSim(graph, seed=1, faults=FaultPlan.random(seed=3, crashes=8))
    result = sim.run()
    assert result.restarts == 8
    assert multiset(result.output("out")) == reference_output(), result.replay
    aborted = {c.id for c in result.aborted_checkpoints}
    assert aborted, "the crashes should have aborted checkpoints in progress"
    # once recovery completed, only retained checkpoints had directories (before: one more per crash)
    assert len(sim.at_deploy) == 9
    for on_disk, retained in sim.at_deploy[1:]:
        assert on_disk == retained
    # and when the job ended: the retained ones, whole; nothing `gc` would remove
    retained = [c.checkpoint_id for c in sim.store.get_all_checkpoints()]
    assert sorted(int(p.name[4:]) for p in (tmp_path / "job").glob("chk-*")) == retained
    assert not left_over(tmp_path)
    storage = open_checkpoints(str(tmp_path))
    for checkpoint_id in retained:
        read_checkpoint(storage, "job", checkpoint_id, verify_files=True)


@pytest.mark.parametrize("backend", ["incremental", "incremental+merge"])
def test_a_finished_job_leaves_no_shared_file_only_a_reuse_kept(tmp_path: Path, backend: str) -> None:
    """With concurrent checkpoints a task snapshots before it hears of the previous completion,
    so its reuse floor keeps the subsumed checkpoint's shared files alive (zombies); once the job
    ended nothing reuses them and nothing references them (found by the swarm, failure-free:
    SwarmConfig(seed=10, rows=1, keys=1, stages=('sum',), max_concurrent=2, storage='disk',
    backend='merging', source_slowdown=100.0); before, they were left for `gc`)."""
    env = StreamEnvironment(parallelism=1, buffer_size=16)
    env.enable_checkpointing(interval=0.002, storage=str(tmp_path), max_concurrent=2, **BACKENDS[backend])
    env.from_collection(ROWS[:200], splits=1).key_by("key").process(CountPerKey(), name="count").sink_to(
        CollectSink("out"))
    result = env.execute("job", executor="sim", seed=1)
    assert len(result.completed_checkpoints) >= 2
    assert not left_over(tmp_path)
    storage = open_checkpoints(str(tmp_path))
    for checkpoint_id in storage.list_checkpoint_ids("job"):
        read_checkpoint(storage, "job", checkpoint_id, verify_files=True)


def test_interrupted_writes_are_removed(tmp_path: Path) -> None:
    job = tmp_path / "job"
    planted = [job / "chk-999" / "._metadata.tmp-0123", job / "shared" / "count[0]" / ".chk-999-0.merged.tmp-4567",
               job / "._checkpoint_counter.tmp-89ab"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a file")
    storage = CheckpointStorage(FsBlobStore(str(tmp_path)))
    assert storage.list_job_files("job", temporary=True) == sorted(
        str(p.relative_to(tmp_path)) for p in planted)
    assert not any(".tmp-" in p for p in storage.list_job_files("job"))
    env = count_env(tmp_path, **BACKENDS["incremental+merge"])
    result = env.execute("job", executor="sim", seed=2, faults=FaultPlan.of(TaskCrash(task="count[1]", at=0.01)))
    assert result.restarts == 1 and multiset(result.output("out")) == reference_output()
    assert not [p for p in planted if p.exists()]
    assert not list(job.rglob("*.tmp-*"))


def test_gc_removes_interrupted_writes_too(tmp_path: Path) -> None:
    count_env(tmp_path).execute("job", executor="sim", seed=1)
    leftover = tmp_path / "job" / "shared" / ".chk-3-0.merged.tmp-dead"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"x")
    report = collect_garbage(open_checkpoints(str(tmp_path)), "job")
    assert "job/shared/.chk-3-0.merged.tmp-dead" in [p for p, _ in report.removed] and not leftover.exists()


@pytest.mark.slow
def test_an_earlier_run_in_the_same_directory_keeps_its_checkpoints(tmp_path: Path) -> None:
    first = count_env(tmp_path, **BACKENDS["incremental"]).execute("job", executor="sim", seed=1)
    assert first.restarts == 0
    earlier = sorted((tmp_path / "job").glob("chk-*"))
    files = {p: p.read_bytes() for p in (tmp_path / "job").rglob("*") if p.is_file() and "counter" not in p.name}
    second = count_env(tmp_path, **BACKENDS["incremental"]).execute(
        "job", executor="sim", seed=4, faults=FaultPlan.random(seed=5, crashes=3))
    assert second.restarts == 3
    assert all(p.exists() for p in earlier)
    assert all(p.read_bytes() == data for p, data in files.items()), "a file of the earlier run changed or went"
    storage = open_checkpoints(str(tmp_path))
    for path in earlier:
        read_checkpoint(storage, "job", int(path.name[4:]), verify_files=True)


def test_which_files_are_orphans() -> None:
    assert [checkpoint_id_of(p) for p in ("chk-5/_metadata", "chk-5/taskowned/a.keyed", "chk-5/._metadata.tmp-1",
                                          "shared/t/chk-7-0.merged", "shared/t/.chk-7-0.merged.tmp-2",
                                          "shared/count[0]/chk-12-kg3-b12", "_checkpoint_counter",
                                          "chk-x/y")] == [5, 5, 5, 7, 7, 12, None, None]
    storage = CheckpointStorage(MemoryBlobStore())
    for path in ("chk-3/_metadata", "chk-3/taskowned/a", "chk-4/taskowned/a", "chk-5/taskowned/a",
                 "chk-6/taskowned/a", "shared/t/chk-4-0.merged", "shared/t/chk-3-0.merged", "_checkpoint_counter"):
        storage.blob_store.put(f"job/{path}", b"x")
    keep = {"job/chk-3/_metadata", "job/chk-3/taskowned/a", "job/shared/t/chk-3-0.merged"}
    # online: this run started at 4, keeps retained 5 and pending 6; an earlier run's 3 is never touched
    assert unreferenced_files(storage, "job", keep - {"job/chk-3/taskowned/a"}, since=4, retained=[5],
                              pending=[6]) == ["job/chk-4/taskowned/a", "job/shared/t/chk-4-0.merged"]
    # offline (gc): everything under chk-<id>/ and shared/ not kept; never the id counter
    assert unreferenced_files(storage, "job", keep) == [
        "job/chk-4/taskowned/a", "job/chk-5/taskowned/a", "job/chk-6/taskowned/a", "job/shared/t/chk-4-0.merged"]
