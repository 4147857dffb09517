"""The interval join: `ProcessJoinFunction` and `IntervalJoinOperator` (Flink's).

Theory of operation
-------------------
`a.key_by(k).interval_join(b.key_by(k)).between(lower, upper)` joins every left record `l` with
every right record `r` of the same key whose timestamps satisfy

    l.t + lower <= r.t <= l.t + upper        (either bound exclusive on request)

and calls `fn.process_element(left, right, ctx)` once per such pair; the output carries the later
of the two timestamps. The operator is a two-input keyed operator (`operators.two_input`):

* each side's records wait in a *buffer*, keyed map state `timestamp -> [records]`
  (`interval-join/left`, `interval-join/right`), so buffers are snapshotted, restored and
  rescaled by key group like any keyed state;
* a record arriving on one side is added to its buffer, then joined with every record of the
  other side's buffer within the bounds (the pair is emitted by whichever of the two arrives
  second, exactly once);
* a record is *late* when its timestamp is below the operator's watermark (the minimum of both
  inputs'): it can no longer find all its partners, so it is dropped, as in Flink, or sent to the
  side output `side_output_left_late_data` / `side_output_right_late_data` asked for;
* cleanup: each buffered record has an event-time timer at the last time a partner can still
  arrive — `l.t + upper` for a left record, `r.t - lower` for a right one (never before the
  record's own time) — whose namespace is the record's timestamp (one timer service per side,
  `interval-join-left` / `-right`), so the firing removes exactly that buffer entry; timers are
  keyed state too, so a restore brings back exactly the cleanups still pending.

Records must carry timestamps (a source `watermark_strategy` or `assign_timestamps_and_watermarks`
upstream); one without is an error naming the operator and the record. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from operators.base import DeclaredState, OperatorContext, OperatorError, Record
from operators.keyed import KeySelector, _checked_results, _keyed_backend, key_getter
from operators.side_outputs import OutputTag, check_side_output
from operators.timer_service import InternalTimerService, timer_state_names
from operators.timestamps import MIN_WATERMARK, TIMESTAMP_FIELD, check_timestamp, stamp, value_of
from operators.two_input import TwoInputStreamOperator

__all__ = ["IntervalJoinOperator", "JoinContext", "ProcessJoinFunction", "check_bounds"]

#: the keyed map states holding each side's buffered records
LEFT_BUFFER, RIGHT_BUFFER = "interval-join/left", "interval-join/right"
#: the timer services of each side's cleanup timers
LEFT_TIMERS, RIGHT_TIMERS = "interval-join-left", "interval-join-right"


class ProcessJoinFunction:
    """Base class for interval-join functions (Flink's `ProcessJoinFunction`).

    Override `process_element(left, right, ctx)` to return (or yield) the output records of one
    joined pair; `ctx.left_timestamp()`, `ctx.right_timestamp()`, `ctx.timestamp()` (the later
    of the two: the output's timestamp), `ctx.key`, `ctx.output(tag, record)`. Optionally
    `open(ctx)` and `close()`."""

    def open(self, ctx: JoinContext) -> None:  # noqa: B027 - optional hook
        """Called once before the first pair."""

    def process_element(self, left: Record, right: Record, ctx: JoinContext) -> Iterable[Record] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement process_element(left, right, ctx)")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called when the task ends."""


class JoinContext:
    """What `ProcessJoinFunction.process_element` sees for one joined pair."""

    __slots__ = ("_emit_side", "_operator", "key", "left", "right", "subtask")

    def __init__(self, ctx: OperatorContext, operator_name: str) -> None:
        side = ctx.side_outputs
        self._emit_side = side.emit if side is not None else None
        self._operator = operator_name
        self.subtask = ctx.subtask
        self.key: Any = None
        self.left: Any = None
        self.right: Any = None

    def left_timestamp(self) -> Any:
        return self.left

    def right_timestamp(self) -> Any:
        return self.right

    def timestamp(self) -> Any:
        """The joined pair's timestamp: the later of its two records'."""
        return max(self.left, self.right)

    def output(self, tag: OutputTag, record: Record) -> None:
        """Send `record` to side output `tag`, with the pair's timestamp."""
        check_side_output(tag, record)
        if self._emit_side is not None:
            self._emit_side(self._operator, tag, stamp(record, self.timestamp()))


def check_bounds(lower: Any, upper: Any, what: str = "interval_join") -> None:
    """Raise `ValueError` naming `what` unless `lower` and `upper` are finite numbers, lower <= upper."""
    for name, bound in (("lower", lower), ("upper", upper)):
        if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound):
            raise ValueError(f"{what}.between: the {name} bound must be a finite number, got "
                             f"{type(bound).__name__} {bound!r}")
    if lower > upper:
        raise ValueError(f"{what}.between({lower!r}, {upper!r}): the lower bound exceeds the upper bound")


class IntervalJoinOperator(TwoInputStreamOperator):
    """Joins a keyed left and right input within time bounds (see the module docstring).

    Args:
        fn: the `ProcessJoinFunction` (the task's own copy).
        key_selector1, key_selector2: the left and right records' keys (the partitioners').
        lower, upper: the bounds of `right.t - left.t`.
        lower_exclusive, upper_exclusive: exclude a difference equal to the bound.
        left_late, right_late: side outputs for late records (None: dropped, as in Flink).
        name: operator name used in errors.
    """

    def __init__(self, fn: ProcessJoinFunction, key_selector1: KeySelector, key_selector2: KeySelector,
                 lower: float, upper: float, *, lower_exclusive: bool = False, upper_exclusive: bool = False,
                 left_late: OutputTag | None = None, right_late: OutputTag | None = None,
                 name: str = "interval-join") -> None:
        if not isinstance(fn, ProcessJoinFunction):
            raise TypeError(f"operator {name!r}: {fn!r} is not a ProcessJoinFunction instance")
        check_bounds(lower, upper)
        self.fn = fn
        self.key_selector1, self.key_selector2 = key_selector1, key_selector2
        self.lower, self.upper = lower, upper
        self.lower_exclusive, self.upper_exclusive = lower_exclusive, upper_exclusive
        self.left_late, self.right_late = left_late, right_late
        self.name = name

    def needs_watermarks(self) -> bool:
        return True

    def declared_state(self) -> DeclaredState:
        return DeclaredState(keyed=frozenset({LEFT_BUFFER, RIGHT_BUFFER}) | timer_state_names(LEFT_TIMERS)
                             | timer_state_names(RIGHT_TIMERS))

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._backend = _keyed_backend(ctx, self.name)
        self._timers = (InternalTimerService(LEFT_TIMERS, self._backend, ctx, self),
                        InternalTimerService(RIGHT_TIMERS, self._backend, ctx, self))
        self._jctx = JoinContext(ctx, self.name)
        self._key_of = (key_getter(self.key_selector1), key_getter(self.key_selector2))
        self._watermark = MIN_WATERMARK
        self._emit_side = ctx.side_outputs.emit if ctx.side_outputs is not None else None
        try:
            self.fn.open(self._jctx)
        except Exception as exc:
            raise OperatorError(self.name, None, exc) from exc

    def within(self, left: Any, right: Any) -> bool:
        """Whether a left record at `left` and a right one at `right` join."""
        difference = right - left
        low = difference > self.lower if self.lower_exclusive else difference >= self.lower
        return low and (difference < self.upper if self.upper_exclusive else difference <= self.upper)

    def process_batch1(self, records: list[Record]) -> list[Record]:
        return self._process(records, True)

    def process_batch2(self, records: list[Record]) -> list[Record]:
        return self._process(records, False)

    def _process(self, records: list[Record], is_left: bool) -> list[Record]:
        selector = self.key_selector1 if is_left else self.key_selector2
        key_of = self._key_of[0 if is_left else 1]
        ours = self._backend.map_state(LEFT_BUFFER if is_left else RIGHT_BUFFER)
        others = self._backend.map_state(RIGHT_BUFFER if is_left else LEFT_BUFFER)
        timers = self._timers[0 if is_left else 1]
        late_tag = self.left_late if is_left else self.right_late
        # the last time a partner can arrive: t + upper (left), t - lower (right); never before t
        reach = self.upper if is_left else -self.lower
        out: list[Record] = []
        record: Any = None
        try:
            for record in records:
                timestamp = record.get(TIMESTAMP_FIELD)
                if not check_timestamp(timestamp):
                    raise ValueError(
                        f"an interval join needs records with timestamps (a source watermark_strategy or "
                        f"assign_timestamps_and_watermarks upstream of both inputs); got timestamp {timestamp!r}")
                if timestamp < self._watermark:
                    if late_tag is not None and self._emit_side is not None:
                        self._emit_side(self.name, late_tag, record)
                    continue
                try:
                    key = key_of(record)
                except Exception:
                    if key_of is selector:
                        raise
                    key = selector(record)
                self._backend.set_current_key(key)
                value = value_of(record)
                bucket = ours.get(timestamp)
                ours.put(timestamp, [value] if bucket is None else [*bucket, value])
                for other_time, entries in others.items():
                    left_time, right_time = (timestamp, other_time) if is_left else (other_time, timestamp)
                    if self.within(left_time, right_time):
                        for entry in entries:
                            out += self._join(key, value if is_left else entry, entry if is_left else value,
                                              left_time, right_time)
                timers.register_event_time_timer(timestamp + reach if reach > 0 else timestamp, timestamp)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out

    def _join(self, key: Any, left: Record, right: Record, left_time: Any, right_time: Any) -> list[Record]:
        jctx = self._jctx
        jctx.key, jctx.left, jctx.right = key, left_time, right_time
        results = self.fn.process_element(left, right, jctx)
        if results is None:
            return []
        timestamp = max(left_time, right_time)
        return [stamp(result, timestamp) for result in _checked_results(results, "process_element")]

    def process_watermark(self, watermark: Any) -> list[Any]:
        """Fire the due cleanup timers (each removes its buffer entry); pass the watermark on."""
        self._watermark = watermark.timestamp
        for timers, buffer in ((self._timers[0], LEFT_BUFFER), (self._timers[1], RIGHT_BUFFER)):
            state = self._backend.map_state(buffer)
            for _, _, record_time in timers.advance_watermark(watermark.timestamp):
                state.remove(record_time)
        return [watermark]

