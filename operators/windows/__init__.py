"""Windows: assigners, triggers, window functions and the window operator (Flink's windowing)."""

from operators.windows.assigners import (
    EventTimeSessionWindows,
    GlobalWindow,
    GlobalWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from operators.windows.functions import AggregateFunction, ProcessWindowFunction
from operators.windows.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
)

__all__ = [
    "AggregateFunction",
    "CountTrigger",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "GlobalWindow",
    "GlobalWindows",
    "NeverTrigger",
    "ProcessWindowFunction",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "WindowAssigner",
]
