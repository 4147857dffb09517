"""NexMark Q12, processing-time windows: how many bids each bidder placed per tumbling window of
the task clock (the `nexmark` repo's q12.sql: TUMBLE over PROCTIME(), 10 s). Which window a bid
lands in depends on when it is processed, so there is no SQL answer to compare with; what holds
is that every bid is counted in exactly one window.

The windows fire when the task clock passes their end, as Flink's; a window still open when the
input ends fires then too (`ProcessingTimeOrEndOfInput`), so a bounded run counts every bid.
"""

from __future__ import annotations

import sys
from typing import Any

from operators.windows import ProcessingTimeTrigger, TriggerResult
from runtime import TumblingProcessingTimeWindows
from runtime.api.environment import DataStream
from runtime.workloads.nexmark.q11 import BidsPerWindow, Count

SIZE_S = 10.0
#: an event-time timer the final watermark (+inf) passes, and no earlier one
END_OF_INPUT = sys.float_info.max


class ProcessingTimeOrEndOfInput(ProcessingTimeTrigger):
    """Fires once the task clock passed the window's end, or when the input ends before that."""

    def on_element(self, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        ctx.register_event_time_timer(END_OF_INPUT)
        return super().on_element(timestamp, window, ctx)

    def on_event_time(self, time: Any, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if time == END_OF_INPUT else TriggerResult.CONTINUE

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_event_time_timer(END_OF_INPUT)
        super().clear(window, ctx)


def build(events: DataStream, size: float = SIZE_S) -> DataStream:
    """Bids per bidder and `size` seconds of the task clock. The events carry event time (the
    source's) only so that the end of input reaches the windows (as the final watermark)."""
    return (events.filter(lambda e: e["kind"] == "bid", name="q12-bids").key_by("bidder")
            .window(TumblingProcessingTimeWindows.of(size)).trigger(ProcessingTimeOrEndOfInput())
            .aggregate(Count(), BidsPerWindow(), name="q12"))
