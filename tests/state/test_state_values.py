"""What state stores for a value (`state.values.normalize_value`): exactly what a restore reads
back from Arrow, whatever shortcut it takes for plain records."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from state.values import INT64_MAX, INT64_MIN, UnrepresentableValue, normalize_value, values_equal

scalars = (st.none() | st.booleans() | st.integers(INT64_MIN - 2, INT64_MAX + 2) | st.floats(allow_nan=True)
           | st.text(max_size=5) | st.binary(max_size=5))
records = st.recursive(st.dictionaries(st.text(max_size=4), scalars, max_size=6),
                       lambda inner: st.dictionaries(st.text(max_size=3), scalars | inner, max_size=3), max_leaves=10)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                              max_size=3), max_leaves=8)


def arrow_round_trip(value):
    """What Arrow makes of `value`, or the error type it raises."""
    try:
        return pa.scalar(value).as_py()
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        return type(exc)


@given(records | values)
def test_a_value_is_stored_as_arrow_reads_it_back(value) -> None:
    expected = arrow_round_trip(value)
    if isinstance(expected, type):
        with pytest.raises(UnrepresentableValue):
            normalize_value(value)
        return
    stored = normalize_value(value)
    assert values_equal(stored, expected) and type(stored) is type(expected), (value, stored, expected)


def test_a_stored_record_is_a_private_copy() -> None:
    record = {"key": 1, "left": {"price": 7, "bidder": "b"}}
    stored = normalize_value(record)
    record["left"]["price"] = 8
    assert stored == {"key": 1, "left": {"price": 7, "bidder": "b"}}


def test_a_record_with_a_value_arrow_cannot_carry_is_refused() -> None:
    for record in ({"a": 1 << 63}, {"a": {1, 2}}, {1: "int key"}, {"a": {"b": 1 << 64}}, {"a": {2: "b"}}):
        with pytest.raises(UnrepresentableValue):
            normalize_value(record)
    assert math.isnan(normalize_value({"a": math.nan})["a"])
