"""The one-type-per-field rule (`runtime/records/record_types.py`) and `Buffer.from_records` under it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import Buffer, RecordTypeError
from runtime.records.record_types import StreamSchema, describe_record


def schema_after(*pieces: Any) -> dict[str, pa.DataType]:
    stream = StreamSchema("records emitted by operator 'op'")
    for piece in pieces:
        stream.check(piece)
    return stream.types


def error_of(*pieces: Any) -> RecordTypeError:
    stream = StreamSchema("records emitted by operator 'op'")
    with pytest.raises(RecordTypeError) as info:
        for piece in pieces:
            stream.check(piece)
    return info.value


@pytest.mark.parametrize(("values", "arrow_type"), [
    ([1, 2.5], pa.float64()),                      # ints widen to floats
    ([None, 1, None], pa.int64()),                 # None fits any field
    ([[], [1], [None, 2.0]], pa.list_(pa.float64())),
    ([(1, 2), [3]], pa.list_(pa.int64())),         # a tuple is a list
    ([{"a": 1}, {"b": "s"}], pa.struct([("a", pa.int64()), ("b", pa.string())])),
    ([b"x", None], pa.binary()),
])
def test_types_that_unify(values: list[Any], arrow_type: pa.DataType) -> None:
    one_piece = schema_after([{"x": v} for v in values])
    one_by_one = schema_after(*[[{"x": v}] for v in values])
    assert one_piece == one_by_one == {"x": arrow_type}


@pytest.mark.parametrize(("values", "new", "old"), [
    ([1, "s"], "string", "int64"),
    ([0.5, True], "bool", "double"),               # Arrow would make True 1.0 here...
    ([True, 0.5], "double", "bool"),               # ...and fail here
    ([b"x", "y"], "string", "binary"),             # Arrow would make "y" bytes
    ([[1], ["a"]], "list<item: string>", "list<item: int64>"),
    ([{"a": 1}, {"a": "s"}], "struct<a: string>", "struct<a: int64>"),
    ([1, [1]], "list<item: int64>", "int64"),
])
def test_types_that_do_not_unify_name_field_both_types_and_record(values: list[Any], new: str, old: str) -> None:
    for pieces in ([[{"i": i, "x": v} for i, v in enumerate(values)]],
                   [[{"i": i, "x": v}] for i, v in enumerate(values)]):
        error = error_of(*pieces)
        record = {"i": len(values) - 1, "x": values[-1]}
        assert str(error) == (
            f"records emitted by operator 'op': field 'x' is {new} in record {record!r}, but {old} in earlier "
            "records; a field keeps one Arrow type per stream (None fits any type, ints widen to floats)"
        )
        assert error.field == "x" and error.record == record


@pytest.mark.parametrize(("value", "reason"), [
    (object(), "which Arrow cannot hold (ArrowInvalid: Could not convert"),
    (2**63, "which does not fit in int64, the widest int Arrow holds"),
    ((1, "a"), "which mixes int64 and string in its items"),
    ({1: "a"}, "which has a key that is not a string: 1"),
])
def test_values_arrow_cannot_hold_are_named(value: Any, reason: str) -> None:
    error = error_of([{"x": 1}, {"x": value}])
    assert f"records emitted by operator 'op': field 'x' of record {{'x': {value!r}}} holds {value!r}" in str(error)
    assert reason in str(error)


def test_an_int_beyond_2_53_and_a_float_in_one_field_fail_in_either_order_and_any_grouping() -> None:
    big = 2**60 + 1
    for values in ([big, 0.5], [0.5, big]):
        for pieces in ([[{"x": v} for v in values]], [[{"x": v}] for v in values]):
            assert "a float cannot hold" in str(error_of(*pieces)), (values, pieces)
    assert schema_after([{"x": big}], [{"x": 3}]) == {"x": pa.int64()}  # ints alone are fine


def test_an_int_field_that_held_an_int_beyond_2_53_rejects_a_float_after_fast_path_pieces() -> None:
    """Lists of the same fields take the fast path (one type set and int range per field): it must
    still remember the big int and refuse a float later, and refuse a big int in a float field."""
    big = 2**60 + 1
    error = error_of([{"x": 1}], [{"x": big}], [{"x": 2}], [{"x": 3}], [{"x": 0.5}])
    assert "field 'x' is double in record {'x': 0.5}, but an earlier record holds an int beyond 2**53" in str(error)
    assert f"({{'x': {big}}})" in str(error)
    error = error_of([{"x": 0.5}], [{"x": 1}], [{"x": 2}], [{"x": big}])
    assert f"holds the int {big}, beyond 2**53, but floats in earlier records" in str(error)
    assert schema_after([{"x": 1}], [{"x": big}], [{"x": -big}], [{"x": 7}]) == {"x": pa.int64()}


def test_an_extra_field_on_the_fast_path_is_checked() -> None:
    """Once a list of records with fields {x} took the fast path, records with a field more must
    not slip through it unchecked: the new field gets its type, and breaking it is an error."""
    for extra in ([{"x": 2, "y": 1}], [{"x": 2}, {"x": 3, "y": 1}]):
        error = error_of([{"x": 1}], [{"x": 1}], extra, [{"x": 4, "y": "s"}])
        assert "field 'y' is string in record {'x': 4, 'y': 's'}, but int64 in earlier records" in str(error), extra
    assert schema_after([{"x": 1}], [{"x": 1}], [{"x": 2, "y": b"b"}]) == {"x": pa.int64(), "y": pa.binary()}
    assert "field 'y' is string" in str(error_of([{"x": 1, "y": 1}], [{"x": 1, "y": 2}], [{"y": "s"}]))


def test_the_earliest_offending_record_is_named_whatever_its_field() -> None:
    rows = [{"a": 1, "b": 1}, {"a": 1, "b": "late"}, {"a": "early", "b": 1}]
    rows[1], rows[2] = rows[2], rows[1]
    assert error_of(rows).record == {"a": "early", "b": 1}


def test_records_must_be_dicts_with_string_field_names() -> None:
    assert "[1, 2] is a list, but records are dicts" in str(error_of([{"x": 1}, [1, 2]]))
    assert "has a field named 1 (int); field names must be strings" in str(error_of([{1: 2}]))


def test_a_record_without_fields_is_an_error_not_a_lost_record() -> None:
    """A buffer of such records had no rows: they were dropped (only when alone in a buffer)."""
    message = "records emitted by operator 'op': {} has no field: Arrow cannot carry a record without columns"
    assert str(error_of([{"x": 1}, {}])) == str(error_of([{"x": 1}], [{}])) == message


def test_batches_and_records_share_a_stream() -> None:
    batch = pa.RecordBatch.from_pydict({"x": pa.array([1, 2], pa.int32()), "k": pa.array(["a", "b"]).dictionary_encode()})
    assert schema_after(batch, [{"x": 3, "k": "c"}]) == {"x": pa.int64(), "k": pa.string()}
    error = error_of(batch, [{"x": "s", "k": "c"}])
    assert "field 'x' is string in record {'x': 's', 'k': 'c'}, but int64 in earlier records" in str(error)
    error = error_of([{"x": 1}], pa.RecordBatch.from_pydict({"x": [None, "s"]}))
    assert "field 'x' is string in record {'x': 's'}, but int64" in str(error)


def test_buffer_from_records_follows_the_rule_and_names_field_and_record() -> None:
    with pytest.raises(RecordTypeError, match=r"records given to Buffer.from_records: field 'x' is string in record "
                                              r"\{'x': 's'\}, but int64 in earlier records"):
        Buffer.from_records([{"x": 1}, {"x": "s"}])
    assert Buffer.from_records([{"x": 1}, {"x": 0.5}, {"y": None}]).batch.schema.types == [pa.float64(), pa.null()]


def test_describe_record_cuts_a_huge_record_short_with_its_size() -> None:
    record = {"k": "v" * 1_000_000}
    text = describe_record(record)
    assert len(text) < 260 and text.startswith("{'k': 'vvv")
    assert text.endswith(f"... (1 field, {len(repr(record)):,} characters)")
    assert describe_record({"k": 1}) == "{'k': 1}"


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([2**60, -(2**62), 2**64]),
    st.floats(allow_nan=False, width=32), st.sampled_from(["a", "b"]), st.just(b"x"),
    st.lists(st.integers(0, 3), max_size=2), st.lists(st.sampled_from(["s", 1.5]), max_size=2),
    st.fixed_dictionaries({"a": st.integers(0, 3)}), st.just(object()),
)
RECORDS = st.lists(st.dictionaries(st.sampled_from(["x", "y"]), VALUES, max_size=2), min_size=1, max_size=12)


def outcome(rows: list[dict[str, Any]], size: int) -> Any:
    stream = StreamSchema("records emitted by operator 'op'")
    try:
        for start in range(0, len(rows), size):
            stream.check(rows[start:start + size])
    except RecordTypeError as exc:
        return str(exc)
    return stream.types


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(rows=RECORDS, size=st.integers(1, 12))
def test_the_outcome_does_not_depend_on_how_the_stream_is_cut_into_pieces(rows, size) -> None:
    assert outcome(rows, size) == outcome(rows, 1) == outcome(rows, len(rows))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(rows=RECORDS)
def test_records_the_rule_accepts_always_convert(rows) -> None:
    try:
        StreamSchema("s").check(rows)
    except RecordTypeError:
        return
    assert Buffer.from_records(rows, checked=True).batch.num_rows == len(rows)
