"""Keyed operators: user `KeyedProcessFunction`s, running `reduce`, and `count`.

Theory of operation
-------------------
A keyed operator always sits behind a key-group hash edge, so every record it sees belongs to a
key group its subtask owns. For each record it computes the key with the *same* selector the
partitioner used, points the task's `KeyedStateBackend` at that key (`set_current_key`), and runs
the user function; every state access in the function is then scoped to that key.
The backend, not the operator, holds the state, so the task snapshots and restores it; the
operators here hold no other state.

Errors — a missing key column, a failing function, a result that is not a dict, a value the state
cannot store — become `OperatorError`s naming the operator and the record.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

from operators.base import DeclaredState, OperatorContext, OperatorError, Record, StreamOperator
from operators.columns import encode_keys, first_record_with_key
from operators.side_outputs import OutputTag, check_side_output
from operators.state_names import declared_state_names, keyed_state_use
from operators.timer_service import InternalTimerService, TimeDomain, TimerService, timer_state_names
from operators.timestamps import (
    MAX_WATERMARK,
    TIMESTAMP_FIELD,
    has_timestamps,
    split_batch,
    stamp,
    value_of,
    with_timestamp_column,
)

if TYPE_CHECKING:
    from state.keyed import KeyedStateBackend
    from state.keyed_states import ListState, MapState, ValueState

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
    """What a `KeyedProcessFunction` sees: the current key, keyed state, time, timers, side outputs.

    One context per operator instance, reused for every record and timer (the operator sets the
    key, timestamp and time domain before each call), so a call costs no context object. The state
    accessors are the backend's own bound methods: a state lookup is one call.

    Attributes:
        key: the key of the record or timer being processed (None inside `open`).
        operator_name, subtask, parallelism: where the function runs.
        value_state(name, default=None): the current key's `ValueState` `name` (`value()`,
            `update(v)`, `clear()`).
        list_state(name): the current key's `ListState` `name` (`get()`, `add(v)`,
            `update(values)`, `clear()`).
        map_state(name): the current key's `MapState` `name` (`get(k, default)`, `put(k, v)`,
            `remove(k)`, `items()`...).
        now(): the task clock (virtual seconds on the simulator).
    """

    __slots__ = ("_domain", "_emit_side", "_operator", "_timer_service", "_timestamp", "key", "list_state",
                 "map_state", "now", "operator_name", "parallelism", "subtask", "value_state")

    def __init__(self, backend: KeyedStateBackend, ctx: OperatorContext, operator_name: str,
                 timer_service: TimerService | None = None) -> None:
        self.key: Any = None
        self._timestamp: Any = None
        self._domain: TimeDomain | None = None
        self._timer_service = timer_service
        self._operator = operator_name
        side = ctx.side_outputs
        self._emit_side = side.emit if side is not None else None
        self.operator_name = operator_name
        self.subtask = ctx.subtask
        self.parallelism = ctx.parallelism
        self.value_state: Callable[..., ValueState] = backend.value_state
        self.list_state: Callable[[str], ListState] = backend.list_state
        self.map_state: Callable[[str], MapState] = backend.map_state
        self.now: Callable[[], float] = ctx.clock.now

    def get_current_key(self) -> Any:
        """The current key (PyFlink's name for `ctx.key`)."""
        return self.key

    def timestamp(self) -> Any:
        """The event timestamp of the record being processed (None: it has none), or in
        `on_timer` the timer's time."""
        return self._timestamp

    def time_domain(self) -> TimeDomain | None:
        """In `on_timer`: the domain of the timer that fired (None in `process_element`)."""
        return self._domain

    def timer_service(self) -> TimerService:
        """Timers of the current key: `register_event_time_timer(t)`, `register_processing_time_timer(t)`,
        `delete_*`, `current_watermark()`, `current_processing_time()`."""
        if self._timer_service is None:
            raise RuntimeError(f"operator {self.operator_name!r} has no timer service")
        return self._timer_service

    def output(self, tag: OutputTag, record: Record) -> None:
        """Send `record` to the side output `tag` (`stream.get_side_output(tag)`), with the
        timestamp of the record or timer being processed.

        Raises:
            TypeError: `tag` is not an `OutputTag` or `record` not a dict.
        """
        check_side_output(tag, record)
        if self._emit_side is not None:  # a processing-time timer's output has no timestamp
            timestamp = None if self._domain is TimeDomain.PROCESSING_TIME else self._timestamp
            self._emit_side(self._operator, tag, record if timestamp is None else stamp(record, timestamp))


class KeyedProcessFunction:
    """Base class for user keyed functions (Flink's `KeyedProcessFunction`).

    Override `process_element(record, ctx)` to return (or yield) output records; optionally
    `on_timer(timestamp, ctx)` for the timers it registers (`ctx.timer_service()`), `open(ctx)`
    (called once per task attempt, before any record, `ctx.key` is None) and `close()`. Every
    parallel instance and every restart gets its own copy of the object, so instance attributes
    are private to one task attempt; anything that must survive a failure belongs in keyed state
    (timers are keyed state too: a restore brings back the ones still pending).

    Output records carry the timestamp of the record they answer (`ctx.timestamp()`), and those
    of `on_timer` the time of an event-time timer (none for a processing-time one), as in Flink.
    An event-time timer fires once the watermark reached its time; one registered after event
    time ended (the watermark is `+inf`: a late record) fires at once, not never.

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

    def on_timer(self, timestamp: Any, ctx: KeyedContext) -> Iterable[Record] | None:
        """A timer of key `ctx.key` registered for `timestamp` fired (`ctx.time_domain()` says
        which clock); return an iterable of output records (or None)."""
        return None

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
    """Runs a `KeyedProcessFunction` with the current key set for every record and timer.

    Args:
        fn: the function instance (the task's own copy).
        key_selector: record -> key; must match the partitioner's selector.
        name: operator name used in errors.
    """

    #: the name of its timer service (its timers' keyed state: `operators.timer_service`)
    TIMER_SERVICE = "user-timers"

    def __init__(self, fn: KeyedProcessFunction, key_selector: KeySelector, name: str = "keyed-process") -> None:
        if not isinstance(fn, KeyedProcessFunction):
            raise TypeError(f"operator {name!r}: {fn!r} is not a KeyedProcessFunction instance")
        declared_state_names(fn)  # a malformed declaration fails here, when the job is built
        self.fn = fn
        self.key_selector = key_selector
        self.name = name
        self._key_of = key_getter(key_selector)

    #: the function's base class (its methods are the defaults, not the user's)
    FUNCTION_BASE: ClassVar[type] = KeyedProcessFunction

    def needs_watermarks(self) -> bool:
        """Whether the function overrides `on_timer` (its timers need the watermark)."""
        return type(self.fn).on_timer is not self.FUNCTION_BASE.on_timer

    def declared_state(self) -> DeclaredState:
        """The function's keyed state, and its timers' when it has `on_timer`."""
        declared = keyed_state_use(self.fn, self.FUNCTION_BASE)
        if not self.needs_watermarks():
            return declared
        return replace(declared, keyed=declared.keyed | timer_state_names(self.TIMER_SERVICE))

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._backend = _keyed_backend(ctx, self.name)
        self.timer_service = InternalTimerService(self.TIMER_SERVICE, self._backend, ctx, self)
        self._kctx = KeyedContext(self._backend, ctx, self.name, TimerService(self.timer_service))
        try:
            self.fn.open(self._kctx)
        except Exception as exc:
            raise OperatorError(self.name, None, exc) from exc

    def process_batch(self, records: list[Record]) -> list[Record]:
        return self._process_keyed(records, self.fn.process_element, self.key_selector, self._key_of)

    def _process_keyed(self, records: list[Record], process: Callable[[Record, KeyedContext], Any],
                       selector: KeySelector, key_of: KeySelector) -> list[Record]:
        """Run `process(value, ctx)` for every record, its key (by `selector`) current."""
        set_key, kctx = self._backend.set_current_key, self._kctx
        stamped = has_timestamps(records)
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
                if stamped:
                    timestamp = kctx._timestamp = record.get(TIMESTAMP_FIELD)
                    value = value_of(record)
                    results = process(value, kctx)
                    if results is not None:
                        for result in _checked_results(results, process.__name__):
                            append(stamp(result, timestamp, value))
                    continue
                results = process(record, kctx)
                if results is not None:
                    out.extend(_checked_results(results, process.__name__))
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        finally:
            kctx._timestamp = None
        if self.timer_service.current_watermark == MAX_WATERMARK:
            # event time has ended (no watermark follows): a timer registered now fires at once
            out += self._fire(self.timer_service.advance_watermark(MAX_WATERMARK), TimeDomain.EVENT_TIME)
        return out

    def process_watermark(self, watermark: Any) -> list[Any]:
        fired = self._fire(self.timer_service.advance_watermark(watermark.timestamp), TimeDomain.EVENT_TIME)
        return [fired, watermark] if fired else [watermark]

    def on_processing_time(self, now: float) -> list[Any]:
        fired = self._fire(self.timer_service.on_processing_time(now), TimeDomain.PROCESSING_TIME)
        return [fired] if fired else []

    def _fire(self, timers: Iterator[tuple[Any, Any, Any]], domain: TimeDomain) -> list[Record]:
        """Call `on_timer` for every timer `timers` hands out; output records carry the time of
        an event-time timer (a processing-time timer's carry none, as in Flink)."""
        on_timer, kctx = self.fn.on_timer, self._kctx
        event_time = domain is TimeDomain.EVENT_TIME
        out: list[Record] = []
        timestamp: Any = None
        kctx._domain = domain
        try:
            for timestamp, key, _ in timers:
                kctx.key = key
                kctx._timestamp = timestamp
                results = on_timer(timestamp, kctx)
                if results is not None:
                    for result in _checked_results(results, "on_timer"):
                        out.append(stamp(result, timestamp) if event_time else result)
        except Exception as exc:
            raise OperatorError(self.name, f"<{domain.value} timer {timestamp!r} of key {kctx.key!r}>", exc) from exc
        finally:
            kctx._domain = None
            kctx._timestamp = None
        return out

    def close(self) -> None:
        try:
            self.fn.close()
        except Exception as exc:
            raise OperatorError(self.name, None, exc) from exc


def _checked_results(results: Any, method: str) -> Iterator[Record]:
    """The records a user method returned, each checked to be a dict."""
    if isinstance(results, dict):
        raise TypeError(f"{method} must return an iterable of records (e.g. `yield record` or "
                        "`return [record]`), not a single dict")
    for result in results:
        if type(result) is not dict and not isinstance(result, dict):
            raise TypeError(f"{method} produced {type(result).__name__} {result!r}, expected a dict")
        yield result


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
        stamped = has_timestamps(records)
        out: list[Record] = []
        record: Any = None
        try:
            for record in records:
                backend.set_current_key(selector(record))
                state = backend.value_state(self.STATE, None)
                acc = state.value()
                value = value_of(record) if stamped else record
                new = dict(value) if acc is None else fn(dict(acc), value)
                if type(new) is not dict and not isinstance(new, dict):
                    raise TypeError(f"reduce function returned {type(new).__name__} {new!r}, expected a dict")
                state.update(new)
                out.append(stamp(new, record.get(TIMESTAMP_FIELD)) if stamped else new)
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out


class CountOperator(StreamOperator):
    """Running count per key; emits `{key_field: key, "count": n}` for every record (carrying the
    record's timestamp on an event-time stream).

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
        stamped = has_timestamps(records)
        out: list[Record] = []
        record: Any = None
        try:
            for record in records:
                key = selector(record)
                backend.set_current_key(key)
                state = backend.value_state(self.STATE, 0)
                n = state.value() + 1
                state.update(n)
                out.append({field: key, "count": n, TIMESTAMP_FIELD: record.get(TIMESTAMP_FIELD)} if stamped
                           else {field: key, "count": n})
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
        out = pa.RecordBatch.from_arrays([values, pa.array(counts)], names=[self.key_field, "count"])
        return with_timestamp_column(out, split_batch(batch)[1])
