"""What the pure core is handed from outside: time, timers and randomness.

The barrier handlers, the input gate, `Task`, the coordinator and the state backends never read
the wall clock or schedule anything themselves. The simulator hands them virtual time; the Ray
executor hands them the wall clock and a thread timer.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current time in seconds (virtual on the simulator)."""
        ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def schedule(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        """Run `callback` once, `delay` seconds from now, unless cancelled first."""
        ...


class ManualClock:
    """A clock that moves only when told to (tests, Flink's `ManualClock`)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time can't go backwards")
        self._now += seconds

    def set(self, now: float) -> None:
        if now < self._now:
            raise ValueError("time can't go backwards")
        self._now = now


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimers:
    """Timers driven by a `ManualClock`: `advance(dt)` fires every timer that came due, in order."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._heap: list[_Timer] = []
        self._seq = itertools.count()

    def schedule(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self.clock.now() + max(0.0, delay), next(self._seq), callback)
        heapq.heappush(self._heap, timer)
        return timer

    def advance(self, seconds: float) -> None:
        target = self.clock.now() + seconds
        while self._heap and self._heap[0].due <= target:
            timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.clock.set(max(self.clock.now(), timer.due))
            timer.callback()
        self.clock.set(target)

    @property
    def pending(self) -> int:
        return sum(1 for t in self._heap if not t.cancelled)


class NoTimers:
    """For handlers that never need a timer; scheduling is a programming error."""

    def schedule(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        raise RuntimeError("no timer service was given to this component")
