"""barrierflow runtime: the public API is importable from here (`from runtime import StreamEnvironment`).

The names load lazily (PEP 562 `__getattr__`): `from runtime import X` imports the module that
defines X on first use, so importing any `runtime.*` module (a task on a Ray worker, the pure core
in a test) runs this file without loading the whole API. Type checkers read the imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operators.side_outputs import OutputTag
    from operators.timer_service import TimeDomain
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
    from runtime.api.connected_streams import (
        ConnectedStreams,
        IntervalJoin,
        IntervalJoined,
    )
    from runtime.api.environment import (
        DataStream,
        KeyedStream,
        StreamEnvironment,
    )
    from runtime.api.windowed import WindowedStream
    from runtime.connectors.parquet import (
        ParquetSource,
        ParquetSourceError,
    )
    from runtime.core.barriers import (
        AlignmentStats,
        BarrierAligner,
        BarrierHandler,
        BarrierProtocolError,
        BarrierTracker,
        CheckpointListener,
        UnalignedBarrierHandler,
    )
    from runtime.core.graph import (
        JobGraph,
        JobGraphError,
    )
    from runtime.core.input_gate import CheckpointedInputGate
    from runtime.jobmaster.restore.match import (
        RestoreError,
        StateMismatchError,
    )
    from runtime.jobmaster.result import (
        JobFailedError,
        JobResult,
    )
    from runtime.records.messages import (
        Buffer,
        BufferOrEvent,
        CancelCheckpointMarker,
        CheckpointBarrier,
        CheckpointOptions,
        CheckpointType,
        EndOfPartition,
        RecordConversionError,
        Watermark,
        WatermarkStatus,
    )
    from runtime.records.record_types import RecordTypeError
    from vocabulary.fault_plan import (
        ChannelStall,
        CoordinatorCrash,
        FaultPlan,
        LostAcknowledgement,
        StorageWriteFailure,
        TaskCrash,
    )
    from vocabulary.handles import TaskId
    from vocabulary.options import (
        CheckpointingMode,
        RestartStrategy,
    )
    from vocabulary.reasons import CheckpointFailureReason

#: the module that defines each public name, as the imports above name it
_MODULES: dict[str, tuple[str, ...]] = {
    "operators.side_outputs": ("OutputTag",),
    "operators.timer_service": ("TimeDomain",),
    "operators.watermarks": ("WatermarkStrategy",),
    "operators.windows": (
        "AggregateFunction", "CoGroupFunction", "CountTrigger", "EventTimeSessionWindows", "GlobalWindows",
        "JoinFunction", "ProcessWindowFunction", "PurgingTrigger", "SlidingEventTimeWindows",
        "SlidingProcessingTimeWindows", "TimeWindow", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
        "TumblingProcessingTimeWindows",
    ),
    "runtime.api.connected_streams": ("ConnectedStreams", "IntervalJoin", "IntervalJoined"),
    "runtime.api.environment": ("DataStream", "KeyedStream", "StreamEnvironment"),
    "runtime.api.windowed": ("WindowedStream",),
    "runtime.connectors.parquet": ("ParquetSource", "ParquetSourceError"),
    "runtime.core.barriers": (
        "AlignmentStats", "BarrierAligner", "BarrierHandler", "BarrierProtocolError", "BarrierTracker",
        "CheckpointListener", "UnalignedBarrierHandler",
    ),
    "runtime.core.graph": ("JobGraph", "JobGraphError"),
    "runtime.core.input_gate": ("CheckpointedInputGate",),
    "runtime.jobmaster.restore.match": ("RestoreError", "StateMismatchError"),
    "runtime.jobmaster.result": ("JobFailedError", "JobResult"),
    "runtime.records.messages": (
        "Buffer", "BufferOrEvent", "CancelCheckpointMarker", "CheckpointBarrier", "CheckpointOptions",
        "CheckpointType", "EndOfPartition", "RecordConversionError", "Watermark", "WatermarkStatus",
    ),
    "runtime.records.record_types": ("RecordTypeError",),
    "vocabulary.fault_plan": (
        "ChannelStall", "CoordinatorCrash", "FaultPlan", "LostAcknowledgement", "StorageWriteFailure",
        "TaskCrash",
    ),
    "vocabulary.handles": ("TaskId",),
    "vocabulary.options": ("CheckpointingMode", "RestartStrategy"),
    "vocabulary.reasons": ("CheckpointFailureReason",),
}
_MODULE_OF: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "AggregateFunction",
    "AlignmentStats",
    "BarrierAligner",
    "BarrierHandler",
    "BarrierProtocolError",
    "BarrierTracker",
    "Buffer",
    "BufferOrEvent",
    "CancelCheckpointMarker",
    "ChannelStall",
    "CheckpointBarrier",
    "CheckpointFailureReason",
    "CheckpointListener",
    "CheckpointOptions",
    "CheckpointType",
    "CheckpointedInputGate",
    "CheckpointingMode",
    "CoGroupFunction",
    "ConnectedStreams",
    "CoordinatorCrash",
    "CountTrigger",
    "DataStream",
    "EndOfPartition",
    "EventTimeSessionWindows",
    "FaultPlan",
    "GlobalWindows",
    "IntervalJoin",
    "IntervalJoined",
    "JobFailedError",
    "JobGraph",
    "JobGraphError",
    "JobResult",
    "JoinFunction",
    "KeyedStream",
    "LostAcknowledgement",
    "OutputTag",
    "ParquetSource",
    "ParquetSourceError",
    "ProcessWindowFunction",
    "PurgingTrigger",
    "RecordConversionError",
    "RecordTypeError",
    "RestartStrategy",
    "RestoreError",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "StateMismatchError",
    "StorageWriteFailure",
    "StreamEnvironment",
    "TaskCrash",
    "TaskId",
    "TimeDomain",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "UnalignedBarrierHandler",
    "Watermark",
    "WatermarkStatus",
    "WatermarkStrategy",
    "WindowedStream",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines public `name` and keep the value here (the next lookup of
    `name` does not come back)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
