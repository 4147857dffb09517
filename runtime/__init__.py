"""barrierflow runtime: the public API is importable from here."""

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
from runtime.api.connected_streams import ConnectedStreams, IntervalJoin, IntervalJoined
from runtime.api.environment import DataStream, KeyedStream, StreamEnvironment
from runtime.api.windowed import WindowedStream
from runtime.connectors.parquet import ParquetSource, ParquetSourceError
from runtime.core.barriers import (
    AlignmentStats,
    BarrierAligner,
    BarrierHandler,
    BarrierProtocolError,
    BarrierTracker,
    CheckpointListener,
    UnalignedBarrierHandler,
)
from runtime.core.graph import JobGraph, JobGraphError
from runtime.core.input_gate import CheckpointedInputGate
from runtime.jobmaster.restore.match import RestoreError, StateMismatchError
from runtime.jobmaster.result import JobFailedError, JobResult
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
from vocabulary.options import CheckpointingMode, RestartStrategy
from vocabulary.reasons import CheckpointFailureReason

__all__ = [
    "AggregateFunction",
    "CoGroupFunction",
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
    "ConnectedStreams",
    "CoordinatorCrash",
    "CountTrigger",
    "DataStream",
    "EndOfPartition",
    "EventTimeSessionWindows",
    "FaultPlan",
    "IntervalJoin",
    "IntervalJoined",
    "GlobalWindows",
    "JoinFunction",
    "JobFailedError",
    "JobGraph",
    "JobGraphError",
    "JobResult",
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
