"""The columnar path, operator by operator: every vectorised method must do exactly what its
record-by-record twin does (partitioners, the keyed count), the conversions in
`operators.columns` must keep order and name bad records, the vectorised generator must check
what `batch_fn` returns, and `CollectSink` must commit every piece of a mixed transaction."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from api_fakes import make_ctx, opened
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators import CollectSink, GeneratorSource, OperatorError
from operators.columns import as_batch, as_records, compact, concat, num_rows, to_record_batch
from operators.keyed import ColumnKeySelector, CountOperator
from runtime import CheckpointingMode, JobFailedError, JobGraphError, RestartStrategy, StreamEnvironment
from runtime.core.partitioners import Broadcast, Forward, KeyGroupHash, Rebalance
from vocabulary.ports import ManualClock

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

#: one key column type per example, None mixed in: (values, Arrow type)
KEY_TYPES = {
    "int": (st.integers(-(2**40), 2**40), pa.int64()),
    "small-int": (st.integers(-3, 3), pa.int8()),
    "str": (st.text(max_size=3), pa.string()),
    "large-str": (st.text(alphabet="ab", max_size=2), pa.large_string()),
    "bytes": (st.binary(max_size=2), pa.binary()),
    "bool": (st.booleans(), pa.bool_()),
    # -0.0 is left out here: it has its own test below
    "float": (st.floats(allow_nan=False, allow_infinity=True).filter(lambda f: not (f == 0 and str(f)[0] == "-")),
              pa.float64()),
}


@st.composite
def key_batches(draw, max_batches: int = 4) -> list[pa.RecordBatch]:
    """Batches with a key column "k" of one type (None mixed in) and a row id "i"; some are
    slices of a bigger batch (a non-zero offset, as the runtime produces when it cuts buffers)."""
    values, arrow_type = KEY_TYPES[draw(st.sampled_from(sorted(KEY_TYPES)))]
    pool = draw(st.lists(st.one_of(values, st.none()), min_size=1, max_size=6))
    batches, row = [], 0
    for _ in range(draw(st.integers(1, max_batches))):
        keys = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=25))
        offset = draw(st.integers(0, 3))
        padded = [pool[0]] * offset + keys
        batch = pa.RecordBatch.from_pydict({
            "k": pa.array(padded, type=arrow_type),
            "i": pa.array(range(row - offset, row + len(keys)), type=pa.int64()),
        }).slice(offset)
        row += len(keys)
        batches.append(batch)
    return batches


# ------------------------------------------------------------------ partitioners


@pytest.mark.slow
@SETTINGS
@given(batches=key_batches(), n=st.integers(1, 6), max_parallelism=st.sampled_from([1, 7, 128]))
def test_hash_partition_columns_puts_every_row_where_partition_puts_its_record(batches, n, max_parallelism):
    n = min(n, max_parallelism)
    spec = KeyGroupHash(ColumnKeySelector("k"), max_parallelism, operator="key_by('k')")
    by_columns, by_records = spec.create(), spec.create()
    for batch in batches:
        parts = by_columns.partition_columns(batch, n)
        expected = by_records.partition(batch.to_pylist(), n)
        assert len(parts) == n
        # the same rows per channel, in the same (input) order
        assert [as_records(part) for part in parts] == expected, batch.to_pylist()


def test_hash_partition_columns_with_a_key_function_or_a_missing_column_acts_like_partition():
    batch = pa.RecordBatch.from_pydict({"k": ["a", "b", None, "a"], "i": [0, 1, 2, 3]})
    by_fn = KeyGroupHash(lambda r: (r["k"], r["i"] % 2), 128)
    assert [as_records(p) for p in by_fn.create().partition_columns(batch, 3)] == by_fn.create().partition(
        batch.to_pylist(), 3)
    missing = KeyGroupHash(ColumnKeySelector("app"), 128, operator="key_by('app') -> count").create()
    with pytest.raises(OperatorError, match=r"key_by\('app'\) -> count. failed on record \{'k': 'a', 'i': 0\}"):
        missing.partition_columns(batch, 2)


def test_hash_partition_columns_of_a_dictionary_column_with_nulls_acts_like_partition():
    """A key column that is dictionary-encoded already (e.g. what a `map_batches` produced with
    `pc.dictionary_encode`) and holds a null: its indices carry the null, which must still go
    to the channel of key None, as `partition` sends the record."""
    keys = pc.dictionary_encode(pa.array(["a", None, "b", "a", None]))
    batch = pa.RecordBatch.from_arrays([keys, pa.array(range(5))], names=["k", "i"])
    spec = KeyGroupHash(ColumnKeySelector("k"), 128)
    expected = spec.create().partition(batch.to_pylist(), 3)
    assert [as_records(p) for p in spec.create().partition_columns(batch, 3)] == expected


@SETTINGS
@given(
    calls=st.lists(st.tuples(st.integers(0, 12), st.booleans()), min_size=1, max_size=8),
    n=st.integers(1, 5),
    subtask=st.integers(0, 6),
)
def test_rebalance_partition_columns_continues_round_robin_like_partition(calls, n, subtask):
    """Two fresh senders, one fed lists and one fed batches (or — `mixed` — whichever the call
    says, as a task's output may alternate): every call splits the rows the same way."""
    records_only, columns_only, mixed = (Rebalance().create(subtask) for _ in range(3))
    row = 0
    for size, as_columns in calls:
        records = [{"i": row + j} for j in range(size)]
        row += size
        batch = pa.RecordBatch.from_pylist(records, schema=pa.schema([("i", pa.int64())]))
        expected = records_only.partition(records, n)
        assert [as_records(p) for p in columns_only.partition_columns(batch, n)] == expected
        got = mixed.partition_columns(batch, n) if as_columns else mixed.partition(records, n)
        assert [as_records(p) for p in got] == expected


def test_broadcast_and_forward_partition_columns():
    batch = pa.RecordBatch.from_pydict({"i": [1, 2, 3]})
    parts = Broadcast().create().partition_columns(batch, 3)
    assert len(parts) == 3 and all(p.equals(batch) for p in parts)
    assert Broadcast().create().partition_columns(batch, 1)[0].equals(batch)
    (only,) = Forward().create().partition_columns(batch, 1)
    assert only.equals(batch)
    with pytest.raises(ValueError, match="exactly one channel"):
        Forward().create().partition_columns(batch, 2)


# ------------------------------------------------------------------ keyed count


def _count_op() -> CountOperator:
    return opened(CountOperator(ColumnKeySelector("k"), "k", name="count"))  # type: ignore[return-value]


@pytest.mark.slow
@SETTINGS
@given(batches=key_batches(max_batches=5))
def test_count_process_columns_gives_the_rows_and_state_of_process_batch(batches):
    by_columns, by_records = _count_op(), _count_op()
    for batch in batches:
        got = by_columns.process_columns(batch)
        assert as_records(got) == by_records.process_batch(batch.to_pylist()), batch.to_pylist()
    assert by_columns.ctx.keyed_backend.dump() == by_records.ctx.keyed_backend.dump()


def test_count_process_columns_stays_columnar_and_names_its_key_field():
    op = opened(CountOperator(ColumnKeySelector("app"), "app"))
    out = op.process_columns(pa.RecordBatch.from_pydict({"app": ["x", "y", "x"], "user": [1, 2, 3]}))
    assert isinstance(out, pa.RecordBatch) and out.schema.names == ["app", "count"]
    assert out.to_pylist() == [{"app": "x", "count": 1}, {"app": "y", "count": 1}, {"app": "x", "count": 2}]


def test_count_process_columns_with_a_missing_column_fails_like_process_batch():
    op = opened(CountOperator(ColumnKeySelector("app"), "app", name="pv-count"))
    with pytest.raises(OperatorError, match=r"'pv-count' failed on record \{'k': 'a'\}.*no column 'app'"):
        op.process_columns(pa.RecordBatch.from_pydict({"k": ["a"]}))


def test_count_process_columns_of_negative_and_positive_zero_keys_counts_in_record_order():
    """-0.0 == 0.0 is one key (one key group, one state entry), so record by record the
    running count goes 1, 2, 3 over [-0.0, 0.0, -0.0]. Arrow's dictionary encoding keeps -0.0
    and 0.0 apart, so the vectorised count must still not number them per encoded value."""
    batch = pa.RecordBatch.from_pydict({"k": pa.array([-0.0, 0.0, -0.0])})
    by_columns, by_records = _count_op(), _count_op()
    expected = by_records.process_batch(batch.to_pylist())
    assert [r["count"] for r in expected] == [1, 2, 3]
    assert as_records(by_columns.process_columns(batch)) == expected
    assert by_columns.ctx.keyed_backend.dump() == by_records.ctx.keyed_backend.dump()


def test_count_process_columns_of_a_dictionary_column_with_nulls_acts_like_process_batch():
    keys = pc.dictionary_encode(pa.array(["a", None, "a", None, "b"]))
    batch = pa.RecordBatch.from_arrays([keys], names=["k"])
    by_columns, by_records = _count_op(), _count_op()
    expected = by_records.process_batch(batch.to_pylist())
    assert as_records(by_columns.process_columns(batch)) == expected
    assert by_columns.ctx.keyed_backend.dump() == by_records.ctx.keyed_backend.dump()


# ------------------------------------------------------------------ operators.columns

SCHEMA_A = pa.schema([("i", pa.int64())])
SCHEMA_B = pa.schema([("i", pa.int64()), ("s", pa.string())])
SCHEMAS = {
    "A": lambda ids: pa.RecordBatch.from_pydict({"i": ids}, schema=SCHEMA_A),
    "B": lambda ids: pa.RecordBatch.from_pydict({"i": ids, "s": [str(i) for i in ids]}, schema=SCHEMA_B),
    "L": lambda ids: [{"i": i} for i in ids],
}


@SETTINGS
@given(pieces=st.lists(st.tuples(st.sampled_from("ALB"), st.integers(1, 5)), max_size=12))
def test_concat_keeps_order_and_joins_runs(pieces):
    inputs, row = [], 0
    for kind, size in pieces:
        inputs.append(SCHEMAS[kind](list(range(row, row + size))))
        row += size
    before = [as_records(p) if isinstance(p, list) else p.to_pylist() for p in inputs]
    out = concat(inputs)
    # every row, once, in order
    assert [r["i"] for piece in out for r in as_records(piece)] == list(range(row))
    # one piece per run of consecutive pieces of one kind (records; batches of one schema)
    runs = [kind for index, (kind, _) in enumerate(pieces) if index == 0 or pieces[index - 1][0] != kind]
    assert len(out) == len(runs)
    for kind, piece in zip(runs, out):
        if kind == "L":
            assert isinstance(piece, list)
        else:
            assert isinstance(piece, pa.RecordBatch) and piece.schema.equals({"A": SCHEMA_A, "B": SCHEMA_B}[kind])
    # the inputs are untouched
    assert [as_records(p) if isinstance(p, list) else p.to_pylist() for p in inputs] == before


def test_concat_examples():
    a1, a2, b = SCHEMAS["A"]([0, 1]), SCHEMAS["A"]([2]), SCHEMAS["B"]([3])
    out = concat([a1, a2, [{"i": 4}], [{"i": 5}], b, a1])
    assert [type(p).__name__ for p in out] == ["RecordBatch", "list", "RecordBatch", "RecordBatch"]
    assert out[0].to_pylist() == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert out[1] == [{"i": 4}, {"i": 5}]
    assert concat([]) == []


def test_compact_slice_of_a_big_batch_pickles_small():
    big = pa.RecordBatch.from_pydict({"i": np.arange(200_000), "s": pa.array([f"row{i}" for i in range(200_000)])})
    piece = big.slice(123_456, 10)
    small = compact(piece)
    assert small.to_pylist() == piece.to_pylist()
    assert len(pickle.dumps(small)) < len(pickle.dumps(piece)) / 10
    tiny = pa.RecordBatch.from_pydict({"i": [1, 2]})
    assert compact(tiny) is tiny  # nothing to gain: not copied


def test_as_batch_and_as_records_round_trip():
    records = [{"a": 1, "b": "x"}, {"a": 2}]
    batch = as_batch(records, "op")
    assert batch.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]  # a missing field is None
    assert as_batch(batch, "op") is batch and as_records(records) is records
    assert num_rows(batch) == num_rows(records) == 2


def test_as_batch_of_an_unconvertible_record_names_operator_and_record():
    bad = {"v": object()}
    with pytest.raises(OperatorError, match=r"operator 'vec-op' failed on record \{'v': <object object") as info:
        as_batch([{"v": 1}, bad], "vec-op")
    assert info.value.operator == "vec-op" and info.value.record is bad


def test_as_batch_of_an_int_arrow_cannot_hold_names_operator_and_record():
    """An int beyond int64 cannot be carried either: it must be the same OperatorError, not a
    bare OverflowError from pyarrow."""
    bad = {"v": 2**70}
    with pytest.raises(OperatorError, match="operator 'vec-op' failed on record") as info:
        as_batch([{"v": 1}, bad], "vec-op")
    assert info.value.record == bad


def test_to_record_batch_combines_table_chunks():
    table = pa.Table.from_batches([SCHEMAS["A"]([0, 1]), SCHEMAS["A"]([2])])
    assert to_record_batch(table).to_pylist() == [{"i": 0}, {"i": 1}, {"i": 2}]
    empty = pa.Table.from_batches([], schema=SCHEMA_B)
    assert to_record_batch(empty).num_rows == 0 and to_record_batch(empty).schema.names == ["i", "s"]


# ------------------------------------------------------------------ generator batch_fn


def read_all(reader, size: int = 4) -> list[pa.RecordBatch]:
    out = []
    while not reader.finished():
        out.append(reader.read(size))
    return out


def _reader(batch_fn, *, count: int = 10, splits: int = 1, clock: ManualClock | None = None, **kwargs: Any):
    source = GeneratorSource(count=count, batch_fn=batch_fn, splits=splits, name="pvgen", **kwargs)
    return source.reader(source.splits()[0], clock or ManualClock())


def test_generator_batch_fn_gets_the_split_indices_and_a_stamp_column():
    clock = ManualClock(5.0)
    reader = _reader(lambda idx: {"x": pa.array(idx * 10)}, count=10, splits=3, clock=clock)
    first = reader.read(2)
    assert isinstance(first, pa.RecordBatch) and first.schema.names == ["x", "created_at"]
    assert first.to_pylist() == [{"x": 0, "created_at": 5.0}, {"x": 30, "created_at": 5.0}]
    clock.advance(1.0)
    assert [r["x"] for b in read_all(reader) for r in b.to_pylist()] == [60, 90]


def test_generator_batch_fn_tables_and_dicts_work():
    def as_table(idx):
        half = len(idx) // 2
        return pa.Table.from_batches([pa.RecordBatch.from_pydict({"x": idx[:half]}),
                                      pa.RecordBatch.from_pydict({"x": idx[half:]})])

    for fn in (as_table, lambda idx: {"x": idx}, lambda idx: pa.RecordBatch.from_pydict({"x": idx})):
        rows = [r["x"] for b in read_all(_reader(fn, count=9), size=5) for r in b.to_pylist()]
        assert rows == list(range(9))


def test_generator_batch_fn_created_at_is_replaced_not_duplicated():
    reader = _reader(lambda idx: {"created_at": pa.array([-1.0] * len(idx)), "x": idx}, clock=ManualClock(3.0))
    batch = reader.read(3)
    assert batch.schema.names == ["created_at", "x"]
    assert batch.column("created_at").to_pylist() == [3.0, 3.0, 3.0]


def test_generator_batch_fn_without_timestamp_field_adds_no_column():
    assert _reader(lambda idx: {"x": idx}, timestamp_field=None).read(3).schema.names == ["x"]
    assert _reader(lambda idx: {"x": idx}, timestamp_field="ts").read(3).schema.names == ["x", "ts"]


def test_generator_batch_fn_seek_replays_the_same_rows():
    fn = lambda idx: {"x": idx * 3}  # noqa: E731
    full = [r["x"] for b in read_all(_reader(fn, count=17), 4) for r in b.to_pylist()]
    reader = _reader(fn, count=17)
    reader.seek(6)
    assert [r["x"] for b in read_all(reader, 5) for r in b.to_pylist()] == full[6:]


@pytest.mark.parametrize(("batch_fn", "message"), [
    (lambda idx: {"x": idx[:-1]}, r"batch_fn returned 2 rows, expected .* with 3 rows"),
    (lambda idx: [{"x": 1}] * len(idx), "batch_fn returned list, expected a RecordBatch, Table or dict of columns"),
    (lambda idx: pa.array(idx), "batch_fn returned Int64Array"),
    (lambda idx: {"x": [1], "y": [1, 2]}, "'Source: pvgen' failed on record '<indices 0..2>'"),
])
def test_generator_bad_batch_fn_result_names_the_source(batch_fn, message):
    with pytest.raises(OperatorError, match=message) as info:
        _reader(batch_fn, count=3).read(3)
    assert info.value.operator == "Source: pvgen"


def _job_with(batch_fn) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=1)
    env.enable_checkpointing(interval=0.01, mode=CheckpointingMode.EXACTLY_ONCE)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.generate(count=10, batch_fn=batch_fn, name="pvgen").sink_to(CollectSink("out"))
    return env


@pytest.mark.parametrize("batch_fn", [lambda idx: {"x": idx[:-1]}, lambda idx: [1, 2]])
def test_generator_bad_batch_fn_fails_the_job_naming_the_source(batch_fn):
    with pytest.raises(JobFailedError, match="Source: pvgen") as info:
        _job_with(batch_fn).execute("bad", executor="sim", seed=1)
    assert isinstance(info.value.cause, OperatorError) and info.value.cause.operator == "Source: pvgen"


def test_generator_batch_fn_job_commits_every_row():
    result = _job_with(lambda idx: pa.Table.from_pydict({"x": idx})).execute("ok", executor="sim", seed=1)
    assert sorted(r["x"] for r in result.output("out")) == list(range(10))
    assert all(set(r) == {"x", "created_at"} for r in result.output("out"))


def test_generate_with_both_fn_and_batch_fn_is_a_job_graph_error():
    with pytest.raises(JobGraphError, match="give one of fn .* batch_fn .* or rows_fn"):
        StreamEnvironment().generate(count=3, fn=lambda i: {"i": i}, batch_fn=lambda idx: {"i": idx})


# ------------------------------------------------------------------ CollectSink


class BatchCommitter:
    """The external system, keeping what it is given (dicts or one Arrow batch) like the real one."""

    def __init__(self) -> None:
        self.staged: dict[str, Any] = {}
        self.committed: list[tuple[str, list[dict[str, Any]]]] = []

    def stage(self, sink: str, transaction_id: str, records: Any) -> None:
        self.staged[transaction_id] = records if isinstance(records, pa.RecordBatch) else list(records)

    def commit(self, sink: str, transaction_id: str, records: Any = None) -> None:
        if any(txn == transaction_id for txn, _ in self.committed):
            return
        records = self.staged.pop(transaction_id) if records is None else records
        self.committed.append((transaction_id, as_records(records) if isinstance(records, pa.RecordBatch)
                               else list(records)))

    def output(self) -> list[dict[str, Any]]:
        return [r for _, records in self.committed for r in records]


def _open_sink(committer: BatchCommitter, *, checkpointing: bool = True) -> CollectSink:
    sink = CollectSink("pv")
    sink.open(make_ctx(committer=committer, keyed=False, checkpointing=checkpointing))  # type: ignore[arg-type]
    return sink


def _feed(sink: CollectSink, start: int) -> list[dict[str, Any]]:
    """Records, schema-A batches, schema-B batches and records again, interleaved; returns what
    was fed, as dicts, in order."""
    fed: list[dict[str, Any]] = []
    pieces = [("L", 2), ("A", 3), ("A", 1), ("L", 1), ("B", 2), ("A", 2), ("B", 1), ("L", 2)]
    row = start
    for kind, size in pieces:
        piece = SCHEMAS[kind](list(range(row, row + size)))
        row += size
        if isinstance(piece, list):
            assert sink.process_batch(piece) == []
        else:
            assert sink.process_columns(piece) == []
        fed.extend(as_records(piece))
    assert sink.num_staged == len(fed)
    return fed


def test_collect_sink_commits_every_piece_of_a_mixed_transaction_in_order():
    committer = BatchCommitter()
    sink = _open_sink(committer)
    first = _feed(sink, 0)
    sink.snapshot_state(1)
    second = _feed(sink, 100)  # after barrier 1: the next transaction
    sink.snapshot_state(2)
    assert committer.committed == []
    sink.notify_checkpoint_complete(1)
    assert committer.output() == first
    sink.notify_checkpoint_complete(2)
    assert [txn for txn, _ in committer.committed] == ["pv/0/1", "pv/0/2"]
    assert committer.output() == first + second
    assert sink.num_staged == 0 and sink.pending_transactions == []


def test_collect_sink_keeps_one_schema_batches_as_one_batch():
    committer = BatchCommitter()
    sink = _open_sink(committer)
    sink.process_columns(SCHEMAS["B"]([0, 1]))
    sink.process_columns(SCHEMAS["B"]([2]))
    sink.snapshot_state(1)
    staged = committer.staged["pv/0/1"]
    assert isinstance(staged, pa.RecordBatch) and [r["i"] for r in staged.to_pylist()] == [0, 1, 2]


def test_collect_sink_without_checkpoints_commits_a_mixed_stream_at_end_of_input():
    committer = BatchCommitter()
    sink = _open_sink(committer, checkpointing=False)
    fed = _feed(sink, 0)
    assert sink.end_input() == []
    assert committer.output() == fed and [txn for txn, _ in committer.committed] == ["pv/0/final"]
