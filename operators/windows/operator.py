"""`WindowOperator`: keyed windows composed of an assigner, a trigger, contents and a function.

Theory of operation
-------------------
Flink's `WindowOperator`, on this runtime's keyed state and timer service. For each record the
operator makes its key current, asks the assigner for its windows and, per window that is not
late (its cleanup time, end + allowed lateness for event time, is still ahead of the watermark),
adds the record to the window's contents (`functions.WindowContents`), asks the trigger, fires
(the window function over the contents, output stamped with the window's `max_timestamp()`)
and/or purges as it says, and registers the window's *cleanup timer*. A record all of whose
windows are late goes to the late-data side output (`side_output_late_data`) or is dropped
(`num_late_records_dropped`): Flink asks besides whether the record's own timestamp is behind the
watermark, which in integer time follows, but a fraction past an integer window's last instant
(9.5 in `[0, 10)`, the watermark at 9) has a late window and a timestamp ahead of the watermark,
and it must not vanish.

Time reaches windows only through one `InternalTimerService` named `window-timers`, whose timers
carry the window (its key) as namespace: the trigger's timers (e.g. the event-time trigger's at
`max_timestamp()`) and the cleanup timers. On a timer the trigger decides about firing; at the
cleanup time every piece of the window's state goes — contents, trigger state, the window's
entry in the merging set — so a window fired and cleaned up exists in no later snapshot, and a
restore never brings it back. Timers, contents, trigger values and the merging set are all keyed
state of the operator (per key group), so a snapshot is consistent and rescaling moves a key's
windows together.

Merging assigners (sessions) go through `MergingWindowSet`: contents stay under a state window
and merges move the merged windows' contents, trigger state and timers into the result.
Pure: no clock but the task's, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from operators.base import DeclaredState, OperatorContext, OperatorError, Record, StreamOperator
from operators.keyed import KeySelector, _checked_results, _keyed_backend, key_getter
from operators.side_outputs import OutputTag
from operators.timer_service import InternalTimerService, timer_state_names
from operators.timestamps import TIMESTAMP_FIELD, stamp, value_of
from operators.windows.assigners import WindowAssigner
from operators.windows.functions import (
    AggregateFunction,
    AggregatingContents,
    ListContents,
    ProcessWindowFunction,
    ReducingContents,
    WindowContents,
)
from operators.windows.merging_set import MERGING_STATE, MergingWindowSet
from operators.windows.triggers import Trigger, trigger_state_name

__all__ = ["WindowOperator"]

TIMER_SERVICE = "window-timers"


class _WindowValue:
    """A trigger's value for one window (`TriggerContext.window_state`)."""

    __slots__ = ("_state", "_window")

    def __init__(self, state: Any, window_key: Any) -> None:
        self._state = state
        self._window = window_key

    def value(self, default: Any = None) -> Any:
        return self._state.get(self._window, default)

    def update(self, value: Any) -> None:
        self._state.put(self._window, value)

    def clear(self) -> None:
        self._state.remove(self._window)


class _Context:
    """The trigger's context and the process window function's `context`, for the current key
    and window (one object per operator, re-pointed for each call)."""

    def __init__(self, operator: WindowOperator) -> None:
        self._op = operator
        self.key: Any = None
        self._window: Any = None
        self.merged_windows: list[Any] = []

    # ---- ProcessWindowFunction's context
    def window(self) -> Any:
        """The window being processed (`.start`, `.end`, `.max_timestamp()`)."""
        return self._window

    def current_watermark(self) -> float:
        return self._op.timer_service.current_watermark

    def current_processing_time(self) -> float:
        return self._op.timer_service.current_processing_time()

    def output(self, tag: OutputTag, record: Record) -> None:
        """Send `record` to side output `tag`, stamped with the window's `max_timestamp()`."""
        if not isinstance(tag, OutputTag) or not isinstance(record, dict):
            raise TypeError(f"context.output needs an OutputTag and a dict record, got {tag!r}, {record!r}")
        self._op._side(tag, self._op._stamped(record, self._window))

    # ---- Trigger's context (timers and values of the current window)
    def register_event_time_timer(self, time: Any) -> None:
        self._op.timer_service.register_event_time_timer(time, self._window.key)

    def delete_event_time_timer(self, time: Any) -> None:
        self._op.timer_service.delete_event_time_timer(time, self._window.key)

    def register_processing_time_timer(self, time: Any) -> None:
        self._op.timer_service.register_processing_time_timer(time, self._window.key)

    def delete_processing_time_timer(self, time: Any) -> None:
        self._op.timer_service.delete_processing_time_timer(time, self._window.key)

    def window_state(self, name: str, window: Any = None) -> _WindowValue:
        state = self._op._backend.map_state(trigger_state_name(name))
        return _WindowValue(state, (window if window is not None else self._window).key)


class WindowOperator(StreamOperator):
    """Keyed windows (see the module docstring).

    Args:
        assigner: the `WindowAssigner`.
        key_selector: record -> key (the partitioner's).
        kind: "reduce" (`fn` a function of two records), "aggregate" (`fn` an `AggregateFunction`)
            or "process" (the elements are kept; `fn` unused).
        fn: see `kind`.
        window_function: a `ProcessWindowFunction` over the contents (None: the contents are the
            output: the reduced record, or the aggregate's result).
        trigger: None for the assigner's default.
        allowed_lateness: how long after its end a window keeps its state and fires again for
            late records (event time).
        late_tag: where records too late for all their windows go (None: dropped).
        name: the operator name, in errors.
    """

    def __init__(self, assigner: WindowAssigner, key_selector: KeySelector, kind: str, fn: Any = None,
                 window_function: ProcessWindowFunction | None = None, trigger: Trigger | None = None,
                 allowed_lateness: Any = 0, late_tag: OutputTag | None = None, name: str = "window") -> None:
        if kind not in ("reduce", "aggregate", "process"):
            raise ValueError(f"operator {name!r}: unknown window function kind {kind!r}")
        self.assigner = assigner
        self.key_selector = key_selector
        self.kind = kind
        self.fn = fn
        self.window_function = window_function
        self.trigger = trigger if trigger is not None else assigner.default_trigger()
        if assigner.merging and not self.trigger.can_merge():
            raise ValueError(f"operator {name!r}: trigger {self.trigger!r} cannot be used with merging windows "
                             f"({type(assigner).__name__})")
        self.allowed_lateness = allowed_lateness
        self.late_tag = late_tag
        self.name = name
        self.num_late_records_dropped = 0
        self._key_of = key_getter(key_selector)

    def needs_watermarks(self) -> bool:
        return self.assigner.is_event_time

    def _contents_names(self) -> frozenset[str]:
        names = {"window-contents"} | ({"window-elements"} if self.kind == "process" else set())
        return frozenset(names | ({MERGING_STATE} if self.assigner.merging else set()))

    def declared_state(self) -> DeclaredState:
        return DeclaredState(keyed=self._contents_names() | self.trigger.state_names()
                             | timer_state_names(TIMER_SERVICE))

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._backend = backend = _keyed_backend(ctx, self.name)
        self.timer_service = InternalTimerService(TIMER_SERVICE, backend, ctx, self)
        self.contents: WindowContents
        if self.kind == "reduce":
            self.contents = ReducingContents(backend, self.fn)
        elif self.kind == "aggregate":
            assert isinstance(self.fn, AggregateFunction)
            self.contents = AggregatingContents(backend, self.fn)
        else:
            self.contents = ListContents(backend)
        self._ctx = _Context(self)
        side = ctx.side_outputs
        self._emit_side = side.emit if side is not None else None
        self._now = ctx.processing_time.now if ctx.processing_time is not None else ctx.clock.now

    # ------------------------------------------------------------------ helpers

    def _side(self, tag: OutputTag, record: Record) -> None:
        if self._emit_side is not None:
            self._emit_side(self.name, tag, record)

    def _stamped(self, record: Record, window: Any) -> Record:
        max_timestamp = window.max_timestamp()
        return stamp(record, max_timestamp if math.isfinite(max_timestamp) else None)

    def _cleanup_time(self, window: Any) -> Any:
        max_timestamp = window.max_timestamp()
        return max_timestamp + self.allowed_lateness if self.assigner.is_event_time else max_timestamp

    def _is_window_late(self, window: Any) -> bool:
        return self.assigner.is_event_time and self._cleanup_time(window) <= self.timer_service.current_watermark

    def _cleanup_timer(self, window: Any, register: bool) -> None:
        """Register (or delete) the timer at which `window`'s state goes, in the assigner's domain."""
        cleanup = self._cleanup_time(window)
        if not math.isfinite(cleanup):
            return
        service = self.timer_service
        if self.assigner.is_event_time:
            (service.register_event_time_timer if register else service.delete_event_time_timer)(cleanup, window.key)
        else:
            (service.register_processing_time_timer if register else service.delete_processing_time_timer)(
                cleanup, window.key)

    def _emit(self, key: Any, window: Any, state_window: Any, out: list[Record]) -> None:
        """Fire `window`: its contents (kept under `state_window`) through the window function."""
        elements = self.contents.get(state_window.key)
        if elements is None:
            return
        ctx = self._ctx
        ctx.key, ctx._window = key, window
        results: Iterable[Any] | None
        if self.window_function is not None:
            results = self.window_function.process(key, ctx, elements)
            if results is None:
                return
        else:
            results = elements
        for result in _checked_results(results, "the window function"):
            out.append(self._stamped(result, window))

    def _clear_all_state(self, window: Any, state_window: Any, merging: MergingWindowSet | None) -> None:
        self.contents.clear(state_window.key)
        self._ctx._window = window
        self.trigger.clear(window, self._ctx)
        if self.window_function is not None:
            self.window_function.clear(self._ctx)
        if merging is not None:
            merging.retire_window(window)

    # ------------------------------------------------------------------ elements

    def process_batch(self, records: list[Record]) -> list[Record]:
        out: list[Record] = []
        record: Any = None
        try:
            for record in records:
                self._process_element(record, out)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out

    def _process_element(self, record: Record, out: list[Record]) -> None:
        try:
            key = self._key_of(record)
        except Exception:
            if self._key_of is self.key_selector:
                raise
            key = self.key_selector(record)
        self._backend.set_current_key(key)
        timestamp = record.get(TIMESTAMP_FIELD)
        value = value_of(record)
        windows = self.assigner.assign_windows(timestamp, self._now)
        ctx, trigger = self._ctx, self.trigger
        ctx.key = key
        merging = MergingWindowSet(self._backend, self.assigner) if self.assigner.merging else None
        skipped = True
        for window in windows:
            if merging is not None:
                window = merging.add_window(window, self._merge)
                if self._is_window_late(window):
                    merging.retire_window(window)
                    continue
                state_window = merging.state_window(window)
            elif self._is_window_late(window):
                continue
            else:
                state_window = window
            skipped = False
            self.contents.add(state_window.key, value)
            ctx._window = window
            result = trigger.on_element(timestamp, window, ctx)
            if result.is_fire:
                self._emit(key, window, state_window, out)
            if result.is_purge:
                self.contents.clear(state_window.key)
            self._cleanup_timer(window, register=True)
        if merging is not None:
            merging.persist()
        if skipped and windows:  # every window of the record is late, so the record is
            if self.late_tag is not None:
                self._side(self.late_tag, record)
            else:
                self.num_late_records_dropped += 1

    def _merge(self, result: Any, merged: list[Any], state_result: Any, merged_state: list[Any]) -> None:
        """A merge in the merging window set: move triggers, timers and contents into `result`."""
        if self.assigner.is_event_time and self._cleanup_time(result) <= self.timer_service.current_watermark:
            raise RuntimeError(f"operator {self.name!r}: merging made window {result!r} end before the "
                               f"watermark {self.timer_service.current_watermark!r}")
        ctx = self._ctx
        ctx._window, ctx.merged_windows = result, merged
        self.trigger.on_merge(result, ctx)
        ctx.merged_windows = []
        for window in merged:
            ctx._window = window
            self.trigger.clear(window, ctx)
            self._cleanup_timer(window, register=False)
        self.contents.merge(state_result.key, [w.key for w in merged_state])

    # ------------------------------------------------------------------ time

    def process_watermark(self, watermark: Any) -> list[Any]:
        fired = self._on_timers(self.timer_service.advance_watermark(watermark.timestamp), event_time=True)
        return [fired, watermark] if fired else [watermark]

    def on_processing_time(self, now: float) -> list[Any]:
        fired = self._on_timers(self.timer_service.on_processing_time(now), event_time=False)
        return [fired] if fired else []

    def _on_timers(self, timers: Iterable[tuple[Any, Any, Any]], event_time: bool) -> list[Record]:
        out: list[Record] = []
        timestamp: Any = None
        key: Any = None
        try:
            for timestamp, key, namespace in timers:
                self._on_timer(timestamp, key, self.assigner.window_of(namespace), event_time, out)
        except Exception as exc:
            domain = "event-time" if event_time else "processing-time"
            raise OperatorError(self.name, f"<{domain} timer {timestamp!r} of key {key!r}>", exc) from exc
        return out

    def _on_timer(self, timestamp: Any, key: Any, window: Any, event_time: bool, out: list[Record]) -> None:
        merging = MergingWindowSet(self._backend, self.assigner) if self.assigner.merging else None
        state_window = window if merging is None else merging.state_window(window)
        if state_window is None:
            return  # the window merged into another: its timers were moved
        ctx = self._ctx
        ctx.key, ctx._window = key, window
        result = (self.trigger.on_event_time if event_time else self.trigger.on_processing_time)(timestamp, window, ctx)
        if result.is_fire:
            self._emit(key, window, state_window, out)
        if result.is_purge:
            self.contents.clear(state_window.key)
        if event_time == self.assigner.is_event_time and timestamp == self._cleanup_time(window):
            self._clear_all_state(window, state_window, merging)
        if merging is not None:
            merging.persist()

    def __repr__(self) -> str:
        return f"WindowOperator({self.name!r}, {self.assigner!r}, {self.trigger!r}, {self.kind})"
