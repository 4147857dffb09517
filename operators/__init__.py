"""Operators: sources, stateless transformations, keyed operators and sinks (all pure)."""

from operators.base import OperatorContext, OperatorError, StreamOperator
from operators.co_process import CoFlatMapFunction, CoMapFunction, CoProcessFunction, KeyedCoProcessFunction
from operators.interval_join import ProcessJoinFunction
from operators.keyed import KeyedContext, KeyedProcessFunction
from operators.side_outputs import OutputTag
from operators.sinks import CollectSink
from operators.sources import CollectionSource, GeneratorSource, Source, SourceSplit, SplitReader
from operators.timer_service import TimeDomain, TimerService
from operators.watermarks import WatermarkStrategy

__all__ = [
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "CollectSink",
    "CollectionSource",
    "GeneratorSource",
    "KeyedCoProcessFunction",
    "KeyedContext",
    "KeyedProcessFunction",
    "OperatorContext",
    "OperatorError",
    "OutputTag",
    "ProcessJoinFunction",
    "Source",
    "SourceSplit",
    "SplitReader",
    "StreamOperator",
    "TimeDomain",
    "TimerService",
    "WatermarkStrategy",
]
