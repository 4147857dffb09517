"""Landed JSON values round-trip exactly (pure: no Spark needed)."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spark_bridge.io.values import ValueEncodingError, decode_value, encode_value

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.binary(max_size=8) | st.datetimes(timezones=st.none() | st.just(dt.UTC)) | st.dates()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    | st.dictionaries(st.integers(), inner, max_size=3),
    max_leaves=10,
)


def same(a, b) -> bool:
    """Equal with the same types all the way down (1 == 1.0 == True must not pass)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, dt.datetime):
        return a == b and a.tzinfo == b.tzinfo
    return a == b


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(values)
@example({"$tuple": 1})
@example(float("nan"))
@example((1, "a", b"\x00"))
def test_encode_decode_round_trips_exactly(value) -> None:
    back = decode_value(encode_value(value))
    if isinstance(value, float) and value != value:
        assert back != back
    else:
        assert same(back, value), (value, back)


def test_plain_values_stay_plain_json_for_spark_sql() -> None:
    assert encode_value(5) == "5"
    assert json.loads(encode_value("app1")) == "app1"
    assert json.loads(encode_value({"a": [1, 2.5, None]})) == {"a": [1, 2.5, None]}
    assert decode_value(None) is None


def test_unsupported_value_names_the_state() -> None:
    with pytest.raises(ValueEncodingError, match="state 'x'.*set"):
        encode_value({1, 2}, "state 'x'")
    with pytest.raises(ValueEncodingError, match="not a landed JSON value"):
        decode_value("{not json")


def test_decimal_and_dates_are_tagged() -> None:
    assert encode_value(decimal.Decimal("1.50")) == '{"$decimal":"1.50"}'
    assert decode_value(encode_value(dt.date(2024, 2, 29))) == dt.date(2024, 2, 29)


def test_natural_types_per_column() -> None:
    import pyarrow as pa

    from spark_bridge.io.values import natural_type

    assert natural_type(["app0", None]) == pa.string()
    assert natural_type([1, 2**63 - 1]) == pa.int64()
    assert natural_type([1, 2.5]) == pa.float64()  # a float among ints: the column is double
    assert natural_type([[1], []]) == pa.list_(pa.int64())
    assert natural_type([{"a": 1}, {"b": "x"}]) == pa.struct([("a", pa.int64()), ("b", pa.string())])
    assert natural_type([("app0", 1)]) == pa.struct([("_1", pa.string()), ("_2", pa.int64())])
    assert natural_type([None]) == pa.string()
    # JSON text: mixed types, values a Spark type would change, names Spark cannot use
    for mixed in ([1, "a"], [True, 1], [2**63], [2**53 + 1, 0.5], [{1: "a"}], [{"A": 1, "a": 2}], [{"a b": 1}],
                  [(1,), (1, 2)], [dt.date(2024, 1, 1)], [{}]):
        assert natural_type(mixed) is None, mixed


def test_natural_column_falls_back_to_json_and_names_what_cannot_land() -> None:
    from spark_bridge.io.values import natural_column

    assert natural_column([1, "a", None], str).to_pylist() == ["1", '"a"', None]
    assert natural_column([("a", 1)], str).to_pylist() == [{"_1": "a", "_2": 1}]
    with pytest.raises(ValueEncodingError, match=r"operator 'count', state 'seen', key 'app1': .*type set"):
        natural_column(["a", {1, 2}], lambda i: f"operator 'count', state 'seen', key 'app{i}'")
