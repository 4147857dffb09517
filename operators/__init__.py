"""Operators: sources, stateless transformations, keyed operators and sinks (all pure)."""

from operators.base import OperatorContext, OperatorError, StreamOperator
from operators.keyed import KeyedContext, KeyedProcessFunction
from operators.sinks import CollectSink
from operators.sources import CollectionSource, GeneratorSource, Source, SourceSplit, SplitReader

__all__ = [
    "CollectSink",
    "CollectionSource",
    "GeneratorSource",
    "KeyedContext",
    "KeyedProcessFunction",
    "OperatorContext",
    "OperatorError",
    "Source",
    "SourceSplit",
    "SplitReader",
    "StreamOperator",
]
