"""Timer services: when a keyed operator's timers fire (Flink's `InternalTimerServiceImpl`).

Theory of operation
-------------------
An `InternalTimerService` holds one keyed operator instance's event-time and processing-time
timers, each domain a `state.timer_queue.TimerQueue` in the operator's keyed state (so timers are
snapshotted, restored and rescaled by key group with the rest of its keyed state). It is the only
place that knows when a timer is due:

* event time: `advance_watermark(w)` sets the current watermark and hands out every timer with
  timestamp <= w, earliest first, each with its key made current; it polls lazily, so a timer the
  callback registers at or below `w` fires in the same advance (as Flink's loop does);
* processing time: the service keeps one wake-up scheduled with the task's processing-time
  service (`ctx.processing_time`) for its earliest timer, moved when an earlier one is
  registered; `on_processing_time(now)` hands out the due ones and schedules the next.

A timer is handed out once: it leaves the queue (and the state) before its callback runs, so the
next snapshot no longer holds it and a restore never fires it again; a timer the checkpoint still
holds fires again after a failover only if its firing was not covered by that checkpoint.
Timestamps are numbers (event time in the unit of the record timestamps, processing time in
seconds of the task clock). `TimerService` is the facade a `KeyedProcessFunction` gets
(`ctx.timer_service()`), with PyFlink's names, for the current key and no namespace. Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

from operators.base import Cancellable, OperatorContext, StreamOperator
from operators.timestamps import MIN_WATERMARK, check_timestamp
from state.keyed import KeyedStateBackend
from state.timer_queue import TimerQueue, timer_state_name

__all__ = ["InternalTimerService", "TimeDomain", "TimerService", "timer_state_names"]


class TimeDomain(enum.Enum):
    """Which clock a timer follows (PyFlink's `TimeDomain`)."""

    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


def timer_state_names(service: str) -> frozenset[str]:
    """The keyed state names the timers of service `service` live in (both domains)."""
    return frozenset({timer_state_name("event", service), timer_state_name("processing", service)})


class InternalTimerService:
    """The timers of one keyed operator instance (see the module docstring).

    Args:
        name: the service name, part of its state names (`"user-timers"`, `"window-timers"`...).
        backend: the operator instance's keyed state backend.
        ctx: the operator's context (its processing-time service schedules the wake-ups).
        target: the operator whose `on_processing_time` the wake-ups call.
    """

    def __init__(self, name: str, backend: KeyedStateBackend, ctx: OperatorContext, target: StreamOperator) -> None:
        self.name = name
        self.backend = backend
        self.event = TimerQueue(backend, timer_state_name("event", name))
        self.processing = TimerQueue(backend, timer_state_name("processing", name))
        self.current_watermark: float = MIN_WATERMARK
        self._processing_time = ctx.processing_time
        self._target = target
        self._wake: tuple[Any, Cancellable] | None = None
        ctx.timer_services.append(self)
        if len(self.processing):  # restored timers: wake for the earliest
            key = backend.current_key if backend.current_key_group is not None else None
            self._schedule(self.processing.peek())
            if key is not None:
                backend.set_current_key(key)

    # ------------------------------------------------------------------ registration (current key)

    def register_event_time_timer(self, timestamp: Any, namespace: Any = None) -> None:
        self.event.add(_checked(timestamp, "event"), namespace)

    def delete_event_time_timer(self, timestamp: Any, namespace: Any = None) -> None:
        self.event.remove(timestamp, namespace)

    def register_processing_time_timer(self, timestamp: Any, namespace: Any = None) -> None:
        if self.processing.add(_checked(timestamp, "processing"), namespace) and (
                self._wake is None or timestamp < self._wake[0]):
            self._schedule(timestamp)

    def delete_processing_time_timer(self, timestamp: Any, namespace: Any = None) -> None:
        self.processing.remove(timestamp, namespace)  # a wake-up with nothing due is harmless

    def current_processing_time(self) -> float:
        if self._processing_time is None:
            raise RuntimeError(f"timer service {self.name!r} runs outside a task: no processing time")
        return self._processing_time.now()

    # ------------------------------------------------------------------ firing

    def advance_watermark(self, watermark: float) -> Iterator[tuple[Any, Any, Any]]:
        """Set the current watermark; yield every event-time timer due `(timestamp, key,
        namespace)`, its key current while the caller handles it."""
        self.current_watermark = watermark
        poll = self.event.poll
        while (timer := poll(watermark)) is not None:
            yield timer

    def on_processing_time(self, now: float) -> Iterator[tuple[Any, Any, Any]]:
        """The wake-up came: yield every processing-time timer due at `now`, then schedule the
        next wake-up."""
        self._wake = None
        poll = self.processing.poll
        while (timer := poll(now)) is not None:
            yield timer
        head = self.processing.peek()
        if head is not None:
            self._schedule(head)

    def _schedule(self, when: Any) -> None:
        if self._processing_time is None:
            return
        if self._wake is not None:
            self._wake[1].cancel()
        self._wake = (when, self._processing_time.schedule(when, self._target))

    def __repr__(self) -> str:
        return (f"InternalTimerService({self.name!r}, watermark={self.current_watermark}, "
                f"event={len(self.event)}, processing={len(self.processing)})")


def _checked(timestamp: Any, domain: str) -> Any:
    if not check_timestamp(timestamp):
        raise TypeError(f"a {domain}-time timer needs an int or finite float timestamp, got "
                        f"{type(timestamp).__name__} {timestamp!r}")
    return timestamp


class TimerService:
    """What `ctx.timer_service()` returns: timers of the current key (PyFlink's `TimerService`).

    Event time is in the unit of the record timestamps; processing time in seconds of the task
    clock (virtual on the simulator). A timer registered twice for one time is one timer; one
    registered at or before the current time fires at the next watermark (event time) or as soon
    as the task gets to it (processing time)."""

    __slots__ = ("_service",)

    def __init__(self, service: InternalTimerService) -> None:
        self._service = service

    def register_event_time_timer(self, timestamp: Any) -> None:
        """Call `on_timer` once the watermark reached `timestamp`."""
        self._service.register_event_time_timer(timestamp)

    def register_processing_time_timer(self, timestamp: Any) -> None:
        """Call `on_timer` once the task clock reached `timestamp` (seconds)."""
        self._service.register_processing_time_timer(timestamp)

    def delete_event_time_timer(self, timestamp: Any) -> None:
        self._service.delete_event_time_timer(timestamp)

    def delete_processing_time_timer(self, timestamp: Any) -> None:
        self._service.delete_processing_time_timer(timestamp)

    def current_watermark(self) -> float:
        """The operator's input watermark (`-inf` before the first)."""
        return self._service.current_watermark

    def current_processing_time(self) -> float:
        return self._service.current_processing_time()
