"""Stateless and keyed operators driven directly with a fake OperatorContext."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from api_fakes import make_ctx, opened

from operators import KeyedProcessFunction, OperatorError
from operators.keyed import ColumnKeySelector, CountOperator, KeyedProcessOperator, ReduceOperator
from operators.timestamps import TIMESTAMP_FIELD
from operators.transforms import FilterOperator, FlatMapOperator, MapBatchesOperator, MapOperator
from vocabulary.ports import ManualClock

ROWS = [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}]


def test_map_filter_flat_map_keep_order():
    assert opened(MapOperator(lambda r: {**r, "v": r["v"] * 2})).process_batch(ROWS) == [
        {"k": "a", "v": 2}, {"k": "b", "v": 4}, {"k": "a", "v": 6}
    ]
    assert opened(FilterOperator(lambda r: r["k"] == "a")).process_batch(ROWS) == [ROWS[0], ROWS[2]]
    flat = FlatMapOperator(lambda r: [r] * r["v"] if r["v"] < 3 else None)
    assert opened(flat).process_batch(ROWS) == [ROWS[0], ROWS[1], ROWS[1]]


def test_flat_map_accepts_generator_functions():
    def explode(r):
        for i in range(r["v"]):
            yield {"k": r["k"], "i": i}

    assert len(opened(FlatMapOperator(explode)).process_batch(ROWS)) == 6


def test_map_error_names_operator_and_failing_record():
    op = opened(MapOperator(lambda r: {"x": 10 // (r["v"] - 2)}, name="divide"))
    with pytest.raises(OperatorError, match=r"operator 'divide' failed on record \{'k': 'b', 'v': 2\}") as info:
        op.process_batch(ROWS)
    assert info.value.record == ROWS[1] and isinstance(info.value.cause, ZeroDivisionError)


def test_map_result_not_a_dict_names_operator_and_record():
    op = opened(MapOperator(lambda r: r["v"], name="bad-map"))
    with pytest.raises(OperatorError, match=r"'bad-map' failed on record \{'k': 'a', 'v': 1\}.*returned int 1, expected a dict"):
        op.process_batch(ROWS)


def test_filter_and_flat_map_errors_name_the_record():
    with pytest.raises(OperatorError, match=r"'filter' failed on record \{'k': 'b'"):
        opened(FilterOperator(lambda r: r["v"] / (r["v"] - 2))).process_batch(ROWS)
    with pytest.raises(OperatorError, match=r"'flat_map' failed on record \{'k': 'a', 'v': 1\}.*expected an iterable"):
        opened(FlatMapOperator(lambda r: r)).process_batch(ROWS)
    with pytest.raises(OperatorError, match="must return an iterable of dicts"):
        opened(FlatMapOperator(lambda r: 5)).process_batch(ROWS)
    with pytest.raises(OperatorError, match="expected dicts in the returned iterable"):
        opened(FlatMapOperator(lambda r: [1])).process_batch(ROWS)


def test_map_batches_is_vectorised_and_accepts_tables():
    calls = []

    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        calls.append(batch.num_rows)
        return batch.set_column(1, "v", pc.multiply(batch.column("v"), 2))

    op = opened(MapBatchesOperator(double))
    assert op.process_batch(ROWS) == [{"k": "a", "v": 2}, {"k": "b", "v": 4}, {"k": "a", "v": 6}]
    assert op.process_batch([]) == [] and calls == [3]
    as_table = opened(MapBatchesOperator(lambda b: pa.Table.from_batches([b]).slice(1)))
    assert as_table.process_batch(ROWS) == ROWS[1:]


def test_map_batches_bad_result_names_operator():
    with pytest.raises(OperatorError, match="'map_batches' failed on record .<batch of 3 records.*returned list"):
        opened(MapBatchesOperator(lambda b: b.to_pylist())).process_batch(ROWS)
    with pytest.raises(OperatorError, match="'vec' failed.*KeyError"):
        opened(MapBatchesOperator(lambda b: {}["x"], name="vec")).process_batch(ROWS)


# ------------------------------------------------------------------ keyed


class CountPerKey(KeyedProcessFunction):
    def process_element(self, record, ctx):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {"k": ctx.key, "count": count.value()}


def test_keyed_process_scopes_state_to_the_record_key():
    op = opened(KeyedProcessOperator(CountPerKey(), ColumnKeySelector("k")))
    assert op.process_batch(ROWS) == [{"k": "a", "count": 1}, {"k": "b", "count": 1}, {"k": "a", "count": 2}]
    assert op.ctx.keyed_backend.dump() == {"count": {"a": 2, "b": 1}}


def test_keyed_context_exposes_list_map_state_time_and_timestamp():
    seen = []

    class Everything(KeyedProcessFunction):
        def open(self, ctx):
            seen.append(("open", ctx.key, ctx.subtask))

        def process_element(self, record, ctx):
            ctx.list_state("vs").add(record["v"])
            ctx.map_state("m").put(str(record["v"]), record["v"])
            seen.append((ctx.key, ctx.timestamp(), ctx.now(), sorted(record)))
            return [{"k": ctx.key, "vs": ctx.list_state("vs").get()}]

    clock = ManualClock(7.0)
    op = opened(KeyedProcessOperator(Everything(), ColumnKeySelector("k")), clock=clock, subtask=0)
    # the event timestamp travels in a reserved field the function does not see; outputs carry it
    out = op.process_batch([{"k": "a", "v": 1, TIMESTAMP_FIELD: 35}, {"k": "a", "v": 2, TIMESTAMP_FIELD: None}])
    assert out == [{"k": "a", "vs": [1], TIMESTAMP_FIELD: 35}, {"k": "a", "vs": [1, 2], TIMESTAMP_FIELD: None}]
    assert seen == [("open", None, 0), ("a", 35, 7.0, ["k", "v"]), ("a", None, 7.0, ["k", "v"])]
    assert op.ctx.keyed_backend.dump()["m"] == {"a": {"1": 1, "2": 2}}


def test_keyed_missing_key_column_names_operator_and_record():
    op = opened(KeyedProcessOperator(CountPerKey(), ColumnKeySelector("app"), name="pv-count"))
    with pytest.raises(OperatorError, match=r"'pv-count' failed on record \{'k': 'a', 'v': 1\}.*no column 'app'"):
        op.process_batch(ROWS)


def test_keyed_process_returning_a_dict_is_a_clear_error():
    class ReturnsDict(KeyedProcessFunction):
        def process_element(self, record, ctx):
            return record

    with pytest.raises(OperatorError, match="not a single dict"):
        opened(KeyedProcessOperator(ReturnsDict(), ColumnKeySelector("k"))).process_batch(ROWS)


def test_keyed_state_that_cannot_be_stored_names_operator_and_record():
    class StoresASet(KeyedProcessFunction):
        def process_element(self, record, ctx):
            ctx.value_state("s").update({1, 2})
            return []

    with pytest.raises(OperatorError, match=r"'keyed-process' failed on record \{'k': 'a'"):
        opened(KeyedProcessOperator(StoresASet(), ColumnKeySelector("k"))).process_batch(ROWS)


def test_keyed_operator_without_backend_fails_on_open():
    with pytest.raises(RuntimeError, match="'keyed-process' is keyed but its task gave it no keyed state backend"):
        KeyedProcessOperator(CountPerKey(), ColumnKeySelector("k")).open(make_ctx(keyed=False))


def test_keyed_process_operator_rejects_other_functions():
    with pytest.raises(TypeError, match="is not a KeyedProcessFunction"):
        KeyedProcessOperator(lambda r, c: [], ColumnKeySelector("k"))


def test_reduce_emits_running_accumulator_per_key_and_copies_acc():
    def add(acc, r):
        acc["v"] += r["v"]  # mutating the given accumulator is safe: it is a copy
        return acc

    op = opened(ReduceOperator(add, ColumnKeySelector("k")))
    assert op.process_batch(ROWS) == [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 4}]
    snapshot = op.ctx.keyed_backend.dump()
    op.process_batch([{"k": "a", "v": 10}])
    assert snapshot["reduce"]["a"] == {"k": "a", "v": 4}
    with pytest.raises(OperatorError, match="reduce function returned int"):
        opened(ReduceOperator(lambda a, r: 1, ColumnKeySelector("k"))).process_batch(ROWS[:1] * 2)


def test_count_emits_key_column_and_count():
    op = opened(CountOperator(ColumnKeySelector("k"), "k"))
    assert op.process_batch(ROWS) == [{"k": "a", "count": 1}, {"k": "b", "count": 1}, {"k": "a", "count": 2}]
    by_fn = opened(CountOperator(lambda r: r["v"] % 2))
    assert by_fn.process_batch(ROWS) == [{"key": 1, "count": 1}, {"key": 0, "count": 1}, {"key": 1, "count": 2}]


def test_column_key_selector_is_picklable_and_compares_by_column():
    import pickle

    sel = pickle.loads(pickle.dumps(ColumnKeySelector("k")))
    assert sel == ColumnKeySelector("k") and sel != ColumnKeySelector("v") and sel(ROWS[0]) == "a"


def test_keyed_process_non_dict_output_and_close_and_open_errors():
    class YieldsInts(KeyedProcessFunction):
        def process_element(self, record, ctx):
            yield 5

    with pytest.raises(OperatorError, match="process_element produced int 5, expected a dict"):
        opened(KeyedProcessOperator(YieldsInts(), ColumnKeySelector("k"))).process_batch(ROWS)

    class Lifecycle(KeyedProcessFunction):
        def open(self, ctx):
            raise RuntimeError("cannot open")

        def process_element(self, record, ctx):
            return None

        def close(self):
            raise RuntimeError("cannot close")

    op = KeyedProcessOperator(Lifecycle(), ColumnKeySelector("k"), name="life")
    with pytest.raises(OperatorError, match="'life' failed on record None: RuntimeError\\('cannot open'\\)"):
        op.open(make_ctx())
    with pytest.raises(OperatorError, match="cannot close"):
        op.close()


# ------------------------------------------------------------------ keyed: the per-record path


class CountWithStateFromOpen(KeyedProcessFunction):
    """`CountPerKey` without its context per record: the state object taken in `open()` (no
    current key then) follows the key the operator sets for each record."""

    def open(self, ctx):
        self.count = ctx.value_state("count", default=0)

    def process_element(self, record, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        yield {"k": record["k"], "count": n}


def test_a_function_not_using_its_context_per_record_gives_the_same_outputs_and_state():
    rows = [{"k": k, "v": i} for i, k in enumerate("abacabbbca")]
    per_record = opened(KeyedProcessOperator(CountPerKey(), ColumnKeySelector("k")))
    from_open = opened(KeyedProcessOperator(CountWithStateFromOpen(), ColumnKeySelector("k")))
    counts = [1, 1, 2, 1, 3, 2, 3, 4, 2, 4]
    expected = [{"k": k, "count": n} for k, n in zip("abacabbbca", counts)]
    assert per_record.process_batch(rows) == from_open.process_batch(rows) == expected
    assert per_record.ctx.keyed_backend.dump() == from_open.ctx.keyed_backend.dump() == {
        "count": {"a": 4, "b": 4, "c": 2}}


def test_a_record_the_key_column_cannot_be_read_from_names_operator_record_and_column():
    op = opened(KeyedProcessOperator(CountPerKey(), ColumnKeySelector("k"), name="pv-count"))
    with pytest.raises(OperatorError, match=r"'pv-count' failed on record \['a'\].*cannot read column 'k' of a list"):
        op.process_batch([{"k": "a"}, ["a"]])
    assert op.ctx.keyed_backend.dump() == {"count": {"a": 1}}  # the record before it was counted


def test_a_failing_key_function_is_called_once_and_names_operator_and_record():
    calls = []

    def key(record):
        calls.append(record)
        return 1 // (record["v"] - 2)

    op = opened(KeyedProcessOperator(CountPerKey(), key, name="by-fn"))
    with pytest.raises(OperatorError, match=r"'by-fn' failed on record \{'k': 'b', 'v': 2\}.*ZeroDivisionError") as info:
        op.process_batch(ROWS)
    assert calls == ROWS[:2] and info.value.record == ROWS[1]


def test_a_keyed_operator_keyed_by_a_column_survives_copying_and_pickling():
    import copy
    import pickle

    template = KeyedProcessOperator(CountPerKey(), ColumnKeySelector("k"))
    for clone in (copy.deepcopy(template), pickle.loads(pickle.dumps(template))):
        assert opened(clone).process_batch(ROWS) == [{"k": "a", "count": 1}, {"k": "b", "count": 1},
                                                     {"k": "a", "count": 2}]
