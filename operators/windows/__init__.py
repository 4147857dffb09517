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
from operators.windows.functions import (
    AggregateFunction,
    CoGroupFunction,
    JoinFunction,
    ProcessWindowFunction,
)
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
    "CoGroupFunction",
    "CountTrigger",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "GlobalWindow",
    "GlobalWindows",
    "JoinFunction",
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
