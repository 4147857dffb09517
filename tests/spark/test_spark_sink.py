"""`SparkSink` two-phase commit, driven directly (staged, committed, restored, aborted)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from operators.base import OperatorContext
from runtime.core.ports import ManualClock
from spark_bridge import SchemaError, SparkSink, SparkSinkError


class Committer:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.committed: dict[str, list[dict]] = {}

    def commit(self, sink: str, txn: str, records: list[dict]) -> None:
        self.calls.append(txn)
        self.committed.setdefault(txn, list(records))


def open_sink(path: str, committer: Committer | None = None, *, subtask: int = 0, checkpointing: bool = True,
              **kwargs) -> SparkSink:
    sink = SparkSink(path, **kwargs)
    sink.open(OperatorContext("sink", subtask, 1, 128, ManualClock(), committer or Committer(),
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
    committer = Committer()
    sink = open_sink(path, committer)
    sink.process_batch(rows(0, 5))
    state = sink.snapshot_state(1)
    assert [t["checkpoint"] for t in state["pending"]] == [1]
    assert os.listdir(os.path.join(path, "_staging")) and visible(path) == []
    sink.process_batch(rows(5, 8))  # belongs to checkpoint 2, stays staged in memory
    sink.notify_checkpoint_complete(1)
    assert visible(path) == rows(0, 5)
    assert list(committer.committed.values()) == [rows(0, 5)]
    assert os.listdir(os.path.join(path, "_staging")) == []


def test_spark_reads_only_committed_rows(spark, tmp_path) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path)
    sink.process_batch(rows(0, 3))
    sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    sink.process_batch(rows(3, 9))
    sink.snapshot_state(2)  # pre-committed, never completed: an orphan under _staging
    got = sorted(r["i"] for r in spark.read.parquet(path).collect())
    assert got == [0, 1, 2]


def test_restore_commits_pending_transactions_once_even_from_several_subtasks(tmp_path) -> None:
    path = str(tmp_path / "out")
    first = open_sink(path)
    first.process_batch(rows(0, 4))
    state = first.snapshot_state(3)  # checkpoint 3 completes, but the task dies before the notify
    assert visible(path) == []
    committer = Committer()
    for subtask in (0, 1):  # every new subtask receives the union of pending transactions
        restored = SparkSink(path)
        restored.restore_state(state)  # before open(), as a task restores
        restored.open(OperatorContext("sink", subtask, 2, 128, ManualClock(), committer))
    assert visible(path) == rows(0, 4)
    assert list(committer.committed.values()) == [rows(0, 4)]  # read back from the committed file
    again = open_sink(path, committer)
    again.restore_state(state)  # a later failover restores the same checkpoint: a no-op
    assert visible(path) == rows(0, 4)


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


def test_lost_transaction_is_an_error_naming_the_files(tmp_path) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path)
    sink.process_batch(rows(0, 2))
    state = sink.snapshot_state(1)
    for name in os.listdir(os.path.join(path, "_staging")):
        os.remove(os.path.join(path, "_staging", name))
    with pytest.raises(SparkSinkError, match=r"cannot commit transaction out-0-1-.*missing"):
        open_sink(path).restore_state(state)


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
        bad.snapshot_state(1)


@pytest.mark.parametrize("fmt", ["orc", "csv"])
def test_other_formats_commit_the_same_way(tmp_path, fmt) -> None:
    path = str(tmp_path / "out")
    sink = open_sink(path, format=fmt)
    sink.process_batch(rows(0, 3))
    sink.snapshot_state(1)
    assert ds.dataset(path, format=fmt).count_rows() == 0
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
