"""Checkpoint coordination: coordinator, pending/completed checkpoints, stores, ID counters.

Nothing here imports `runtime`, `operators`, ray, pyspark or kazoo (the runtime imports this
package, not the other way round), nor `checkpoint.io`: storage is reached through the ports of
`checkpoint.storage` (`BlobStore`), which `checkpoint.io` implements on real filesystems.
"""

from checkpoint.completed import CheckpointMetadataError, CompletedCheckpoint
from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.coordinator_gateway import CoordinatorGateway
from checkpoint.failure_manager import CheckpointFailureLimitError
from checkpoint.ids import CheckpointIDCounter, StandaloneCheckpointIDCounter
from checkpoint.pending import AckResult, CheckpointStateError, PendingCheckpoint
from checkpoint.stats import CheckpointStats, CheckpointStatsSummary, CheckpointStatsTracker
from checkpoint.storage.layout import (
    BlobNotFoundError,
    BlobStore,
    CheckpointStorage,
    CorruptCheckpointError,
    MemoryBlobStore,
    StorageError,
)
from checkpoint.storage.store import CompletedCheckpointStore, StandaloneCompletedCheckpointStore
from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId
from vocabulary.options import CheckpointConfig, CheckpointingMode, InvalidOptionError, RestartStrategy
from vocabulary.reasons import CheckpointFailureReason

__all__ = [
    "AckResult",
    "BlobNotFoundError",
    "BlobStore",
    "CheckpointConfig",
    "CheckpointCoordinator",
    "CheckpointFailureLimitError",
    "CheckpointFailureReason",
    "CheckpointIDCounter",
    "CheckpointMetadataError",
    "CheckpointStateError",
    "CheckpointStats",
    "CheckpointStatsSummary",
    "CheckpointStatsTracker",
    "CheckpointStorage",
    "CheckpointingMode",
    "CompletedCheckpoint",
    "CompletedCheckpointStore",
    "CoordinatorGateway",
    "CorruptCheckpointError",
    "InvalidOptionError",
    "MemoryBlobStore",
    "PendingCheckpoint",
    "RestartStrategy",
    "StandaloneCheckpointIDCounter",
    "StandaloneCompletedCheckpointStore",
    "StateHandle",
    "StorageError",
    "TaskAcknowledgement",
    "TaskId",
]
