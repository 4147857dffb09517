"""`from_spark`: types survive the round trip, offsets replay exactly, bad columns are named."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from operators import CollectSink
from operators.sources import SourceSplit
from runtime import StreamEnvironment
from spark_bridge import ParquetSplitSource, SchemaError, SparkSink, from_spark
from spark_bridge.source import ParquetFileInfo, ParquetSplitReader

UTC = dt.UTC

TYPED_SCHEMA = T.StructType([
    T.StructField("id", T.IntegerType()),
    T.StructField("big", T.LongType()),
    T.StructField("small", T.ShortType()),
    T.StructField("f", T.FloatType()),
    T.StructField("d", T.DoubleType()),
    T.StructField("s", T.StringType()),
    T.StructField("flag", T.BooleanType()),
    T.StructField("ts", T.TimestampType()),
    T.StructField("ntz", T.TimestampNTZType()),
    T.StructField("day", T.DateType()),
    T.StructField("money", T.DecimalType(10, 2)),
    T.StructField("raw", T.BinaryType()),
    T.StructField("tags", T.ArrayType(T.StringType())),
    T.StructField("nested", T.StructType([
        T.StructField("a", T.IntegerType()),
        T.StructField("inner", T.StructType([T.StructField("when", T.TimestampType()),
                                             T.StructField("x", T.DoubleType())])),
    ])),
])


def typed_rows(n: int) -> list[tuple]:
    rows = []
    for i in range(n):
        if i % 5 == 4:  # a row of nulls every fifth row
            rows.append((i,) + (None,) * 13)
            continue
        rows.append((
            i, 2**40 + i, i % 300, i / 4.0, i * 1.1, f"s{i}é", i % 2 == 0,
            dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC) + dt.timedelta(microseconds=i * 1_000_001),
            dt.datetime(2023, 6, 1) + dt.timedelta(seconds=i),
            dt.date(2020, 1, 1) + dt.timedelta(days=i),
            decimal.Decimal(i) / 4, bytes([i % 256, 0]),
            [f"t{i}", None] if i % 3 else [],
            (i, (dt.datetime(2001, 1, 1, tzinfo=UTC), None if i % 2 else 0.5)) if i % 7 else None,
        ))
    return rows


@pytest.mark.spark
def test_types_round_trip_spark_to_barrierflow_to_spark(spark, tmp_path) -> None:
    df = spark.createDataFrame(typed_rows(60), TYPED_SCHEMA)
    env = StreamEnvironment(parallelism=2, buffer_size=7)
    env.enable_checkpointing(interval=0.01)
    events = from_spark(env, df, splits=3)
    assert events.columns == TYPED_SCHEMA.names
    out = str(tmp_path / "out")
    events.sink_to(SparkSink(out, schema=df.schema))
    result = env.execute("types", executor="sim", seed=1)
    assert len(result.output("out")) == 60

    back = spark.read.parquet(out)
    assert back.schema == df.schema  # every type, nullability aside from Spark's own, is preserved
    assert back.exceptAll(df).count() == 0 and df.exceptAll(back).count() == 0
    # and inside barrierflow the records were plain Python values of the right types
    record = next(r for r in result.output("out") if r["id"] == 1)
    assert record["ts"] == dt.datetime(2024, 1, 1, 12, 0, 1, 1, tzinfo=UTC)
    assert record["ntz"].tzinfo is None and record["day"] == dt.date(2020, 1, 2)
    assert record["nested"] == {"a": 1, "inner": {"when": dt.datetime(2001, 1, 1, tzinfo=UTC), "x": None}}
    assert next(r for r in result.output("out") if r["id"] == 4)["s"] is None


@pytest.mark.spark
def test_types_survive_without_a_sink_schema_as_python_values(spark, tmp_path) -> None:
    df = spark.createDataFrame(typed_rows(10), TYPED_SCHEMA)
    env = StreamEnvironment(parallelism=1)
    env.enable_checkpointing(interval=0.01)
    from_spark(env, df, splits=2).sink_to(CollectSink("c"))
    result = env.execute("plain", executor="sim", seed=2)
    expected = sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: r["id"])
    for r in expected:  # Spark's collect() gives naive session-time (UTC here); we keep the zone
        r["ts"] = r["ts"] and r["ts"].replace(tzinfo=UTC)
    got = sorted(result.output("c"), key=lambda r: r["id"])
    assert all(r["ts"] is None or r["ts"].utcoffset() == dt.timedelta(0) for r in got)
    assert [{k: r[k] for k in ("id", "s", "ts", "day", "money", "tags")} for r in got] == \
        [{k: r[k] for k in ("id", "s", "ts", "day", "money", "tags")} for r in expected]


@pytest.mark.spark
def test_empty_dataframe_gives_an_empty_stream(spark, tmp_path) -> None:
    df = spark.createDataFrame([], TYPED_SCHEMA)
    env = StreamEnvironment(parallelism=2)
    env.enable_checkpointing(interval=0.01)
    out = str(tmp_path / "empty")
    from_spark(env, df, splits=4).key_by("s").count().sink_to(SparkSink(out))
    result = env.execute("empty", executor="sim", seed=1)
    assert result.output("empty") == []
    assert result.metrics.records_in == 0


@pytest.mark.spark
@pytest.mark.parametrize(("expr", "column"), [
    ("make_interval(1, 2, 0, 3, 0, 0, 0) AS gap", "gap"),
    ("interval 2 days AS gap", "gap"),
    ("map('a', 1) AS m", "m"),
    ("named_struct('ok', 1, 'bad', interval 1 day) AS s", "s.bad"),
    ("array(interval 1 month) AS xs", r"xs\[\]"),
])
def test_unsupported_column_type_is_a_clear_error_naming_the_column(spark, tmp_path, expr, column) -> None:
    df = spark.range(3).selectExpr("id", expr)
    env = StreamEnvironment()
    with pytest.raises(SchemaError, match=rf"column '{column}' has type .* cannot carry"):
        from_spark(env, df, splits=2, staging_dir=str(tmp_path))
    assert not list(tmp_path.iterdir()), "nothing may be written for a refused DataFrame"


@pytest.mark.spark
def test_bad_arguments_are_named(spark) -> None:
    env = StreamEnvironment()
    with pytest.raises(ValueError, match="splits must be an integer >= 1"):
        from_spark(env, spark.range(3), splits=0)
    with pytest.raises(TypeError, match="pyspark.sql.DataFrame"):
        from_spark(env, [{"a": 1}], splits=1)


@pytest.mark.spark
def test_splits_follow_spark_partitions_and_cover_every_row(spark) -> None:
    df = spark.range(1000).selectExpr("id", "id % 7 AS k")
    env = StreamEnvironment(parallelism=3)
    stream = from_spark(env, df)  # default: one split per subtask
    source = stream._node.source
    assert isinstance(source, ParquetSplitSource) and source.num_splits == 3
    assert sum(s.end for s in source.splits()) == 1000 == source.expected_records()


# ------------------------------------------------------------------ exact replay by offset


@pytest.fixture(scope="module")
def multi_group_source(tmp_path_factory) -> ParquetSplitSource:
    """One split of three files with uneven row groups (pyarrow-written: no Spark needed)."""
    directory = tmp_path_factory.mktemp("splits")
    files, start = [], 0
    for index, (rows, group) in enumerate([(23, 5), (0, 4), (41, 9)]):
        path = str(directory / f"part-{index:05d}.parquet")
        pq.write_table(pa.table({"i": pa.array(range(start, start + rows), pa.int64())}), path,
                       row_group_size=group)
        meta = pq.read_metadata(path)
        files.append(ParquetFileInfo(path, tuple(meta.row_group(g).num_rows for g in range(meta.num_row_groups))))
        start += rows
    return ParquetSplitSource(str(directory), [files], pa.schema([("i", pa.int64())]), name="t")


@settings(max_examples=60, deadline=None)
@given(position=st.integers(0, 64), reads=st.lists(st.integers(1, 30), min_size=1, max_size=6))
def test_seek_then_read_equals_the_tail_of_the_split(multi_group_source, position, reads) -> None:
    split = multi_group_source.splits()[0]
    assert split == SourceSplit("t-0", 0, 0, 64)
    reader = multi_group_source.reader(split, clock=None)
    reader.seek(position)
    got = []
    for n in reads:
        batch = reader.read(n)
        assert len(batch) == min(n, 64 - position - len(got))
        got.extend(r["i"] for r in batch)
        assert reader.position == position + len(got)
    assert got == list(range(position, position + len(got)))
    rest = []
    while not reader.finished():
        rest.extend(r["i"] for r in reader.read(17))
    assert got + rest == list(range(position, 64))
    assert reader.read(5) == []


def test_seek_out_of_range_names_the_split(multi_group_source) -> None:
    reader = ParquetSplitReader(multi_group_source, multi_group_source.splits()[0])
    with pytest.raises(ValueError, match="cannot seek split 't-0' to position 65"):
        reader.seek(65)
