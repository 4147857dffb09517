"""`TaskTime`: a task's time — its input watermark, its sources' watermarks, its operators'
processing-time callbacks.

Theory of operation
-------------------
The task owns one `TaskTime`; everything about time reaches the operators through it, and what
they emit goes back through the task's chain and record writer like any data:

* Input (a task with input channels, in a job with event time — `JobGraph.watermarks`): the gate
  hands watermark events out in channel order, held back with their channel's data while it is
  blocked (aligned checkpoints) and restored as channel state when an unaligned barrier overtook
  them. `on_input` feeds them, and each channel's end of partition (`+inf`), to a
  `StatusWatermarkValve` (one per logical input of the operator, `JobEdge.input_index`, combined
  by `CombinedWatermark`: a two-input operator's watermark is the lower of its inputs'); what it outputs — the minimum over the active channels, never
  backwards, nothing before every active channel delivered one, so a restored task waits for all
  its inputs — enters the chain at its head (`OperatorChain.push`): operators fire their timers
  and windows (`process_watermark`) and pass it on, and the task broadcasts it on every output.
* Sources (a source task in such a job): `SourceWatermarks` stamps what each split reads and
  combines the splits' watermarks every `JobGraph.auto_watermark_interval`; every source emits
  `+inf` once it read all its splits (before it reports finished, so before the final
  checkpoint's barrier), and every event-time timer downstream fires before that checkpoint.
* Processing time: operators ask `schedule(when, operator)` (`operators.base.ProcessingTimeService`);
  the injected `Timers` (virtual on the simulator, a thread on Ray) call back, the callback only
  queues the operator as due and asks the executor to step the task (`wake`), and the task runs
  due callbacks at the start of its next step (`take_due`), on its own thread, in due order.
  What is scheduled before the task's first step (operators opening, restored timers) is armed
  at that step (`start`): a task deployed but not started yet must not be driven by a timer (on
  Ray its peers may not be deployed yet).

Pure: time from the injected `Clock` and `Timers`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from operators.timestamps import MIN_WATERMARK
from operators.watermarks import WatermarkStrategy
from runtime.core.source_watermarks import SourceWatermarks
from runtime.core.watermark_valve import CombinedWatermark, StatusWatermarkValve
from runtime.records.messages import EndOfPartition, Watermark, WatermarkStatus
from vocabulary.ports import Clock, Timers

__all__ = ["TaskTime"]


class _Scheduled:
    """One `schedule` call: cancellable until it came due."""

    __slots__ = ("cancelled", "operator", "timer", "when")

    def __init__(self, when: float, operator: Any) -> None:
        self.when, self.operator, self.cancelled, self.timer = when, operator, False, None

    def cancel(self) -> None:
        self.cancelled = True
        if self.timer is not None:
            self.timer.cancel()


class TaskTime:
    """The time of one task (see the module docstring).

    Args:
        clock, timers: the task's injected clock and timers.
        wake: asks the executor to step the task (a callback came due).
        channel_inputs: per input channel, the logical input it feeds (empty for a source task).
        watermarks: the job has event time: watermarks are combined, generated and forwarded.
        interval: seconds between periodic watermark emissions.
    """

    def __init__(self, clock: Clock, timers: Timers, wake: Callable[[], None], *, channel_inputs: list[int],
                 watermarks: bool, interval: float) -> None:
        self.clock = clock
        self.timers = timers
        self._wake = wake
        self.watermarks = watermarks
        self.interval = interval
        #: per input channel: (logical input, its channel index among that input's)
        self._channels: list[tuple[int, int]] = []
        sizes: dict[int, int] = {}
        for logical in channel_inputs:
            self._channels.append((logical, sizes.get(logical, 0)))
            sizes[logical] = sizes.get(logical, 0) + 1
        self.valves = [StatusWatermarkValve(sizes[i]) for i in sorted(sizes)] if watermarks and sizes else []
        self._combined = CombinedWatermark(len(self.valves)) if len(self.valves) > 1 else None
        self.sources: SourceWatermarks | None = None
        self._due: list[_Scheduled] = []
        #: scheduled before the first step, armed by `start`
        self._deferred: list[_Scheduled] | None = []
        self._seq = itertools.count()
        #: the watermark the task's chain got last (`-inf`: none yet): the task's input watermark
        self.current_watermark = MIN_WATERMARK

    # ------------------------------------------------------------------ processing time

    def now(self) -> float:
        return self.clock.now()

    def schedule(self, when: float, operator: Any) -> _Scheduled:
        """Run `operator.on_processing_time` once the clock reached `when` (see the module docstring)."""
        handle = _Scheduled(when, operator)
        if self._deferred is not None:
            self._deferred.append(handle)
        else:
            self._arm(handle)
        return handle

    def _arm(self, handle: _Scheduled) -> None:
        handle.timer = self.timers.schedule(max(0.0, handle.when - self.clock.now()), lambda: self._came_due(handle))

    def _came_due(self, handle: _Scheduled) -> None:
        if handle.cancelled:
            return
        self._due.append(handle)
        self._wake()

    @property
    def has_due(self) -> bool:
        """Whether the task has time work: callbacks that came due, or ones to arm."""
        return bool(self._due) or bool(self._deferred)

    def take_due(self) -> list[Any]:
        """The operators (or `sources`: the periodic emission) whose time came, in due order;
        the first call arms what was scheduled before it."""
        if self._deferred is not None:
            deferred, self._deferred = self._deferred, None
            for handle in deferred:
                if not handle.cancelled:
                    self._arm(handle)
        due, self._due = self._due, []
        due.sort(key=lambda h: h.when)
        return [h.operator for h in due if not h.cancelled]

    # ------------------------------------------------------------------ sources

    def start_sources(self, strategy: WatermarkStrategy | None, split_ids: list[str],
                      restored: dict[str, float | None], operator: str) -> None:
        """A source task: per-split watermarks with `strategy` (None: only `+inf` at the end)."""
        if self.watermarks and strategy is not None:
            self.sources = SourceWatermarks(strategy, split_ids, self.clock, restored, operator)
            if strategy.max_out_of_orderness is not None or strategy.idleness is not None:
                self.schedule(self.clock.now() + self.interval, self.sources)

    def periodic_events(self, backpressured: bool, reading: str | None) -> list[Watermark | WatermarkStatus]:
        """The periodic emission of a source task's watermarks came due (`backpressured`: the
        task could not send since the last one; `reading`: the split it reads now); schedules
        the next."""
        assert self.sources is not None
        events = self.sources.on_periodic_emit(backpressured, reading)
        if self.sources.emitted < float("inf"):
            self.schedule(self.clock.now() + self.interval, self.sources)
        return events

    def source_end(self) -> list[Watermark | WatermarkStatus]:
        """A source task read all its splits: the watermark goes to `+inf`."""
        if not self.watermarks:
            return []
        if self.sources is not None:
            return self.sources.end_of_input()
        return [Watermark(float("inf"))]

    # ------------------------------------------------------------------ input

    @property
    def valve(self) -> StatusWatermarkValve | None:
        """The valve of the first logical input (None: no watermarks, or a source task)."""
        return self.valves[0] if self.valves else None

    def on_input(self, channel: int, event: Watermark | WatermarkStatus | EndOfPartition) -> list[Any]:
        """A watermark event (or the end of partition) handed out on `channel`: what enters the
        chain (the valve's output; with several logical inputs, the combination of theirs)."""
        if not self.valves:
            return []
        logical, index = self._channels[channel]
        valve = self.valves[logical]
        if isinstance(event, Watermark):
            out = valve.input_watermark(index, event.timestamp)
        elif isinstance(event, WatermarkStatus):
            out = valve.input_status(index, event)
        else:
            out = valve.end_of_partition(index)
        return self._combined.update(logical, out) if self._combined is not None and out else out

    def entered_chain(self, events: list[Any]) -> None:
        """`events` are entering the chain: the input watermark the task's operators see."""
        for event in events:
            if isinstance(event, Watermark):
                self.current_watermark = event.timestamp

    def __repr__(self) -> str:
        return (f"TaskTime(watermark={self.current_watermark}, valve={self.valve!r}, "
                f"sources={self.sources!r}, due={len(self._due)})")
