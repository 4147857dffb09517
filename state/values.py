"""What a state value may be, and how stored values are kept private.

State must be writable as Arrow (never pickled), so every value written to state is
checked when it is written, not at checkpoint time when the error would be far from its cause.
Scalars of the common types (`int` within int64, `float`, `str`, `bool`, `bytes`, `None`) are
stored as they are, and so is a copy of a record (a dict of str keys) holding only those or such
records, which Arrow reads back equal. Anything else goes through `pa.scalar(value).as_py()`: that
both checks the value and turns it into the form a restore will produce (tuples become lists, numpy
scalars become Python ones), so a job behaves the same before and after a restore.

Containers are stored privately and copied on the way out (`copy_value`), so a caller mutating a
value it read, or a value it wrote, can never change state behind the backend's back; that keeps
the dirty tracking of key groups (and therefore snapshots) exact.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

#: types stored as-is (immutable, and Arrow carries them natively)
SCALAR_TYPES = frozenset({int, float, str, bool, bytes, type(None)})


class UnrepresentableValue(Exception):
    """Internal: `value` cannot be stored; `reason` says why. Callers add operator/state/key."""

    def __init__(self, value: Any, reason: str) -> None:
        super().__init__(reason)
        self.value = value
        self.reason = reason


def reject_sets(value: Any) -> None:
    """Raise `UnrepresentableValue` if `value` is or contains a set (Arrow would make it a list)."""
    # pa.scalar silently turns a set into a list (losing nothing but the type); reject it instead,
    # a set's iteration order is not stable across processes.
    t = type(value)
    if t is set or t is frozenset:
        raise UnrepresentableValue(value, f"a {t.__name__} is not Arrow-representable (use a list)")
    if t is list or t is tuple:
        for item in value:
            reject_sets(item)
    elif t is dict:
        for item in value.values():
            reject_sets(item)


def normalize_value(value: Any) -> Any:
    """The stored form of `value`: itself for plain scalars, else Arrow's `as_py()` of it.

    Raises:
        UnrepresentableValue: Arrow cannot carry the value.
    """
    if _is_plain_scalar(value):
        return value
    if type(value) is dict and _is_plain_record(value):
        return copy_value(value)  # what Arrow's struct of it reads back as, at a tenth of the cost
    reject_sets(value)
    try:
        return pa.scalar(value).as_py()
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise UnrepresentableValue(value, f"{type(exc).__name__}: {exc}") from None


def _is_plain_record(value: dict[Any, Any]) -> bool:
    """Whether `value` maps str keys to plain scalars (ints within int64) or to such records: a
    record whose Arrow struct reads back as an equal dict."""
    return all(type(key) is str and (_is_plain_record(item) if type(item) is dict else _is_plain_scalar(item))
               for key, item in value.items())


def _is_plain_scalar(value: Any) -> bool:
    """A scalar stored as it is (an int only within int64)."""
    t = type(value)
    return t in SCALAR_TYPES and (t is not int or INT64_MIN <= value <= INT64_MAX)


def copy_value(value: Any) -> Any:
    """A private copy of a stored value: lists and dicts are copied deeply, the rest is shared."""
    t = type(value)
    if t is list:
        return [v if type(v) in SCALAR_TYPES else copy_value(v) for v in value]
    if t is dict:
        return {k: v if type(v) in SCALAR_TYPES else copy_value(v) for k, v in value.items()}
    return value


def describe_value(value: Any) -> str:
    """`repr` of a value, cut short for error messages."""
    text = repr(value)
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{text} ({type(value).__name__})"


def values_equal(a: Any, b: Any) -> bool:
    """Python equality, except NaN equals NaN and a tuple equals the list Arrow makes of it."""
    if a == b:
        return True
    ta, tb = type(a), type(b)
    if ta is float and tb is float:
        return a != a and b != b
    if ta in (list, tuple) and tb in (list, tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if ta is dict and tb is dict:
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    return False
