"""`TimestampsAndWatermarksOperator`: `stream.assign_timestamps_and_watermarks(strategy)`.

Theory of operation (Flink's `TimestampsAndWatermarksOperator`)
---------------------------------------------------------------
Every record gets its timestamp from the strategy's assigner (`WatermarkStrategy.assign`; a column
assigner keeps Arrow batches vectorised) and the instance's watermark generator sees it. Every
`ctx.auto_watermark_interval` seconds of processing time the operator asks the generator for its
watermark and emits it (or an idle/active status) through the rest of the chain when it changed.
The operator makes the stream's watermarks: it swallows those from upstream, except the `+inf`
of the end of input, which it passes on so everything downstream still fires at the end; it
swallows upstream statuses too (its own idleness is the generator's). Its watermark is not
checkpointed (Flink does not either): a restored instance starts again from `-inf`, which only
ever holds watermarks back.
"""

from __future__ import annotations

import math
from typing import Any

from operators.base import OperatorContext, Record, StreamOperator
from operators.timestamps import MIN_WATERMARK
from operators.watermarks import WatermarkOutput, WatermarkStrategy

__all__ = ["TimestampsAndWatermarksOperator"]


class TimestampsAndWatermarksOperator(StreamOperator):
    """Assigns timestamps and generates watermarks with `strategy` (see the module docstring).

    Raises:
        TypeError: `strategy` is not a `WatermarkStrategy`.
    """

    accepts_columns = True

    def __init__(self, strategy: WatermarkStrategy, name: str = "timestamps/watermarks") -> None:
        if not isinstance(strategy, WatermarkStrategy):
            raise TypeError(f"assign_timestamps_and_watermarks: expected a WatermarkStrategy, got "
                            f"{type(strategy).__name__} {strategy!r}")
        self.strategy = strategy
        self.name = name

    def needs_watermarks(self) -> bool:
        return True

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._generator = self.strategy.create_generator(ctx.clock)
        self._output = WatermarkOutput()
        self._emitted = MIN_WATERMARK
        self._idle = False
        self._interval = ctx.auto_watermark_interval
        periodic = self.strategy.max_out_of_orderness is not None or self.strategy.idleness is not None
        self._service = ctx.processing_time if periodic else None
        if self._service is not None:
            self._service.schedule(self._service.now() + self._interval, self)

    def process_batch(self, records: list[Record]) -> list[Record]:
        out, highest = self.strategy.assign(records, self.name)
        if highest is not None:
            self._generator.on_event(highest, self._output)
        return out

    def process_columns(self, batch: Any) -> Any:
        out, highest = self.strategy.assign_batch(batch, self.name)
        if highest is not None:
            self._generator.on_event(highest, self._output)
        return out

    def on_processing_time(self, now: float) -> list[Any]:
        from runtime.records.messages import Watermark, WatermarkStatus

        self._generator.on_periodic_emit(self._output)
        out: list[Any] = []
        if self._output.idle != self._idle and self._emitted < math.inf:
            self._idle = self._output.idle
            out.append(WatermarkStatus(self._idle))
        if not self._idle and self._output.watermark > self._emitted:
            self._emitted = self._output.watermark
            out.append(Watermark(self._emitted))
        if self._service is not None and self._emitted < math.inf:
            self._service.schedule(now + self._interval, self)
        return out

    def process_watermark(self, watermark: Any) -> list[Any]:
        if watermark.timestamp == math.inf and self._emitted < math.inf:
            from runtime.records.messages import WatermarkStatus

            self._emitted = math.inf
            out: list[Any] = [WatermarkStatus(False)] if self._idle else []
            self._idle = False
            return [*out, watermark]
        return []

    def process_watermark_status(self, status: Any) -> list[Any]:
        return []

    @property
    def current_watermark(self) -> float:
        """The last watermark this instance emitted."""
        return self._emitted
