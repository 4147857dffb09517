"""`SourceWatermarks`: per-split timestamps and watermarks of a source task.

Theory of operation (Flink's `SourceOperator` with per-split watermarks)
------------------------------------------------------------------------
A source given a `WatermarkStrategy` stamps the records of each split it reads with the strategy's
assigner and feeds them to a watermark generator of that split's own, so a fast split does not
make a slow one's records late. Every `auto_watermark_interval` the task asks each split's
generator for its watermark (`on_periodic_emit`) and combines them as Flink's
`WatermarkOutputMultiplexer` does: the minimum over the splits that are neither idle nor
finished; idle when every unfinished split is idle; `+inf` once every split finished (the task
then has read all its input: `end_of_input`). The combined watermark never goes backwards, and
statuses are emitted on change only (active before a watermark).

A split's watermark is checkpointed with its offset (`snapshot`: split id -> watermark, None
before the first) and a restored split starts from it, so a restored source never emits a
watermark below what it emitted for that split, wherever the split moved on a rescale. Idleness
(`with_idleness`) counts processing time without records, but only for the split being read and
not while the task was backpressured: a split that waits for its turn (a task reads its splits
one after the other) or a source that may not send is not idle (Flink pauses its idleness clock
under backpressure likewise), or its records would come late. Pure: time from the injected clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from operators.base import Clock
from operators.columns import Batch
from operators.timestamps import MAX_WATERMARK, MIN_WATERMARK
from operators.watermarks import WatermarkOutput, WatermarkStrategy, WatermarksWithIdleness
from runtime.records.messages import Watermark, WatermarkStatus

__all__ = ["SourceWatermarks"]

Events = list[Watermark | WatermarkStatus]


class _Split:
    __slots__ = ("finished", "generator", "output")

    def __init__(self, strategy: WatermarkStrategy, clock: Clock, restored: float | None) -> None:
        self.generator = strategy.create_generator(clock)
        self.output = WatermarkOutput(MIN_WATERMARK if restored is None else restored)
        self.finished = False


class SourceWatermarks:
    """Per-split timestamps and watermarks of one source task (see the module docstring).

    Args:
        strategy: the source's watermark strategy.
        split_ids: the task's splits, in reading order.
        clock: the task clock (idleness).
        restored: split id -> the watermark its checkpoint holds (None: none).
        operator: how errors name the source.
    """

    def __init__(self, strategy: WatermarkStrategy, split_ids: Sequence[str], clock: Clock,
                 restored: dict[str, float | None], operator: str) -> None:
        self.strategy = strategy
        self.clock = clock
        self.operator = operator
        self.splits = {split: _Split(strategy, clock, restored.get(split)) for split in split_ids}
        #: the last watermark emitted (never backwards), and whether idle was the last status
        self.emitted = MIN_WATERMARK
        self.idle = False
        self._last_periodic = clock.now()

    def on_read(self, split_id: str, data: Batch) -> tuple[Batch, Events]:
        """`data` read from `split_id`, stamped; and the events to emit before it (active again)."""
        split = self.splits[split_id]
        if isinstance(data, list):
            data, highest = self.strategy.assign(data, self.operator)
        else:
            data, highest = self.strategy.assign_batch(data, self.operator)
        if highest is not None:
            split.generator.on_event(highest, split.output)
        if self.idle and not split.output.idle:
            self.idle = False
            return data, [WatermarkStatus(False)]
        return data, []

    def split_finished(self, split_id: str) -> None:
        self.splits[split_id].finished = True

    def on_periodic_emit(self, backpressured: bool, reading: str | None = None) -> Events:
        """Ask every split's generator, combine; the events to emit now. `reading`: the split
        the task reads now (the others wait for their turn: their idleness is paused)."""
        now = self.clock.now()
        for split_id, split in self.splits.items():
            if isinstance(split.generator, WatermarksWithIdleness) and (backpressured or split_id != reading):
                split.generator.pause(now - self._last_periodic)
        self._last_periodic = now
        for split in self.splits.values():
            if not split.finished:
                split.generator.on_periodic_emit(split.output)
        return self._combine()

    def end_of_input(self) -> Events:
        """Every split was read: the watermark goes to `+inf`."""
        for split in self.splits.values():
            split.finished = True
        return self._combine()

    def _combine(self) -> Events:
        live = [s.output for s in self.splits.values() if not s.finished]
        if live and all(output.idle for output in live):
            if self.idle:
                return []
            self.idle = True
            return [WatermarkStatus(True)]
        events: Events = []
        active = [output.watermark for output in live if not output.idle]
        combined = min(active) if active else MAX_WATERMARK
        if self.idle:
            self.idle = False
            events.append(WatermarkStatus(False))
        if combined > self.emitted:
            self.emitted = combined
            events.append(Watermark(combined))
        return events

    def snapshot(self) -> dict[str, Any]:
        """Split id -> its watermark, finite or None (what a restore starts the split from)."""
        return {split_id: split.output.watermark if math.isfinite(split.output.watermark) else None
                for split_id, split in self.splits.items()}

    def __repr__(self) -> str:
        return f"SourceWatermarks(emitted={self.emitted}, idle={self.idle}, splits={len(self.splits)})"
