"""Co-functions of connected streams: `KeyedCoProcessFunction`, `CoProcessFunction`,
`CoMapFunction`, `CoFlatMapFunction` (PyFlink's names) and the operators that run them.

Theory of operation
-------------------
`a.connect(b)` makes one operator of two inputs (`operators.two_input`): records of `a` reach
`process_element1` (`map1`, `flat_map1`), those of `b` `process_element2`. Keyed
(`connect(b).key_by(key_a, key_b)`), both inputs are hash partitioned into the same key groups by
their own key selectors, so records of either input with equal keys meet in one subtask, and the
function's keyed state and timers are *shared* by both inputs: `KeyedCoProcessOperator` is a
`KeyedProcessOperator` (same context, state, timer service, timer firing, error reporting) whose
records come from two inputs. Its timers fire when the operator's watermark — the minimum of both
inputs' — passes them.

Outputs carry the timestamp of the record they answer (an event-time timer's output its time), as
for a `KeyedProcessFunction`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, ClassVar

from operators.base import OperatorContext, OperatorError, Record
from operators.keyed import KeyedContext, KeyedProcessOperator, KeySelector, _checked_results, key_getter
from operators.side_outputs import OutputTag, check_side_output
from operators.state_names import declared_state_names
from operators.timestamps import MIN_WATERMARK, TIMESTAMP_FIELD, has_timestamps, stamp, value_of
from operators.two_input import TwoInputStreamOperator

__all__ = [
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "CoProcessOperator",
    "KeyedCoProcessFunction",
    "KeyedCoProcessOperator",
]


class KeyedCoProcessFunction:
    """Base class for functions of a keyed connected stream (Flink's `KeyedCoProcessFunction`).

    Override `process_element1(record, ctx)` (first input) and `process_element2(record, ctx)`
    (second input), each returning (or yielding) output records; optionally `on_timer(timestamp,
    ctx)`, `open(ctx)` and `close()`. `ctx` is a `KeyedContext`, as for a `KeyedProcessFunction`:
    `ctx.key`, keyed state shared by both inputs (`ctx.value_state`, `list_state`, `map_state`),
    `ctx.timer_service()`, `ctx.timestamp()`, `ctx.output(tag, record)`.

    Attributes:
        state_names: the keyed state names, when they cannot be read from the class's code
            (see `KeyedProcessFunction.state_names`).
    """

    state_names: ClassVar[Collection[str] | None] = None

    def open(self, ctx: KeyedContext) -> None:  # noqa: B027 - optional hook
        """Called once before the first record."""

    def process_element1(self, record: Record, ctx: KeyedContext) -> Iterable[Record] | None:
        """One record of the first input, its key current."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element1(record, ctx)")

    def process_element2(self, record: Record, ctx: KeyedContext) -> Iterable[Record] | None:
        """One record of the second input, its key current."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element2(record, ctx)")

    def on_timer(self, timestamp: Any, ctx: KeyedContext) -> Iterable[Record] | None:
        """A timer of key `ctx.key` fired (`ctx.time_domain()` says which clock)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called when the task ends."""


class CoProcessFunction:
    """Base class for functions of a (non-keyed) connected stream (Flink's `CoProcessFunction`):
    `process_element1(record, ctx)`, `process_element2(record, ctx)`; `ctx.timestamp()`,
    `ctx.current_watermark()`, `ctx.output(tag, record)`. Non-keyed: no keyed state, no timers."""

    def open(self, ctx: CoContext) -> None:  # noqa: B027 - optional hook
        """Called once before the first record."""

    def process_element1(self, record: Record, ctx: CoContext) -> Iterable[Record] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement process_element1(record, ctx)")

    def process_element2(self, record: Record, ctx: CoContext) -> Iterable[Record] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement process_element2(record, ctx)")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called when the task ends."""


class CoMapFunction:
    """One output record per input record: `map1(record)` for the first input, `map2(record)` for
    the second (Flink's `CoMapFunction`)."""

    def map1(self, record: Record) -> Record:
        raise NotImplementedError(f"{type(self).__name__} must implement map1(record)")

    def map2(self, record: Record) -> Record:
        raise NotImplementedError(f"{type(self).__name__} must implement map2(record)")


class CoFlatMapFunction:
    """Zero or more output records per input record: `flat_map1(record)` / `flat_map2(record)`
    return (or yield) records (Flink's `CoFlatMapFunction`)."""

    def flat_map1(self, record: Record) -> Iterable[Record] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement flat_map1(record)")

    def flat_map2(self, record: Record) -> Iterable[Record] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement flat_map2(record)")


class _CoMapAsProcess(CoProcessFunction):
    def __init__(self, fn: CoMapFunction) -> None:
        self.fn = fn

    def process_element1(self, record: Record, ctx: CoContext) -> Iterable[Record]:
        return (_checked_map(self.fn.map1(record), "map1"),)

    def process_element2(self, record: Record, ctx: CoContext) -> Iterable[Record]:
        return (_checked_map(self.fn.map2(record), "map2"),)


def _checked_map(result: Any, method: str) -> Record:
    if not isinstance(result, dict):
        raise TypeError(f"{method} returned {type(result).__name__} {result!r}, expected a dict")
    return result


class _CoFlatMapAsProcess(CoProcessFunction):
    def __init__(self, fn: CoFlatMapFunction) -> None:
        self.fn = fn

    def process_element1(self, record: Record, ctx: CoContext) -> Iterable[Record] | None:
        return self.fn.flat_map1(record)

    def process_element2(self, record: Record, ctx: CoContext) -> Iterable[Record] | None:
        return self.fn.flat_map2(record)


def as_co_process(fn: Any) -> CoProcessFunction:
    """`fn` (a `CoProcessFunction`, `CoMapFunction` or `CoFlatMapFunction`) as a `CoProcessFunction`."""
    if isinstance(fn, CoMapFunction):
        return _CoMapAsProcess(fn)
    if isinstance(fn, CoFlatMapFunction):
        return _CoFlatMapAsProcess(fn)
    return fn


class CoContext:
    """What a `CoProcessFunction` sees: the record's timestamp, the watermark, side outputs."""

    __slots__ = ("_emit_side", "_operator", "_timestamp", "now", "operator_name", "parallelism", "subtask",
                 "watermark")

    def __init__(self, ctx: OperatorContext, operator_name: str) -> None:
        self._timestamp: Any = None
        self._operator = operator_name
        side = ctx.side_outputs
        self._emit_side = side.emit if side is not None else None
        self.operator_name = operator_name
        self.subtask = ctx.subtask
        self.parallelism = ctx.parallelism
        self.now: Callable[[], float] = ctx.clock.now
        self.watermark: float = MIN_WATERMARK

    def timestamp(self) -> Any:
        """The event timestamp of the record being processed (None: it has none)."""
        return self._timestamp

    def current_watermark(self) -> float:
        """The operator's watermark: the minimum of both inputs' (`-inf` before the first)."""
        return self.watermark

    def timer_service(self) -> Any:
        """Timers are keyed state: a non-keyed co-process has none (as in Flink).

        Raises:
            RuntimeError: always, naming the operator and what to use instead.
        """
        raise RuntimeError(f"operator {self.operator_name!r}: timers need keyed inputs: "
                           "a.connect(b).key_by(key_a, key_b).process(KeyedCoProcessFunction)")

    def output(self, tag: OutputTag, record: Record) -> None:
        """Send `record` to side output `tag`, with the timestamp of the record being processed."""
        check_side_output(tag, record)
        if self._emit_side is not None:
            timestamp = self._timestamp
            self._emit_side(self._operator, tag, record if timestamp is None else stamp(record, timestamp))


class CoProcessOperator(TwoInputStreamOperator):
    """Runs a `CoProcessFunction` (or a co-map / co-flat-map, see `as_co_process`)."""

    def __init__(self, fn: CoProcessFunction, name: str = "co-process") -> None:
        self.fn = fn
        self.name = name

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._cctx = CoContext(ctx, self.name)
        try:
            self.fn.open(self._cctx)
        except Exception as exc:
            raise OperatorError(self.name, None, exc) from exc

    def process_batch1(self, records: list[Record]) -> list[Record]:
        return self._process(records, self.fn.process_element1)

    def process_batch2(self, records: list[Record]) -> list[Record]:
        return self._process(records, self.fn.process_element2)

    def _process(self, records: list[Record], process: Callable[[Record, CoContext], Any]) -> list[Record]:
        cctx = self._cctx
        stamped = has_timestamps(records)
        out: list[Record] = []
        record: Any = None
        method = getattr(process, "__name__", "process_element")
        try:
            for record in records:
                timestamp = cctx._timestamp = record.get(TIMESTAMP_FIELD) if stamped else None
                value = value_of(record) if stamped else record
                results = process(value, cctx)
                if results is None:
                    continue
                for result in _checked_results(results, method):
                    out.append(stamp(result, timestamp, value) if stamped else result)
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        finally:
            cctx._timestamp = None
        return out

    def process_watermark(self, watermark: Any) -> list[Any]:
        self._cctx.watermark = watermark.timestamp
        return [watermark]


class KeyedCoProcessOperator(TwoInputStreamOperator, KeyedProcessOperator):
    """Runs a `KeyedCoProcessFunction`: a `KeyedProcessOperator` whose records come from two
    inputs, each keyed by its own selector (see the module docstring).

    Args:
        fn: the function instance (the task's own copy).
        key_selector1, key_selector2: the keys of the first and second input's records; must
            match the partitioners' selectors.
        name: operator name used in errors.
    """

    FUNCTION_BASE = KeyedCoProcessFunction

    def __init__(self, fn: KeyedCoProcessFunction, key_selector1: KeySelector, key_selector2: KeySelector,
                 name: str = "keyed-co-process") -> None:
        if not isinstance(fn, KeyedCoProcessFunction):
            raise TypeError(f"operator {name!r}: {fn!r} is not a KeyedCoProcessFunction instance")
        declared_state_names(fn)
        self.fn = fn  # type: ignore[assignment]
        self.key_selector = key_selector1
        self.key_selector2 = key_selector2
        self.name = name
        self._key_of = key_getter(key_selector1)
        self._key_of2 = key_getter(key_selector2)

    def process_batch1(self, records: list[Record]) -> list[Record]:
        return self._process_keyed(records, self.fn.process_element1, self.key_selector, self._key_of)  # type: ignore[attr-defined]

    def process_batch2(self, records: list[Record]) -> list[Record]:
        return self._process_keyed(records, self.fn.process_element2, self.key_selector2, self._key_of2)  # type: ignore[attr-defined]
