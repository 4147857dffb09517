"""One Arrow type per field: the rule records follow wherever they become Arrow.

Theory of operation
-------------------
Records are dicts inside an operator chain and Arrow where they leave it: network buffers (built
when asked for: between tasks of one process a buffer hands its list over), a sink's staged
transactions, the input of a vectorised operator (never pickled). Arrow gives a
column one type, and its inference, applied one buffer at a time, would make the outcome depend
on how records happen to be grouped: an int and a str in one field would fail only when they shared
a buffer, `[0.5, True]` would silently become `[0.5, 1.0]` while `[True, 0.5]` failed, and a chained
sink would accept `object()` on the simulator but not on Ray. So a task checks each stream that reaches
Arrow against one rule, record by record in the stream's order, before any grouping:

* every value is one Arrow can hold (an int fits in int64; no `object()`);
* a field keeps one Arrow type along the stream: that of its first non-None value. None fits any
  field, and a record lacking a field has None there. Types unify only where no value changes
  but for its type: ints widen to floats (an int then may arrive as an equal float, so it must
  fit a float exactly, |int| <= 2**53), narrower numbers to wider ones, dicts (structs) to the
  union of their keys, lists element-wise. Nothing else mixes: not bool with numbers, not str
  with bytes, not int with str.

`StreamSchema` holds one stream's field types; `check(data)` takes one piece of the stream, a list
of dicts or an Arrow batch. The common case costs one pass over each field's values per list (the
set of their Python types, compared with the set the field accepts; min and max for ints) and one
schema comparison per batch. Tasks keep one per output (all channels together) and one per
operator whose input becomes Arrow (`runtime/core/task.py`); `Buffer.from_records` checks its own
records with a fresh one. The types start afresh in every execution attempt.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from itertools import chain
from operator import itemgetter
from typing import Any

import pyarrow as pa

from state.values import describe_value
from vocabulary.errors import SuppressRestartsError

NONE = type(None)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: the largest int a float (double) holds exactly, and every int below it
FLOAT_EXACT = 1 << 53

_SCALARS: dict[type, pa.DataType] = {
    NONE: pa.null(), bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string(), bytes: pa.binary(),
}
RULE = "a field keeps one Arrow type per stream (None fits any type, ints widen to floats)"
#: the deepest lists and dicts may nest in a record: Python's repr and pickle (how records cross
#: Ray) give up at ~1,000 levels and pickling an Arrow type at ~500, so a record nested deeper fails
#: where it becomes Arrow, naming it, the same on both executors
MAX_NESTING = 100


class RecordConversionError(ValueError):
    """Records could not be turned into an Arrow batch (names the offending record)."""


class RecordTypeError(RecordConversionError, SuppressRestartsError):
    """A record breaks the one-type-per-field rule or holds a value Arrow cannot; the message names
    the stream (the operator that emitted it), the field, the types and the record. The same record
    comes again after a restart, so the job fails at once."""

    def __init__(self, message: str, *, field: str | None = None, record: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.record = record


def describe_record(record: Any) -> str:
    """`repr` of a record, cut to 200 characters (a record may hold megabytes) plus its size."""
    text = shallow_repr(record)
    if len(text) <= 200:
        return text
    fields = f"{len(record)} field{'' if len(record) == 1 else 's'}, " if isinstance(record, Mapping) else ""
    return f"{text[:200]}... ({fields}{len(text):,} characters)"


_SHALLOW = reprlib.Repr()
_SHALLOW.maxlevel, _SHALLOW.maxstring, _SHALLOW.maxother = 8, 200, 200


def shallow_repr(value: Any) -> str:
    """`repr(value)`, or a shallower one (`reprlib`) of a value nested too deep for `repr`."""
    try:
        return repr(value)
    except RecursionError:
        return _SHALLOW.repr(value)


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether lists, tuples and dicts nest in `value` more than `limit` levels deep (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is list or kind is tuple or kind is dict:
            if depth >= limit:
                return True
            stack.extend((x, depth + 1) for x in (item.values() if kind is dict else item))
    return False


class _Unrepresentable(Exception):
    """Internal: a value Arrow cannot hold or that breaks the rule; `reason` completes "holds X, which"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Field:
    __slots__ = ("type", "accepted", "big_int")

    def __init__(self) -> None:
        #: the field's Arrow type so far (null until a non-None value)
        self.type: pa.DataType = pa.null()
        #: Python types the fast path lets through; None: not plain scalars, check per column
        self.accepted: frozenset[type] | None = frozenset({NONE})
        #: the first record with an int beyond 2**53 here (described): a float may not join then
        self.big_int: str | None = None

    def int_bound(self) -> int:
        """Ints within +-this pass the fast path (beyond: the slow path decides)."""
        if pa.types.is_floating(self.type) or self.big_int is None:
            return FLOAT_EXACT
        return INT64_MAX

    def settle(self, new_type: pa.DataType) -> None:
        self.type = new_type
        self.accepted = _accepted(new_type)


class StreamSchema:
    """The Arrow type each field of one stream has taken so far (see the module docstring).

    Args:
        stream: names the stream in error messages, e.g. "records emitted by operator 'to-app'".
    """

    __slots__ = ("stream", "_fields", "_names", "_getters", "_schema")

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self._fields: dict[str, _Field] = {}
        #: the fields of the last list whose records all had exactly these (plain scalar) fields
        self._names: tuple[str, ...] = ()
        self._getters: tuple[Callable[[Any], Any], ...] = ()
        #: the last batch schema found to agree
        self._schema: pa.Schema | None = None

    @property
    def last_fields(self) -> tuple[str, ...]:
        """After `check` of a non-empty list: the fields every one of its records has, exactly (all
        plain scalars); () when not known so (a record lacks one or has another, or one is nested)."""
        return self._names

    @property
    def types(self) -> dict[str, pa.DataType]:
        """Field name -> Arrow type so far (null: only None seen)."""
        return {name: f.type for name, f in self._fields.items()}

    def check(self, data: list[Any] | pa.RecordBatch) -> None:
        """Check the next piece of the stream: a list of dict records or an Arrow batch.

        Raises:
            RecordTypeError: the first record, in stream order, that breaks the rule.
        """
        if isinstance(data, pa.RecordBatch):
            self.check_batch(data)
        else:
            self.check_records(data)

    # ------------------------------------------------------------------ records

    def check_records(self, rows: list[Any]) -> None:
        if rows and not self._agrees(rows):
            self._check_slowly(rows)

    def _agrees(self, rows: list[Any]) -> bool:
        """The fast path: every record has exactly the fields of the last such list, and each
        field's values are of Python types it already accepts (ints within its bound)."""
        names = self._names
        if not names:
            return False
        fields = self._fields
        try:
            if sum(map(len, rows)) != len(names) * len(rows):
                return False
            for name, get in zip(names, self._getters):
                field = fields[name]
                accepted = field.accepted
                if int not in accepted:  # type: ignore[operator]
                    if not set(map(type, map(get, rows))) <= accepted:  # KeyError: a record lacks it
                        return False
                    continue
                values = list(map(get, rows))
                kinds = set(map(type, values))
                if not kinds <= accepted:
                    return False
                if int in kinds:
                    ints = values if NONE not in kinds else [v for v in values if v is not None]
                    bound = field.int_bound()
                    if min(ints) < -bound or max(ints) > bound:
                        return False
        except (LookupError, TypeError):  # not dicts, or a record lacks a field
            return False
        return True

    def _check_slowly(self, rows: list[Any]) -> None:
        """Column by column; on trouble, the error is about the earliest offending record."""
        problems: list[tuple[tuple[int, int], RecordTypeError]] = []  # ((record, field position), error)
        for index, row in enumerate(rows):
            if not isinstance(row, Mapping) or not row:
                why = "has no field: Arrow cannot carry a record without columns" if isinstance(row, Mapping) \
                    else f"is a {type(row).__name__}, but records are dicts"
                problems.append(((index, -1), RecordTypeError(f"{self.stream}: {describe_record(row)} {why}",
                                                              record=row)))
                rows = rows[:index]
                break
        names = dict.fromkeys(chain.from_iterable(rows))
        plain = True
        for name in names:
            if not isinstance(name, str):
                index = next(i for i, r in enumerate(rows) if name in r)
                problems.append(((index, list(rows[index]).index(name)), RecordTypeError(
                    f"{self.stream}: record {describe_record(rows[index])} has a field named {name!r} "
                    f"({type(name).__name__}); field names must be strings", field=None, record=rows[index])))
                continue
            problem = self._check_column(name, [r.get(name) for r in rows], rows)
            if problem is not None:
                index, error = problem
                # an error about the earliest record; of its fields, the first in its own order
                problems.append(((index, list(rows[index]).index(name)), error))
            elif self._fields[name].accepted is None:
                plain = False
        if problems:
            raise min(problems, key=lambda p: p[0])[1]
        if plain and sum(map(len, rows)) == len(names) * len(rows):
            self._names = tuple(names)
            self._getters = tuple(itemgetter(n) for n in names)
        else:
            self._names, self._getters = (), ()

    def _check_column(self, name: str, values: list[Any], rows: list[Any]) -> tuple[int, RecordTypeError] | None:
        """Unify one field's values into its type, or the first offending record's error."""
        field = self._fields.get(name)
        if field is None:
            field = self._fields[name] = _Field()
        kinds = set(map(type, values))
        kinds.discard(NONE)
        if not kinds:
            return None
        column: pa.DataType | None
        if not kinds <= _SCALARS.keys() and any(nested_deeper_than(v, MAX_NESTING) for v in values):
            return self._first_offender(name, field, values, rows)
        if kinds <= _SCALARS.keys():
            column = _unify_all(_SCALARS[k] for k in kinds)
            if column is not None and int in kinds:
                ints = [v for v in values if type(v) is int]
                low, high = min(ints), max(ints)
                if low < INT64_MIN or high > INT64_MAX:
                    column = None
                elif (low < -FLOAT_EXACT or high > FLOAT_EXACT) and (
                        field.big_int is None or pa.types.is_floating(column) or pa.types.is_floating(field.type)):
                    column = None  # an int a float cannot hold exactly: the walk below decides
        else:
            column = _column_type(values)
        new = None if column is None else _unify(field.type, column)
        if new is None or (field.big_int is not None and pa.types.is_floating(new)):
            return self._first_offender(name, field, values, rows)
        field.settle(new)
        return None

    def _first_offender(self, name: str, field: _Field, values: list[Any], rows: list[Any]
                        ) -> tuple[int, RecordTypeError] | None:
        """Walk the values in order: the first one that breaks the rule, as an error; settles the
        field when none does (an int beyond 2**53 merely noted)."""
        current, big_int = field.type, field.big_int
        for index, value in enumerate(values):
            if value is None:
                continue
            record = rows[index]
            try:
                if nested_deeper_than(value, MAX_NESTING):
                    raise _Unrepresentable(f"is nested more than {MAX_NESTING} levels deep (lists and dicts within "
                                           "one another)")
                value_type = _value_type(value)
            except _Unrepresentable as exc:
                return index, RecordTypeError(
                    f"{self.stream}: field {name!r} of record {describe_record(record)} holds "
                    f"{_describe_value(value)}, which {exc.reason}", field=name, record=record)
            unified = _unify(current, value_type)
            if unified is None:
                return index, RecordTypeError(
                    f"{self.stream}: field {name!r} is {value_type} in record {describe_record(record)}, but "
                    f"{current} in earlier records; {RULE}", field=name, record=record)
            if type(value) is int and not -FLOAT_EXACT <= value <= FLOAT_EXACT and big_int is None:
                big_int = describe_record(record)
                if pa.types.is_floating(unified):
                    return index, RecordTypeError(
                        f"{self.stream}: field {name!r} of record {describe_record(record)} holds the int {value}, "
                        f"beyond 2**53, but floats in earlier records; a float cannot hold it exactly ({RULE})",
                        field=name, record=record)
            elif big_int is not None and pa.types.is_floating(unified) and not pa.types.is_floating(current):
                return index, RecordTypeError(
                    f"{self.stream}: field {name!r} is {value_type} in record {describe_record(record)}, but an "
                    f"earlier record holds an int beyond 2**53 there, which a float cannot hold exactly "
                    f"({big_int}); {RULE}", field=name, record=record)
            current = unified
        field.big_int = big_int
        field.settle(current)
        return None

    # ------------------------------------------------------------------ batches

    def check_batch(self, batch: pa.RecordBatch) -> None:
        schema = batch.schema
        if schema is self._schema or (self._schema is not None and schema.equals(self._schema)):
            return
        for index, arrow_field in enumerate(schema):
            name = arrow_field.name
            column_type = _normalize(arrow_field.type)
            field = self._fields.get(name)
            if field is None:
                field = self._fields[name] = _Field()
            new = _unify(field.type, column_type)
            if new is not None and field.big_int is not None and pa.types.is_floating(new):
                new = None
            if new is None:
                record = _first_valid_row(batch, index)
                raise RecordTypeError(
                    f"{self.stream}: field {name!r} is {column_type} in record {describe_record(record)}, but "
                    f"{field.type} in earlier records; {RULE}", field=name, record=record)
            field.settle(new)
        self._schema = schema


def _describe_value(value: Any) -> str:
    """`describe_value`, for a value too deep for `repr` too."""
    try:
        return describe_value(value)
    except RecursionError:
        return f"{shallow_repr(value)[:200]} ({type(value).__name__})"


def _first_valid_row(batch: pa.RecordBatch, column: int) -> Any:
    valid = batch.column(column).is_valid()
    for index, ok in enumerate(valid.to_pylist()):
        if ok:
            return batch.slice(index, 1).to_pylist()[0]
    return batch.slice(0, 1).to_pylist()[0] if batch.num_rows else None


# ---------------------------------------------------------------------------------- types


def _accepted(arrow_type: pa.DataType) -> frozenset[type] | None:
    """The Python types whose values are surely of `arrow_type` (None: not plain scalars)."""
    if pa.types.is_null(arrow_type):
        return frozenset({NONE})
    if pa.types.is_boolean(arrow_type):
        return frozenset({bool, NONE})
    if pa.types.is_integer(arrow_type):
        return frozenset({int, NONE})
    if pa.types.is_floating(arrow_type):
        return frozenset({float, int, NONE})
    if pa.types.is_string(arrow_type):
        return frozenset({str, NONE})
    if pa.types.is_binary(arrow_type):
        return frozenset({bytes, NONE})
    return None


def _normalize(arrow_type: pa.DataType) -> pa.DataType:
    """The type the record path would give the same values: dictionaries decoded, ints as int64,
    floats as double, large and view variants of strings, binaries and lists as the plain ones."""
    if pa.types.is_dictionary(arrow_type):
        return _normalize(arrow_type.value_type)
    if pa.types.is_integer(arrow_type):
        return pa.int64()
    if pa.types.is_floating(arrow_type):
        return pa.float64()
    if pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type) or pa.types.is_binary_view(arrow_type):
        return pa.binary()
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or \
            pa.types.is_fixed_size_list(arrow_type) or pa.types.is_list_view(arrow_type):
        return pa.list_(_normalize(arrow_type.value_type))
    if pa.types.is_struct(arrow_type):
        return pa.struct([pa.field(f.name, _normalize(f.type)) for f in arrow_type])
    return arrow_type


def _unify(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type holding values of both, changing none but ints to floats; None if there is none."""
    if a.equals(b):
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    a_number = pa.types.is_integer(a) or pa.types.is_floating(a)
    b_number = pa.types.is_integer(b) or pa.types.is_floating(b)
    if a_number or b_number:
        if not (a_number and b_number):
            return None
        return pa.int64() if pa.types.is_integer(a) and pa.types.is_integer(b) else pa.float64()
    if pa.types.is_list(a) or pa.types.is_list(b):
        if not (pa.types.is_list(a) and pa.types.is_list(b)):
            return None
        item = _unify(a.value_type, b.value_type)
        return None if item is None else pa.list_(item)
    if pa.types.is_struct(a) or pa.types.is_struct(b):
        if not (pa.types.is_struct(a) and pa.types.is_struct(b)):
            return None
        merged = {f.name: f.type for f in a}
        for f in b:
            if f.name in merged:
                unified = _unify(merged[f.name], f.type)
                if unified is None:
                    return None
                merged[f.name] = unified
            else:
                merged[f.name] = f.type
        return pa.struct(list(merged.items()))
    textual = (pa.types.is_string, pa.types.is_binary)
    if any(is_(a) or is_(b) for is_ in textual):
        return None
    try:  # decimals of other precision, timestamps of other units: as Arrow promotes them
        return pa.unify_schemas([pa.schema([("f", a)]), pa.schema([("f", b)])],
                                promote_options="permissive").field(0).type
    except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _unify_all(types: Any) -> pa.DataType | None:
    current: pa.DataType | None = pa.null()
    for arrow_type in types:
        current = _unify(current, arrow_type)  # type: ignore[arg-type]
        if current is None:
            return None
    return current


def _column_type(values: list[Any]) -> pa.DataType | None:
    """The type of values that are not all plain scalars (lists, dicts, dates, decimals...), or None
    when they break the rule. Arrow infers it; where Arrow could have coerced silently (a bool
    among floats, a str among bytes, at any depth) every value is inferred on its own instead."""
    try:
        inferred = _normalize(pa.array(values).type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if not _may_coerce(inferred):
        return inferred
    try:
        return _unify_all(_value_type(v) for v in values if v is not None)
    except _Unrepresentable:
        return None


def _may_coerce(arrow_type: pa.DataType) -> bool:
    if pa.types.is_floating(arrow_type) or pa.types.is_binary(arrow_type):
        return True
    if pa.types.is_list(arrow_type):
        return _may_coerce(arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return any(_may_coerce(f.type) for f in arrow_type)
    return False


def _value_type(value: Any) -> pa.DataType:
    """The Arrow type of one value, as the rule sees it.

    Raises:
        _Unrepresentable: Arrow cannot hold the value (or its items break the rule among themselves).
    """
    kind = type(value)
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        if kind is int and not INT64_MIN <= value <= INT64_MAX:
            raise _Unrepresentable("does not fit in int64, the widest int Arrow holds")
        return scalar
    if kind is list or kind is tuple:
        item: pa.DataType | None = pa.null()
        for x in value:
            if x is not None:
                x_type = _value_type(x)
                unified = _unify(item, x_type)  # type: ignore[arg-type]
                if unified is None:
                    raise _Unrepresentable(f"mixes {item} and {x_type} in its items ({RULE})")
                item = unified
        return pa.list_(item)
    if kind is dict:
        fields = []
        for key, x in value.items():
            if not isinstance(key, str):
                raise _Unrepresentable(f"has a key that is not a string: {key!r}")
            fields.append(pa.field(key, pa.null() if x is None else _value_type(x)))
        return pa.struct(fields)
    try:
        return _normalize(pa.scalar(value).type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise _Unrepresentable(f"Arrow cannot hold ({type(exc).__name__}: {exc})") from None
