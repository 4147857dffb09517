"""`SparkSink` output as files: one file per sink per completed checkpoint (the global committer
writes what every subtask staged for it), not one per subtask per checkpoint; nothing staged in
the output directory (aborted transactions leave nothing there); exactly once through crashes and
a restore in a new execution, on disk and in memory. Needs no Spark session: pyarrow reads the
files as Spark does (skipping `_` and `.` paths)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from checkpoint.io.tools import collect_garbage, load_checkpoint, open_checkpoints
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.jobmaster.result import JobFailedError
from runtime.workloads.seeded import CountPerKey
from spark_bridge import SparkSink
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

ROWS = [{"user": i, "app": f"app{i % 40}"} for i in range(20_000)]
APPS = 40


def pageviews(out: Path, storage: Path | None, parallelism: int = 2) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism)
    env.enable_checkpointing(interval=0.0005, storage=str(storage) if storage else None)
    env.from_collection(ROWS, splits=2).key_by("app").process(CountPerKey("app"), name="count") \
        .sink_to(SparkSink(str(out)))
    return env


def expected() -> Counter:
    return Counter((f"app{a}", n) for a in range(APPS) for n in range(1, 20_000 // APPS + 1))


def written(out: Path) -> Counter:
    table = ds.dataset(str(out), format="parquet").to_table()
    return Counter(zip(table.column("app").to_pylist(), table.column("count").to_pylist()))


def files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


@pytest.mark.slow
@pytest.mark.parametrize("storage", [False, True], ids=["memory", "disk"])
def test_one_file_per_completed_checkpoint_and_nothing_staged_beside_them(tmp_path: Path, storage: bool) -> None:
    # regression: 394 files for 20,000 rows (one per subtask per checkpoint), and aborted ones stayed
    # in _staging
    out = tmp_path / "out"
    result = pageviews(out, tmp_path / "ckpts" if storage else None).execute(
        "pv", executor="sim", seed=7, faults=FaultPlan.of(TaskCrash(task="count[0]", after_records=9_000)))
    assert result.restarts == 1 and result.aborted_checkpoints, "the crash should abort a checkpoint in progress"
    assert written(out) == expected()
    names = files(out)
    assert all(n.startswith("part-") and n.endswith(".parquet") for n in names), names
    completed = len(result.completed_checkpoints)
    # one per checkpoint, + one per subtask for what arrived after the final one (before: one per
    # subtask per checkpoint)
    assert completed >= 5 and len(names) <= completed + 2, (len(names), completed)
    assert Counter((r["app"], r["count"]) for r in result.output("out")) == expected()


def test_a_failed_job_restored_in_a_new_execution_writes_each_row_once(tmp_path: Path) -> None:
    out, ckpts = tmp_path / "out", tmp_path / "ckpts"
    fragile = pageviews(out, ckpts)
    fragile.set_restart_strategy(RestartStrategy.no_restart())
    with pytest.raises(JobFailedError):
        fragile.execute("pv", executor="sim", seed=7, faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=6_000)))
    assert not [n for n in files(out) if not n.startswith("part-")]
    restored = pageviews(out, ckpts, parallelism=3).restore_from(str(ckpts)).execute("pv", executor="sim", seed=8)
    assert written(out) == expected()
    assert len(restored.output("out")) == 20_000
    before = files(out)
    collect_garbage(open_checkpoints(str(ckpts)), "pv")  # the first run's aborted stages, its chk in progress
    assert files(out) == before and load_checkpoint(str(ckpts))[0].properties["run_id"] == restored.run_id


def test_a_publication_that_failed_is_written_once_when_the_committer_is_opened_again(tmp_path: Path) -> None:
    """The commit is recorded before its file is written: a process that dies in between leaves the
    record, and opening the committer again writes the file under the recorded name, once."""
    from checkpoint.io.fs_blob_store import FsBlobStore
    from runtime.jobmaster.committer.durable import DurableCollectCommitter
    from runtime.jobmaster.committer.file_publisher import FilePublisher

    out = tmp_path / "out"
    store = FsBlobStore(str(tmp_path / "ckpts"))
    committer = DurableCollectCommitter(store, "pv/committed/r1")
    committer.register_publisher("out", FilePublisher(str(out), sink="out"))
    committer.stage("out", "out/0/1", [{"app": "a", "count": 1}])
    committer.stage("out", "out/1/1", [{"app": "b", "count": 1}])
    out.write_bytes(b"in the way")  # the output directory cannot be created: the file is not written
    with pytest.raises(OSError, match=f"sink 'out': cannot write its committed records to {out}/part-"):
        committer.commit_checkpoint(1)
    assert committer.output("out"), "the commit is decided, its file pending"
    out.unlink()
    reopened = DurableCollectCommitter(store, "pv/committed/r1")  # e.g. by a restore in a new process
    assert files(out) and written(out) == Counter({("a", 1): 1, ("b", 1): 1})
    DurableCollectCommitter(store, "pv/committed/r1")
    assert len(files(out)) == 1 and reopened.output("out") == [{"app": "a", "count": 1}, {"app": "b", "count": 1}]


def test_two_executions_restoring_the_same_checkpoint_write_its_transactions_once(tmp_path: Path) -> None:
    """A run whose checkpoint completed but died before its global commit leaves the transaction
    staged; the next execution commits it on restore and dies before a checkpoint of its own; the
    one after restores the same checkpoint, with the committer of the run that took it, which never
    heard of that commit, and commits the transaction again (found by the storage swarm: seed 1039
    wrote 448 rows twice, the files being named per committer instead of after their transactions)."""
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.io.fs_blob_store import FsBlobStore
    from checkpoint.storage.layout import CheckpointStorage
    from runtime.jobmaster.committer.durable import DurableCollectCommitter, committer_for

    out = tmp_path / "out"
    storage = CheckpointStorage(FsBlobStore(str(tmp_path / "ckpts")))
    DurableCollectCommitter(storage.blob_store, "pv/committed/r1").stage("out", "out/0/3", [{"app": "a", "count": 1}])
    restored = CompletedCheckpoint("pv", 3, 0.0, 0.0, {}, properties={"run_id": "r1"})
    for run in ("r2", "r3"):
        committer = committer_for(storage, "pv", run, (restored, storage))
        committer.register_publisher("out", SparkSink(str(out)).publisher())
        committer.commit("out", "out/0/3")  # what the restored sink does
    assert written(out) == Counter({("a", 1): 1}) and len(files(out)) == 1
