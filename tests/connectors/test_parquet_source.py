"""`env.from_parquet` / `ParquetSource`: splits by row group or file, exact replay by offset, records
or batches, errors naming the file, exactly-once through crashes, restore at another parallelism."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import CollectSink
from runtime import FaultPlan, JobFailedError, JobGraphError, StreamEnvironment, TaskCrash
from runtime.connectors.parquet import ParquetSource, ParquetSourceError
from vocabulary.options import CheckpointingMode, RestartStrategy
from vocabulary.ports import ManualClock

ROWS = [{"i": i, "k": f"k{i % 7}", "v": None if i % 11 == 0 else i * 0.5} for i in range(3_000)]


def write(directory: Path, rows: list[dict], files: int = 3, row_group: int = 250) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    step = -(-len(rows) // files)
    for index in range(files):
        table = pa.Table.from_pylist(rows[index * step:(index + 1) * step],
                                     schema=pa.schema([("i", pa.int64()), ("k", pa.string()), ("v", pa.float64())]))
        pq.write_table(table, directory / f"part-{index}.parquet", row_group_size=row_group)
    (directory / "_SUCCESS").write_text("")  # Spark's marker: not data
    (directory / ".part-0.parquet.crc").write_bytes(b"\0\1")
    return directory


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("parquet") / "rows", ROWS)


def read_split(source: ParquetSource, index: int, start: int = 0, step: int = 97) -> list[dict]:
    reader = source.reader(source.splits()[index], ManualClock())
    reader.seek(start)
    out: list[dict] = []
    while not reader.finished():
        got = reader.read(step)
        out.extend(got if isinstance(got, list) else got.to_pylist())
    return out


def test_splits_are_row_groups_or_files_named_after_them(data) -> None:
    by_group = ParquetSource(str(data))
    assert [s.split_id for s in by_group.splits()][:5] == \
        ["parquet:part-0.parquet#0", "parquet:part-0.parquet#1", "parquet:part-0.parquet#2",
         "parquet:part-0.parquet#3", "parquet:part-1.parquet#0"]
    assert len(by_group.splits()) == 12 and by_group.expected_records() == 3_000
    by_file = ParquetSource(str(data), split_by="file", name="rows")
    assert [(s.split_id, s.end) for s in by_file.splits()] == \
        [("rows:part-0.parquet", 1000), ("rows:part-1.parquet", 1000), ("rows:part-2.parquet", 1000)]
    for source in (by_group, by_file):
        assert [r for i in range(len(source.splits())) for r in read_split(source, i)] == ROWS
    one_file = ParquetSource(str(data / "part-1.parquet"), split_by="file")
    assert [s.split_id for s in one_file.splits()] == ["parquet:part-1.parquet"]


@settings(max_examples=40, deadline=None)
@given(start=st.integers(0, 1000), step=st.integers(1, 400), vectorised=st.booleans())
def test_a_split_restored_at_an_offset_continues_exactly(data, start, step, vectorised) -> None:
    source = ParquetSource(str(data), split_by="file", vectorised=vectorised)
    assert read_split(source, 1, start, step) == ROWS[1000 + start:2000]


def test_batches_carry_the_columns_read(data) -> None:
    source = ParquetSource(str(data), vectorised=True, columns=["k", "i"])
    batch = source.reader(source.splits()[4], ManualClock()).read(1_000)
    assert isinstance(batch, pa.RecordBatch) and batch.schema.names == ["k", "i"] and batch.num_rows == 250
    assert batch.to_pylist()[0] == {"k": ROWS[1000]["k"], "i": 1000}


def test_bad_input_is_an_error_naming_the_file(tmp_path, data) -> None:
    env = StreamEnvironment()
    with pytest.raises(JobGraphError, match="no such file or directory: '.*nowhere'"):
        env.from_parquet(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(JobGraphError, match="no Parquet files in directory '.*empty'"):
        env.from_parquet(str(tmp_path / "empty"))
    bad = write(tmp_path / "bad", ROWS[:10], files=1)
    (bad / "notes.parquet").write_text("not parquet at all")
    with pytest.raises(JobGraphError, match="'.*bad/notes.parquet' is not a readable Parquet file"):
        env.from_parquet(str(bad))
    mixed = write(tmp_path / "mixed", ROWS[:10], files=1)
    pq.write_table(pa.table({"i": ["a"], "k": ["b"], "v": [1.0]}), mixed / "part-9.parquet")
    with pytest.raises(ParquetSourceError, match=r"'.*mixed/part-9.parquet' has another schema than "
                                                 r"'.*mixed/part-0.parquet': \(i: string, "):
        ParquetSource(str(mixed))
    with pytest.raises(JobGraphError, match="no column.*'missing'"):
        env.from_parquet(str(data), columns=["i", "missing"])
    with pytest.raises(JobGraphError, match="split_by must be one of row_group, file"):
        env.from_parquet(str(data), split_by="rows")


def counting_job(path: str, parallelism: int, *, vectorised: bool = False, **checkpointing) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=32, credits=2)
    env.enable_checkpointing(interval=0.002, tolerable_failures=1000, **checkpointing)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001))
    env.from_parquet(path, vectorised=vectorised).key_by("k").count().sink_to(CollectSink("counts"))
    return env


#: a running count per key: (key, 1) .. (key, total), each once
EXPECTED = Counter((k, n) for k, total in Counter(r["k"] for r in ROWS).items() for n in range(1, total + 1))


def counts(result) -> Counter:
    return Counter((r["k"], r["count"]) for r in result.output("counts"))


@pytest.mark.parametrize(("checkpointing", "vectorised"), [
    ({}, False), ({"unaligned": True}, True), ({"mode": "aligned-timeout", "alignment_timeout": 0.0}, False),
], ids=["aligned", "unaligned-batches", "timeout"])
def test_exactly_once_through_crashes(data, checkpointing, vectorised) -> None:
    env = counting_job(str(data), 2, vectorised=vectorised, **checkpointing)
    result = env.execute("parquet", executor="sim", seed=4, faults=FaultPlan.random(seed=4, crashes=3))
    assert result.restarts >= 1, result.failures
    assert counts(result) == EXPECTED
    assert result.metrics.records_in > len(ROWS)  # the splits rewound and replayed


def test_at_least_once_loses_nothing(data) -> None:
    env = counting_job(str(data), 2, mode=CheckpointingMode.AT_LEAST_ONCE)
    result = env.execute("parquet", executor="sim", seed=5, faults=FaultPlan.random(seed=5, crashes=2))
    assert result.restarts >= 1
    assert not EXPECTED - counts(result)


def test_a_failed_job_restores_at_another_parallelism(data, tmp_path) -> None:
    storage = str(tmp_path / "checkpoints")

    def job(parallelism: int) -> StreamEnvironment:
        env = counting_job(str(data), parallelism, storage=storage)
        env.set_restart_strategy(RestartStrategy.no_restart())
        return env

    with pytest.raises(JobFailedError):
        job(2).execute("parquet", executor="sim", seed=6, faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=300)))
    restored = job(3).restore_from(storage).execute("parquet", executor="sim", seed=6)
    assert counts(restored) == EXPECTED
    assert restored.metrics.records_in < len(ROWS)  # it resumed at the checkpointed offsets
