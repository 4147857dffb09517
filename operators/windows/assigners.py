"""Window assigners: which windows a record belongs to (Flink's `WindowAssigner`s).

A window is a value: `TimeWindow(start, end)` (end exclusive; `max_timestamp()` is the last
instant it covers: `end - 1` in integer time, as in Flink, the float just below `end` otherwise) or
the one `GlobalWindow`. Windows are kept in keyed state by
their `key` (a tuple, or "global") and rebuilt from it with `assigner.window_of(key)`. Assigners are
tiny immutable values; every size, slide, offset and gap is a number in the unit of the record
timestamps (event time; milliseconds in the examples) or in seconds of the task clock (processing
time). A bad parameter raises `ValueError` naming the assigner and the parameter.

Tumbling windows start at `offset + k * size`, sliding ones every `slide`. In integer time the
start is Flink's `t - (t - offset) % size`; with a float anywhere, the window's bounds are computed
from its index `k` alone (`offset + k * size`, `offset + (k + 1) * size`, `start + size` for a
sliding one), so every record of a window names it by the same two floats, tumbling windows tile
without a gap, and `k` is the one with `start <= t < end` as compared in floats (rounding in
`(t - offset) / size` is corrected by a step). A session window is
`[t, t + gap)` for each record and overlapping windows merge (`merge_windows`, Flink's
`TimeWindow.mergeWindows`: sort by start, union what intersects).

A window is its value, whatever the numeric type of the timestamps naming it: a stream may mix ints
and floats (3, 5.0, 7.5), and an Arrow column or a snapshot turns the ints of a batch or a key column
that holds a float into floats. So an assigner whose sizes are all ints (an *integer grid*) gives
integral bounds as ints — 3, 3.0 and 7.5 all fall in the tumbling `[0, 10)`, 5 and 5.0 open the
session `[5, 10)` — and only a bound a fraction puts there is a float (the session of 7.5,
`[7.5, 12.5)`); an assigner with a float size gives float bounds (`grid_bound`). `window_of`
normalises what a restore reads back the same way. An integer window's last instant is `end - 1`
(Flink's), so a record with a fraction past it (9.5 in `[0, 10)`) is late once the watermark
reached `end - 1`: give a stream timed in fractions float sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from operators.timestamps import MAX_WATERMARK, check_timestamp, last_instant_before
from operators.windows.triggers import EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, Trigger

__all__ = [
    "EventTimeSessionWindows",
    "GlobalWindow",
    "GlobalWindows",
    "ProcessingTimeWindow",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TimeWindow",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "WindowAssigner",
]


class TimeWindow(NamedTuple):
    """The interval `[start, end)` of event or processing time."""

    start: Any
    end: Any

    def max_timestamp(self) -> Any:
        """The last instant of the window (`end - 1` in integer time, Flink's `maxTimestamp`; the
        float just below `end` otherwise)."""
        return last_instant_before(self.end)

    @property
    def key(self) -> tuple[Any, Any]:
        return (self.start, self.end)

    def intersects(self, other: TimeWindow) -> bool:
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


class ProcessingTimeWindow(TimeWindow):
    """`[start, end)` of the task clock: seconds, continuous, so its last instant is the float just
    below `end` (`end - 1` would close it a whole second early)."""

    __slots__ = ()

    def max_timestamp(self) -> Any:
        return math.nextafter(float(self.end), -math.inf)


class GlobalWindow:
    """The one window of `GlobalWindows`: every record of a key is in it."""

    __slots__ = ()
    start = -math.inf
    end = math.inf
    key = "global"

    def max_timestamp(self) -> float:
        return MAX_WATERMARK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalWindow)

    def __hash__(self) -> int:
        return hash("GlobalWindow")

    def __repr__(self) -> str:
        return "GlobalWindow()"


GLOBAL_WINDOW = GlobalWindow()


def _integral(*values: Any) -> bool:
    return all(type(v) is int for v in values)


def grid_bound(value: Any, integral: bool) -> Any:
    """A window bound as its assigner's grid names it: on an integer grid (`integral`) an int when
    its value is integral (5.0 -> 5), else the float; on a float grid a float."""
    if not integral:
        return float(value)
    if type(value) is int or not float(value).is_integer():
        return value
    return int(value)


def window_index(timestamp: Any, offset: Any, slide: Any) -> int:
    """Float time: the `k` with `offset + k * slide <= timestamp < offset + (k + 1) * slide`."""
    k = math.floor((timestamp - offset) / slide)
    while offset + k * slide > timestamp:
        k -= 1
    while offset + (k + 1) * slide <= timestamp:
        k += 1
    return k


def tumbling_bounds(timestamp: Any, offset: Any, size: Any) -> tuple[Any, Any]:
    """The `(start, end)` of the window of length `size` (aligned to `offset`) holding `timestamp`
    (Flink's `TimeWindow.getWindowStartWithOffset`; float time by the window's index)."""
    if _integral(timestamp, offset, size):
        start = timestamp - (timestamp - offset) % size
        return start, start + size
    k = window_index(timestamp, offset, size)
    return offset + k * size, offset + (k + 1) * size


def sliding_bounds(timestamp: Any, offset: Any, size: Any, slide: Any) -> list[tuple[Any, Any]]:
    """The `(start, end)` of every window of length `size` starting every `slide` (aligned to
    `offset`) that holds `timestamp`, latest first."""
    if slide == size:
        return [tumbling_bounds(timestamp, offset, size)]
    if _integral(timestamp, offset, size, slide):
        start = timestamp - (timestamp - offset) % slide
        windows = []
        while start > timestamp - size:
            windows.append((start, start + size))
            start -= slide
        return windows
    k = window_index(timestamp, offset, slide)
    starts = (offset + m * slide for m in range(k, k - math.ceil(size / slide) - 2, -1))
    return [(start, start + size) for start in starts if start <= timestamp < start + size]


class WindowAssigner:
    """Assigns each record to zero or more windows; the window operator asks it for the default
    trigger. Subclasses set `is_event_time` and `merging`."""

    is_event_time = True
    merging = False
    #: the windows it makes (`TimeWindow`: event time, `max_timestamp()` its last instant)
    window_type: type = TimeWindow

    def assign_windows(self, timestamp: Any, now: Callable[[], float]) -> list[Any]:
        """The windows of a record with event timestamp `timestamp`; `now()` is the processing time."""
        raise NotImplementedError

    def default_trigger(self) -> Trigger:
        return EventTimeTrigger() if self.is_event_time else ProcessingTimeTrigger()

    def integral_grid(self) -> bool:
        """Whether its sizes are all ints: its windows' integral bounds are ints (`grid_bound`)."""
        return False

    def _window(self, start: Any, end: Any) -> Any:
        integral = self.integral_grid()
        return self.window_type(grid_bound(start, integral), grid_bound(end, integral))

    def window_of(self, key: Any) -> Any:
        """The window kept in state under `key` (its bounds as this grid names them: a restore may
        read an int back as a float)."""
        return self._window(key[0], key[1])

    def merge_windows(self, windows: list[Any]) -> list[tuple[Any, list[Any]]]:
        """Merging assigners: the merge results and what each merges (only groups of two or more)."""
        raise NotImplementedError

    def _event_timestamp(self, timestamp: Any) -> Any:
        if not check_timestamp(timestamp):
            raise ValueError(f"{type(self).__name__}: the record has no event timestamp ({timestamp!r}); give the "
                             "stream timestamps with assign_timestamps_and_watermarks(...) or a source "
                             "watermark_strategy, or use a processing-time assigner")
        return timestamp

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(vars(self).items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _positive(assigner: str, name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{assigner}: {name} must be a positive finite number, got {value!r}")
    return value


def _offset(assigner: str, offset: Any, bound: Any, bound_name: str) -> Any:
    if isinstance(offset, bool) or not isinstance(offset, int | float) or not math.isfinite(offset):
        raise ValueError(f"{assigner}: offset must be a finite number, got {offset!r}")
    if abs(offset) >= bound:
        raise ValueError(f"{assigner}: abs(offset) must be smaller than the {bound_name} ({bound!r}), got {offset!r}")
    return offset


class _Tumbling(WindowAssigner):
    def __init__(self, size: Any, offset: Any = 0) -> None:
        name = type(self).__name__
        self.size = _positive(name, "size", size)
        self.offset = _offset(name, offset, size, "size")

    @classmethod
    def of(cls, size: Any, offset: Any = 0) -> Any:
        """Windows of length `size`, one after the other, starting at `offset + k * size`.

        Raises:
            ValueError: size is not positive, or abs(offset) >= size.
        """
        return cls(size, offset)

    def integral_grid(self) -> bool:
        return _integral(self.size, self.offset)

    def _windows(self, timestamp: Any) -> list[Any]:
        return [self._window(*tumbling_bounds(timestamp, self.offset, self.size))]


class TumblingEventTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping event-time windows (Flink's `TumblingEventTimeWindows`)."""

    def assign_windows(self, timestamp: Any, now: Callable[[], float]) -> list[Any]:
        return self._windows(self._event_timestamp(timestamp))


class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping windows of the task clock (seconds; virtual on the simulator)."""

    is_event_time = False
    window_type = ProcessingTimeWindow

    def assign_windows(self, timestamp: Any, now: Callable[[], float]) -> list[Any]:
        return self._windows(now())


class _Sliding(WindowAssigner):
    def __init__(self, size: Any, slide: Any, offset: Any = 0) -> None:
        name = type(self).__name__
        self.size = _positive(name, "size", size)
        self.slide = _positive(name, "slide", slide)
        if slide > size:
            raise ValueError(f"{name}: slide ({slide!r}) must not exceed size ({size!r}): records between "
                             "two windows would belong to none")
        self.offset = _offset(name, offset, slide, "slide")

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = 0) -> Any:
        """Windows of length `size` starting every `slide` (a record is in `size / slide` windows).

        Raises:
            ValueError: size or slide is not positive, slide > size, or abs(offset) >= slide.
        """
        return cls(size, slide, offset)

    def integral_grid(self) -> bool:
        return _integral(self.size, self.slide, self.offset)

    def _windows(self, timestamp: Any) -> list[Any]:
        return [self._window(*bounds) for bounds in sliding_bounds(timestamp, self.offset, self.size, self.slide)]


class SlidingEventTimeWindows(_Sliding):
    """Overlapping event-time windows of `size`, one every `slide` (Flink's `SlidingEventTimeWindows`)."""

    def assign_windows(self, timestamp: Any, now: Callable[[], float]) -> list[Any]:
        return self._windows(self._event_timestamp(timestamp))


class SlidingProcessingTimeWindows(_Sliding):
    """Overlapping windows of the task clock (seconds; virtual on the simulator)."""

    is_event_time = False
    window_type = ProcessingTimeWindow

    def assign_windows(self, timestamp: Any, now: Callable[[], float]) -> list[Any]:
        return self._windows(now())


class EventTimeSessionWindows(WindowAssigner):
    """Sessions: a record opens `[t, t + gap)` and windows that overlap merge, so a session ends
    after `gap` without records of its key (Flink's `EventTimeSessionWindows`)."""

    merging = True

    def __init__(self, gap: Any) -> None:
        self.gap = _positive("EventTimeSessionWindows", "gap", gap)

    @classmethod
    def with_gap(cls, gap: Any) -> EventTimeSessionWindows:
        """Sessions closed by `gap` of event time without records.

        Raises:
            ValueError: gap is not positive.
        """
        return cls(gap)

    def integral_grid(self) -> bool:
        return _integral(self.gap)

    def assign_windows(self, timestamp: Any, now: Callable[[], float]) -> list[Any]:
        timestamp = self._event_timestamp(timestamp)
        return [self._window(timestamp, timestamp + self.gap)]

    def merge_windows(self, windows: list[Any]) -> list[tuple[Any, list[Any]]]:
        merged: list[tuple[TimeWindow, list[TimeWindow]]] = []
        for window in sorted(windows):
            if merged and merged[-1][0].intersects(window):
                cover, members = merged[-1]
                merged[-1] = (cover.cover(window), [*members, window])
            else:
                merged.append((window, [window]))
        return [(cover, members) for cover, members in merged if len(members) > 1]


class GlobalWindows(WindowAssigner):
    """One window per key that never ends: nothing fires unless a trigger says so
    (`.trigger(CountTrigger.of(n))`); Flink's `GlobalWindows`."""

    is_event_time = False

    @classmethod
    def create(cls) -> GlobalWindows:
        return cls()

    def assign_windows(self, timestamp: Any, now: Callable[[], float]) -> list[Any]:
        return [GLOBAL_WINDOW]

    def default_trigger(self) -> Trigger:
        return NeverTrigger()

    def window_of(self, key: Any) -> Any:
        return GLOBAL_WINDOW
