"""Operators: sources, stateless transformations, keyed operators and sinks (all pure)."""

from operators.base import OperatorContext, OperatorError, StreamOperator
from operators.co_process import CoFlatMapFunction, CoMapFunction, CoProcessFunction, KeyedCoProcessFunction
from operators.interval_join import ProcessJoinFunction
from operators.keyed import KeyedContext, KeyedProcessFunction
from operators.side_outputs import OutputTag
from operators.sinks import CollectSink, DiscardingSink, Sink
from operators.sources import CollectionSource, GeneratorSource, Source, SourceSplit, SplitReader
from operators.timer_service import TimeDomain, TimerService
from operators.watermarks import WatermarkStrategy
from operators.windows import (
    AggregateFunction,
    CoGroupFunction,
    CountTrigger,
    EventTimeSessionWindows,
    GlobalWindows,
    JoinFunction,
    ProcessWindowFunction,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

__all__ = [
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "AggregateFunction",
    "CoGroupFunction",
    "CollectSink",
    "DiscardingSink",
    "CollectionSource",
    "CountTrigger",
    "EventTimeSessionWindows",
    "GeneratorSource",
    "KeyedCoProcessFunction",
    "GlobalWindows",
    "JoinFunction",
    "KeyedContext",
    "KeyedProcessFunction",
    "OperatorContext",
    "OperatorError",
    "OutputTag",
    "ProcessJoinFunction",
    "ProcessWindowFunction",
    "PurgingTrigger",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "Sink",
    "Source",
    "SourceSplit",
    "SplitReader",
    "StreamOperator",
    "TimeDomain",
    "TimeWindow",
    "TimerService",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "WatermarkStrategy",
]
