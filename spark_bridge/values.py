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
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from typing import Any

__all__ = ["ValueEncodingError", "decode_value", "encode_value"]


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
