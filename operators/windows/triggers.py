"""Triggers: when a window's contents are emitted (Flink's `Trigger`s).

A trigger answers each element and each timer of a window with a `TriggerResult`: CONTINUE, FIRE
(emit the window's result and keep its contents), PURGE (drop the contents) or FIRE_AND_PURGE. It
acts only through its `TriggerContext` (the window operator's): timers in the window's namespace
of the operator's timer service, and per-window values kept in keyed state
(`ctx.window_state(name)`, the map state `window-trigger/<name>`: window -> value), so what a
trigger remembers is snapshotted, restored and rescaled with the windows. Pure.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

__all__ = ["CountTrigger", "EventTimeTrigger", "NeverTrigger", "ProcessingTimeTrigger", "PurgingTrigger",
           "Trigger", "TriggerContext", "TriggerResult", "trigger_state_name"]


class TriggerResult(enum.Enum):
    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    @property
    def is_fire(self) -> bool:
        return self.value[0]

    @property
    def is_purge(self) -> bool:
        return self.value[1]


def trigger_state_name(name: str) -> str:
    """The keyed (map) state a trigger's per-window value `name` lives in."""
    return f"window-trigger/{name}"


class WindowValue(Protocol):
    def value(self, default: Any = None) -> Any: ...
    def update(self, value: Any) -> None: ...
    def clear(self) -> None: ...


class TriggerContext(Protocol):
    """What a trigger may use; timers and values belong to the window being handled."""

    #: the windows merged into the current one (only in `on_merge`)
    merged_windows: list[Any]

    def current_watermark(self) -> float: ...
    def current_processing_time(self) -> float: ...
    def register_event_time_timer(self, time: Any) -> None: ...
    def delete_event_time_timer(self, time: Any) -> None: ...
    def register_processing_time_timer(self, time: Any) -> None: ...
    def delete_processing_time_timer(self, time: Any) -> None: ...
    def window_state(self, name: str, window: Any = None) -> WindowValue: ...


class Trigger:
    """Base class: never fires; subclasses override what they react to."""

    def on_element(self, timestamp: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Any, ctx: TriggerContext) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    def clear(self, window: Any, ctx: TriggerContext) -> None:  # noqa: B027 - optional hook
        """The window is gone: remove its timers and values."""

    def state_names(self) -> frozenset[str]:
        """The per-window values it keeps (`ctx.window_state(name)`), for the restore check."""
        return frozenset()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EventTimeTrigger(Trigger):
    """Fires once the watermark passed the window's end (at once for an element of a window the
    watermark already passed, within the allowed lateness); Flink's `EventTimeTrigger`."""

    def on_element(self, timestamp: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: TriggerContext) -> None:
        if window.max_timestamp() > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires once the task clock passed the window's end (Flink's `ProcessingTimeTrigger`)."""

    def on_element(self, timestamp: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: TriggerContext) -> None:
        if window.max_timestamp() > ctx.current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


class NeverTrigger(Trigger):
    """The default trigger of `GlobalWindows`: never fires."""

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: TriggerContext) -> None:
        pass


class CountTrigger(Trigger):
    """Fires each time a window received `count` elements (Flink's `CountTrigger`); the count
    per window is keyed state (`window-trigger/count`)."""

    STATE = "count"

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"CountTrigger: count must be an integer >= 1, got {count!r}")
        self.count = count

    @classmethod
    def of(cls, count: int) -> CountTrigger:
        return cls(count)

    def on_element(self, timestamp: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        state = ctx.window_state(self.STATE)
        n = state.value(0) + 1
        if n >= self.count:
            state.clear()
            return TriggerResult.FIRE
        state.update(n)
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: TriggerContext) -> None:
        total = sum(ctx.window_state(self.STATE, merged).value(0) for merged in ctx.merged_windows)
        if total:
            ctx.window_state(self.STATE).update(total)

    def clear(self, window: Any, ctx: TriggerContext) -> None:
        ctx.window_state(self.STATE).clear()

    def state_names(self) -> frozenset[str]:
        return frozenset({trigger_state_name(self.STATE)})

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class PurgingTrigger(Trigger):
    """`trigger` whose every FIRE also purges the window (Flink's `PurgingTrigger`)."""

    def __init__(self, trigger: Trigger) -> None:
        if not isinstance(trigger, Trigger):
            raise ValueError(f"PurgingTrigger: expected a Trigger, got {type(trigger).__name__} {trigger!r}")
        self.trigger = trigger

    @classmethod
    def of(cls, trigger: Trigger) -> PurgingTrigger:
        return cls(trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire else result

    def on_element(self, timestamp: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_element(timestamp, window, ctx))

    def on_event_time(self, time: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: Any, window: Any, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.trigger.can_merge()

    def on_merge(self, window: Any, ctx: TriggerContext) -> None:
        self.trigger.on_merge(window, ctx)

    def clear(self, window: Any, ctx: TriggerContext) -> None:
        self.trigger.clear(window, ctx)

    def state_names(self) -> frozenset[str]:
        return self.trigger.state_names()

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.trigger!r})"
