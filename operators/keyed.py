"""Keyed operators: user `KeyedProcessFunction`s, running `reduce`, and `count`.

Theory of operation
-------------------
A keyed operator always sits behind a key-group hash edge, so every record it sees belongs to a
key group its subtask owns. For each record it computes the key with the *same* selector the
partitioner used, points the task's `KeyedStateBackend` at that key (`set_current_key`), and runs
the user function; every state access in the function is then scoped to that key (DESIGN §5).
The backend, not the operator, holds the state, so the task snapshots and restores it; the
operators here hold no other state.

Errors — a missing key column, a failing function, a result that is not a dict, a value the state
cannot store — become `OperatorError`s naming the operator and the record.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

from operators.base import DeclaredState, OperatorContext, OperatorError, Record, StreamOperator
from operators.columns import encode_keys, first_record_with_key
from operators.state_names import declared_state_names, keyed_state_use

if TYPE_CHECKING:
    from state.keyed import KeyedStateBackend, ListState, MapState, ValueState

KeySelector = Callable[[Record], Any]


class MissingKeyColumnError(KeyError):
    """A record lacks the column a stream is keyed by."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "missing key column"


class ColumnKeySelector:
    """`key_by("col")`: the key of a record is `record["col"]`. Picklable; equality by column."""

    __slots__ = ("column",)

    def __init__(self, column: str) -> None:
        self.column = column

    def __call__(self, record: Record) -> Any:
        try:
            return record[self.column]
        except KeyError:
            raise MissingKeyColumnError(
                f"record has no column {self.column!r} to key by (key_by({self.column!r}))"
            ) from None
        except TypeError:
            raise TypeError(f"cannot read column {self.column!r} of a {type(record).__name__}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ColumnKeySelector) and other.column == self.column

    def __hash__(self) -> int:
        return hash(("ColumnKeySelector", self.column))

    def __getstate__(self) -> str:
        return self.column

    def __setstate__(self, column: str) -> None:
        self.column = column

    def __repr__(self) -> str:
        return f"ColumnKeySelector({self.column!r})"


class KeyedContext:
    """What a `KeyedProcessFunction` sees: the current key, keyed state, time.

    One context per operator instance, reused for every record (the operator sets `key` and
    `timestamp` before each call), so a record costs no context object. The accessors are the
    backend's and the clock's own bound methods, not wrappers: a state lookup is one call.

    Attributes:
        key: the key of the record being processed (None inside `open`).
        timestamp: the record's timestamp field (`created_at` by default) or None.
        operator_name, subtask, parallelism: where the function runs.
        value_state(name, default=None): the current key's `ValueState` `name` (`value()`,
            `update(v)`, `clear()`).
        list_state(name): the current key's `ListState` `name` (`get()`, `add(v)`,
            `update(values)`, `clear()`).
        map_state(name): the current key's `MapState` `name` (`get(k, default)`, `put(k, v)`,
            `remove(k)`, `items()`...).
        now(): the task clock (virtual seconds on the simulator).
    """

    __slots__ = ("key", "timestamp", "operator_name", "subtask", "parallelism",
                 "value_state", "list_state", "map_state", "now")

    def __init__(self, backend: KeyedStateBackend, ctx: OperatorContext, operator_name: str) -> None:
        self.key: Any = None
        self.timestamp: Any = None
        self.operator_name = operator_name
        self.subtask = ctx.subtask
        self.parallelism = ctx.parallelism
        self.value_state: Callable[..., ValueState] = backend.value_state
        self.list_state: Callable[[str], ListState] = backend.list_state
        self.map_state: Callable[[str], MapState] = backend.map_state
        self.now: Callable[[], float] = ctx.clock.now


class KeyedProcessFunction:
    """Base class for user keyed functions (Flink's `KeyedProcessFunction`).

    Override `process_element(record, ctx)` to return (or yield) output records; optionally
    `open(ctx)` (called once per task attempt, before any record, `ctx.key` is None) and
    `close()`. Every parallel instance and every restart gets its own copy of the object, so
    instance attributes are private to one task attempt; anything that must survive a failure
    belongs in keyed state.

    Attributes:
        state_names: the keyed state names the function uses, for the check a restore makes
            (`env.restore_from`); None (default) reads them from the string literals the class
            passes to `ctx.value_state` / `list_state` / `map_state`. Declare them when a name is
            computed or the state is used by code outside the class (see `operators.state_names`).
    """

    state_names: ClassVar[Collection[str] | None] = None

    def open(self, ctx: KeyedContext) -> None:  # noqa: B027 - optional hook
        """Called once before the first record."""

    def process_element(self, record: Record, ctx: KeyedContext) -> Iterable[Record] | None:
        """Process one record of key `ctx.key`; return an iterable of output records (or None)."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element(record, ctx)")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called when the task ends."""


def key_getter(key_selector: KeySelector) -> KeySelector:
    """`key_selector` as the cheapest call giving the same key: `itemgetter(column)` (no Python
    frame) for `key_by("col")`, else the selector itself. Where the getter raises, call the
    selector for its own error (a missing column is named)."""
    if type(key_selector) is ColumnKeySelector:
        return itemgetter(key_selector.column)
    return key_selector


def _keyed_backend(ctx: OperatorContext, operator: str) -> KeyedStateBackend:
    if ctx.keyed_backend is None:
        raise RuntimeError(f"operator {operator!r} is keyed but its task gave it no keyed state backend")
    return ctx.keyed_backend


class KeyedProcessOperator(StreamOperator):
    """Runs a `KeyedProcessFunction` with the current key set for every record.

    Args:
        fn: the function instance (the task's own copy).
        key_selector: record -> key; must match the partitioner's selector.
        name: operator name used in errors.
        timestamp_field: the record field exposed as `ctx.timestamp`.
    """

    def __init__(
        self,
        fn: KeyedProcessFunction,
        key_selector: KeySelector,
        name: str = "keyed-process",
        timestamp_field: str | None = "created_at",
    ) -> None:
        if not isinstance(fn, KeyedProcessFunction):
            raise TypeError(f"operator {name!r}: {fn!r} is not a KeyedProcessFunction instance")
        declared_state_names(fn)  # a malformed declaration fails here, when the job is built
        self.fn = fn
        self.key_selector = key_selector
        self.name = name
        self.timestamp_field = timestamp_field
        self._key_of = key_getter(key_selector)

    def declared_state(self) -> DeclaredState:
        return keyed_state_use(self.fn, KeyedProcessFunction)

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._backend = _keyed_backend(ctx, self.name)
        self._kctx = KeyedContext(self._backend, ctx, self.name)
        try:
            self.fn.open(self._kctx)
        except Exception as exc:
            raise OperatorError(self.name, None, exc) from exc

    def process_batch(self, records: list[Record]) -> list[Record]:
        selector, key_of, set_key = self.key_selector, self._key_of, self._backend.set_current_key
        process, kctx, ts_field = self.fn.process_element, self._kctx, self.timestamp_field
        out: list[Record] = []
        append = out.append
        record: Any = None
        try:
            for record in records:
                try:
                    key = key_of(record)
                except Exception:
                    if key_of is selector:
                        raise
                    key = selector(record)  # the selector's own error, naming the column
                set_key(key)
                kctx.key = key
                kctx.timestamp = record.get(ts_field) if ts_field is not None else None
                results = process(record, kctx)
                if results is None:
                    continue
                if isinstance(results, dict):
                    raise TypeError(
                        "process_element must return an iterable of records (e.g. `yield record` or "
                        "`return [record]`), not a single dict"
                    )
                for result in results:
                    if type(result) is not dict and not isinstance(result, dict):
                        raise TypeError(f"process_element produced {type(result).__name__} {result!r}, expected a dict")
                    append(result)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out

    def close(self) -> None:
        try:
            self.fn.close()
        except Exception as exc:
            raise OperatorError(self.name, None, exc) from exc


class ReduceOperator(StreamOperator):
    """Running reduce per key: `acc = fn(acc, record)`; emits the new `acc` for every record.

    The first record of a key is its initial accumulator. `fn` receives a copy of the
    accumulator, so mutating it in place cannot change a snapshot already taken.
    """

    STATE = "reduce"

    def __init__(self, fn: Callable[[Record, Record], Record], key_selector: KeySelector, name: str = "reduce") -> None:
        self.fn = fn
        self.key_selector = key_selector
        self.name = name

    def declared_state(self) -> DeclaredState:
        return DeclaredState(keyed=frozenset({self.STATE}))

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._backend = _keyed_backend(ctx, self.name)

    def process_batch(self, records: list[Record]) -> list[Record]:
        fn, selector, backend = self.fn, self.key_selector, self._backend
        out: list[Record] = []
        record: Any = None
        try:
            for record in records:
                backend.set_current_key(selector(record))
                state = backend.value_state(self.STATE, None)
                acc = state.value()
                new = dict(record) if acc is None else fn(dict(acc), record)
                if type(new) is not dict and not isinstance(new, dict):
                    raise TypeError(f"reduce function returned {type(new).__name__} {new!r}, expected a dict")
                state.update(new)
                out.append(new)
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out


class CountOperator(StreamOperator):
    """Running count per key; emits `{key_field: key, "count": n}` for every record.

    `key_field` is the key column for `key_by("col")` and `"key"` for a key function. Keyed by a
    column, it also counts Arrow batches vectorised (`process_columns`): each distinct key of the
    batch touches the state once, and the per-record counts come from a stable sort — the same
    output and the same state as record by record.
    """

    STATE = "count"
    accepts_columns = True

    def __init__(self, key_selector: KeySelector, key_field: str = "key", name: str = "count") -> None:
        self.key_selector = key_selector
        self.key_field = key_field
        self.name = name

    def declared_state(self) -> DeclaredState:
        return DeclaredState(keyed=frozenset({self.STATE}))

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._backend = _keyed_backend(ctx, self.name)

    def process_batch(self, records: list[Record]) -> list[Record]:
        selector, backend, field = self.key_selector, self._backend, self.key_field
        out: list[Record] = []
        record: Any = None
        try:
            for record in records:
                key = selector(record)
                backend.set_current_key(key)
                state = backend.value_state(self.STATE, 0)
                n = state.value() + 1
                state.update(n)
                out.append({field: key, "count": n})
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out

    def process_columns(self, batch: pa.RecordBatch) -> pa.RecordBatch | list[Record]:
        column = getattr(self.key_selector, "column", None)
        if column is None or column not in batch.schema.names:
            return self.process_batch(batch.to_pylist())  # a key function, or the records path's error
        values = batch.column(column)
        encoded = encode_keys(values)
        if encoded is None:
            return self.process_batch(batch.to_pylist())
        keys, indices = encoded
        # occurrence number of each row within its key, via a stable sort by key index
        order = np.argsort(indices, kind="stable")
        sorted_keys = indices[order]
        occurrences = np.bincount(indices, minlength=len(keys))
        starts = np.concatenate(([0], np.cumsum(occurrences)[:-1]))
        rank = np.arange(len(indices)) - starts[sorted_keys]
        base = np.empty(len(keys), dtype=np.int64)
        backend = self._backend
        key: Any = None
        try:
            for i, key in enumerate(keys):
                backend.set_current_key(key)
                state = backend.value_state(self.STATE, 0)
                before = state.value()
                base[i] = before
                state.update(before + int(occurrences[i]))
        except Exception as exc:
            record = first_record_with_key(batch, column, key)
            raise OperatorError(self.name, record, exc) from exc
        counts = np.empty(len(indices), dtype=np.int64)
        counts[order] = base[sorted_keys] + rank + 1
        return pa.RecordBatch.from_arrays([values, pa.array(counts)], names=[self.key_field, "count"])
