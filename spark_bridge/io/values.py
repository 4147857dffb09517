"""Exact JSON text for state keys and values in landed tables (`encode_value`/`decode_value`).

Landed tables have one `key` and one `value` column for every operator and state, whatever their
Python types, so both are JSON text: readable and queryable with Spark SQL (`CAST(value AS
BIGINT)`, `get_json_object`, `from_json`). Plain JSON covers None, bool, int, finite float, str,
lists and dicts with str keys. Everything else state can hold is *tagged* so that decoding gives
back exactly what was encoded (restoring a job from landed tables depends on it):

    {"$tuple": [...]}   {"$bytes": "<base64>"}   {"$float": "nan" | "inf" | "-inf"}
    {"$datetime": "<isoformat>"}   {"$date": ...}   {"$time": ...}   {"$decimal": "<str>"}
    {"$timedelta": [days, seconds, microseconds]}   {"$dict": [[key, value], ...]}

(`$dict` is used for dicts whose keys are not all str, or when a key starts with "$".)

Natural types (`natural_type`, `natural_column`): the per-state tables (`spark_bridge.io.state_tables`)
hold one state's keys and values in the Spark type all of them fit, decided per column over every
value of the state in the checkpoint (None is a SQL NULL and fits any type):

    str -> string      int -> long (int64)      float, or ints and floats -> double
    bool -> boolean    bytes -> binary
    list -> array of the type all elements fit
    dict with str keys -> struct, one field per key seen (a missing key is NULL)
    tuple -> struct _1, _2, ... (every tuple of the column the same length, as Spark's tuples)

Anything else is JSON text (`encode_value`): a column mixing types (an int and a str, a bool among
ints), an int beyond int64, ints and floats with an int beyond 2**53 (a double would change it),
dates, decimals, dicts with non-str keys or keys Spark cannot name a field (empty, duplicate
ignoring case, or holding one of ` ,;{}()=` or a newline or tab), tuples of different lengths.
A value JSON cannot carry either (a set, an object) fails the landing with an error naming it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

__all__ = ["ValueEncodingError", "decode_value", "encode_value", "natural_column", "natural_type"]


class ValueEncodingError(ValueError):
    """A value has a type the landed tables cannot carry exactly."""


def _tag(value: Any, what: str) -> Any:
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if t is list:
        return [_tag(v, what) for v in value]
    if t is tuple:
        return {"$tuple": [_tag(v, what) for v in value]}
    if t is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: _tag(v, what) for k, v in value.items()}
        return {"$dict": [[_tag(k, what), _tag(v, what)] for k, v in value.items()]}
    if t is bytes or t is bytearray:
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if t is dt.datetime:
        return {"$datetime": value.isoformat()}
    if t is dt.date:
        return {"$date": value.isoformat()}
    if t is dt.time:
        return {"$time": value.isoformat()}
    if t is dt.timedelta:
        return {"$timedelta": [value.days, value.seconds, value.microseconds]}
    if t is decimal.Decimal:
        return {"$decimal": str(value)}
    raise ValueEncodingError(f"{what}: cannot land a value of type {t.__name__}: {value!r}")


def encode_value(value: Any, what: str = "value") -> str:
    """JSON text for `value` (see the module docstring); `decode_value` inverts it exactly.

    Raises:
        ValueEncodingError: `value` (or something inside it) has an unsupported type; `what`
            names the state in the message.
    """
    t = type(value)
    if t is int:  # the common case (counters), without the json machinery
        return str(value)
    return json.dumps(_tag(value, what), ensure_ascii=False, separators=(",", ":"))


def _untag(obj: Any) -> Any:
    if type(obj) is list:
        return [_untag(v) for v in obj]
    if type(obj) is not dict:
        return obj
    if len(obj) == 1:
        ((tag, body),) = obj.items()
        if tag.startswith("$"):
            return _decode_tag(tag, body)
    return {k: _untag(v) for k, v in obj.items()}


def _decode_tag(tag: str, body: Any) -> Any:
    if tag == "$tuple":
        return tuple(_untag(v) for v in body)
    if tag == "$dict":
        return {_untag(k): _untag(v) for k, v in body}
    if tag == "$bytes":
        return base64.b64decode(body)
    if tag == "$float":
        return float(body)
    if tag == "$datetime":
        return dt.datetime.fromisoformat(body)
    if tag == "$date":
        return dt.date.fromisoformat(body)
    if tag == "$time":
        return dt.time.fromisoformat(body)
    if tag == "$timedelta":
        return dt.timedelta(days=body[0], seconds=body[1], microseconds=body[2])
    if tag == "$decimal":
        return decimal.Decimal(body)
    raise ValueEncodingError(f"unknown tag {tag!r} in landed JSON value")


def decode_value(text: str | None) -> Any:
    """The Python value `encode_value` encoded as `text` (None stays None: a SQL NULL).

    Raises:
        ValueEncodingError: `text` is not JSON written by `encode_value`.
    """
    if text is None:
        return None
    try:
        return _untag(json.loads(text))
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        if isinstance(exc, ValueEncodingError):
            raise
        raise ValueEncodingError(f"not a landed JSON value: {text[:80]!r}: {exc}") from None


# ------------------------------------------------------------------------------ natural types

_INT64 = (-(2**63), 2**63 - 1)
_EXACT_IN_DOUBLE = 2**53
_BAD_FIELD_CHARS = frozenset(" ,;{}()=\n\t")


def _field_names_ok(names: Sequence[str]) -> bool:
    folded = [n.lower() for n in names]
    return (bool(names) and len(set(folded)) == len(folded)
            and all(n and not _BAD_FIELD_CHARS.intersection(n) for n in names))


def _infer(values: list[Any]) -> pa.DataType | None:
    """The Arrow type every value fits (pa.null() if all are None), None if they need JSON."""
    present = [v for v in values if v is not None]
    if not present:
        return pa.null()
    types = {type(v) for v in present}
    if types == {bool}:
        return pa.bool_()
    if types == {int}:
        return pa.int64() if all(_INT64[0] <= v <= _INT64[1] for v in present) else None
    if types == {int, float} or types == {float}:
        exact = all(type(v) is float or abs(v) <= _EXACT_IN_DOUBLE for v in present)
        return pa.float64() if exact else None
    if types == {str}:
        return pa.string()
    if types <= {bytes, bytearray}:
        return pa.binary()
    if types == {list}:
        element = _infer([x for v in present for x in v])
        return pa.list_(element) if element is not None else None
    if types == {tuple}:
        if len({len(v) for v in present}) != 1 or not present[0]:
            return None
        return _infer([_tuple_fields(v) for v in present])
    if types == {dict}:
        names = list(dict.fromkeys(k for v in present for k in v))
        if not all(type(n) is str for n in names) or not _field_names_ok(names):
            return None
        fields = []
        for name in names:
            field_type = _infer([v.get(name) for v in present])
            if field_type is None:
                return None
            fields.append(pa.field(name, field_type))
        return pa.struct(fields)
    return None


def _tuple_fields(value: tuple) -> dict[str, Any]:
    return {f"_{i}": v for i, v in enumerate(value, 1)}


def _concrete(t: pa.DataType) -> pa.DataType:
    """`t` with every null type (all values None) as string: Spark reads no Parquet null column."""
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_list(t):
        return pa.list_(_concrete(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _concrete(f.type)) for f in t])
    return t


def natural_type(values: Sequence[Any]) -> pa.DataType | None:
    """The natural Arrow (so Spark) type of a column of `values`, or None: JSON text (see the
    module docstring)."""
    t = _infer(list(values))
    return None if t is None else _concrete(t)


def _plain(value: Any) -> Any:
    """`value` as pyarrow takes it for its natural type (tuples become `_1, _2, ...` structs)."""
    t = type(value)
    if t is tuple:
        return {k: _plain(v) for k, v in _tuple_fields(value).items()}
    if t is list:
        return [_plain(v) for v in value]
    if t is dict:
        return {k: _plain(v) for k, v in value.items()}
    return value


def natural_column(values: Sequence[Any], describe: Callable[[int], str]) -> pa.Array:
    """`values` as an Arrow array of their natural type, else of JSON text (None stays NULL).

    Args:
        values: one column of one state.
        describe: names the state, operator and record of `values[i]`, for the error.

    Raises:
        ValueEncodingError: a value JSON cannot carry either (the message names it via `describe`).
    """
    t = natural_type(values)
    if t is not None:
        return pa.array([_plain(v) for v in values], type=t)
    encoded = []
    for i, value in enumerate(values):
        try:
            encoded.append(None if value is None else encode_value(value))
        except ValueEncodingError:
            encode_value(value, describe(i))  # raises again, naming the state, operator and record
            raise
    return pa.array(encoded, type=pa.string())
