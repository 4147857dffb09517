"""`SparkSink` two-phase commit, driven directly (staged, committed, restored, aborted), with the
committer its executor gives it (`CollectCommitter` with the sink's publisher registered)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from operators.base import OperatorContext
from runtime.jobmaster.committer.collect import CollectCommitter, UnknownTransactionError
from spark_bridge import SchemaError, SparkSink, SparkSinkError
from vocabulary.ports import ManualClock


def committer_for(sink: SparkSink, committer: CollectCommitter | None = None) -> CollectCommitter:
    committer = committer or CollectCommitter()
    committer.register_publisher(sink.sink_name, sink.publisher())
    return committer


def open_sink(path: str, committer: CollectCommitter | None = None, *, subtask: int = 0, checkpointing: bool = True,
              **kwargs) -> SparkSink:
    sink = SparkSink(path, **kwargs)
    sink.open(OperatorContext("sink", subtask, 1, 128, ManualClock(), committer_for(sink, committer),
                              checkpointing=checkpointing))
    return sink


def visible(path: str) -> list[dict]:
    """What a reader of the directory sees (pyarrow, like Spark, skips '_' and '.' paths)."""
    if not os.path.isdir(path):
        return []
    return sorted(ds.dataset(path, format="parquet").to_table().to_pylist(), key=lambda r: r["i"])


def rows(a: int, b: int) -> list[dict]:
    return [{"i": i, "s": f"v{i}"} for i in range(a, b)]


def test_staged_rows_are_invisible_until_the_checkpoint_completes(tmp_path) -> None:
    path = str(tmp_path / "out")
    committer = CollectCommitter()
    sink = open_sink(path, committer)
    sink.process_batch(rows(0, 5))
    state = sink.snapshot_state(1)
    assert [t["checkpoint"] for t in state["pending"]] == [1]
    assert committer.staged_transactions("out") == ["out/0/1"]
    assert not os.path.exists(path), "nothing is staged in the output directory"
    sink.process_batch(rows(5, 8))  # belongs to checkpoint 2, stays staged in memory
    sink.notify_checkpoint_complete(1)
    assert visible(path) == rows(0, 5)
    assert committer.output("out") == rows(0, 5)
    assert [n for n in os.listdir(path) if not n.startswith("part-")] == []


@pytest.mark.spark
def test_spark_reads_only_committed_rows(spark, tmp_path) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path)
    sink.process_batch(rows(0, 3))
    sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    sink.process_batch(rows(3, 9))
    sink.snapshot_state(2)  # pre-committed, never completed: staged in the committer only
    got = sorted(r["i"] for r in spark.read.parquet(path).collect())
    assert got == [0, 1, 2]


def test_restore_commits_pending_transactions_once_even_from_several_subtasks(tmp_path) -> None:
    path = str(tmp_path / "out")
    committer = CollectCommitter()
    first = open_sink(path, committer)
    first.process_batch(rows(0, 4))
    state = first.snapshot_state(3)  # checkpoint 3 completes, but the task dies before the notify
    assert visible(path) == []
    for subtask in (0, 1):  # every new subtask receives the union of pending transactions
        restored = SparkSink(path)
        restored.restore_state(state)  # before open(), as a task restores
        restored.open(OperatorContext("sink", subtask, 2, 128, ManualClock(), committer))
    assert visible(path) == rows(0, 4)
    assert committer.output("out") == rows(0, 4)
    again = open_sink(path, committer)
    again.restore_state(state)  # a later failover restores the same checkpoint: a no-op
    assert visible(path) == rows(0, 4) and len(os.listdir(path)) == 1


def test_aborted_checkpoint_is_committed_by_the_next_completed_one(tmp_path) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path)
    sink.process_batch(rows(0, 2))
    sink.snapshot_state(1)
    sink.notify_checkpoint_aborted(1)
    sink.process_batch(rows(2, 3))
    state = sink.snapshot_state(2)
    assert len(state["pending"]) == 2
    assert visible(path) == []
    sink.notify_checkpoint_complete(2)
    assert visible(path) == rows(0, 3)
    assert sink.pending_transactions == []


def test_a_global_commit_writes_one_file_for_every_subtasks_transactions(tmp_path) -> None:
    path = str(tmp_path / "out")
    committer = CollectCommitter()
    sinks = [open_sink(path, committer, subtask=s) for s in range(3)]
    for checkpoint in (1, 2):
        for s, sink in enumerate(sinks):
            sink.process_batch(rows(100 * checkpoint + 10 * s, 100 * checkpoint + 10 * s + 3))
            sink.snapshot_state(checkpoint)
        committer.commit_checkpoint(checkpoint)  # the coordinator's one call per completed checkpoint
    assert len(os.listdir(path)) == 2
    assert len(visible(path)) == 18


def test_restoring_a_transaction_its_committer_never_staged_is_an_error_naming_it(tmp_path) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path)
    sink.process_batch(rows(0, 2))
    state = sink.snapshot_state(1)
    with pytest.raises(UnknownTransactionError, match="transaction 'out/0/1' was committed but never staged here"):
        open_sink(path).restore_state(state)  # another committer: the stage is not there


def test_without_checkpointing_end_input_commits(tmp_path) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path, checkpointing=False)
    sink.process_batch(rows(0, 3))
    assert visible(path) == []
    sink.end_input()
    assert visible(path) == rows(0, 3)


def test_schema_fixes_the_written_types(tmp_path) -> None:
    path = str(tmp_path / "out")
    schema = pa.schema([("i", pa.int16()), ("s", pa.string())])
    sink = open_sink(path, schema=schema)
    sink.process_batch(rows(0, 2))
    sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    assert ds.dataset(path).schema.field("i").type == pa.int16()
    bad = open_sink(str(tmp_path / "bad"), schema=schema)
    bad.process_batch([{"i": "not a number", "s": "x"}])
    with pytest.raises(SparkSinkError, match="sink 'bad': records do not fit the given schema"):
        bad.snapshot_state(1)  # in the task, at the pre-commit: not at the commit


@pytest.mark.parametrize("fmt", ["orc", "csv"])
def test_other_formats_commit_the_same_way(tmp_path, fmt) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path, format=fmt)
    sink.process_batch(rows(0, 3))
    sink.snapshot_state(1)
    assert not os.path.exists(path)
    sink.notify_checkpoint_complete(1)
    assert ds.dataset(path, format=fmt).count_rows() == 3


def test_bad_arguments_are_clear() -> None:
    with pytest.raises(ValueError, match="format must be one of"):
        SparkSink("/tmp/x", format="delta")
    with pytest.raises(ValueError, match="path must be a non-empty"):
        SparkSink("")
    from pyspark.sql import types as T

    with pytest.raises(SchemaError, match="column 'gap'"):
        SparkSink("/tmp/x", schema=T.StructType([T.StructField("gap", T.DayTimeIntervalType())]))


def test_one_file_unifies_what_the_subtasks_staged(tmp_path) -> None:
    """Subtasks' transactions of one checkpoint share a file: a field only some of them saw is null
    in the others, ints another subtask saw as floats become floats (as on the data path)."""
    path = str(tmp_path / "out")
    committer = CollectCommitter()
    first, second = (open_sink(path, committer, subtask=s) for s in (0, 1))
    first.process_batch([{"i": 1, "s": "a"}])
    second.process_batch([{"i": 2.5, "s": "b", "extra": True}])
    first.snapshot_state(1)
    second.snapshot_state(1)
    committer.commit_checkpoint(1)
    table = ds.dataset(path).to_table()
    assert len(os.listdir(path)) == 1 and table.schema.field("i").type == pa.float64()
    assert sorted(table.to_pylist(), key=lambda r: r["i"]) == [{"i": 1.0, "s": "a", "extra": None},
                                                               {"i": 2.5, "s": "b", "extra": True}]
