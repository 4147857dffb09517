"""Checkpoint coordination: coordinator, pending/completed checkpoints, stores, ID counters.

Nothing here imports `runtime`, `operators`, ray, pyspark or kazoo (the runtime imports this
package, not the other way round).
"""

from checkpoint.completed import CheckpointMetadataError, CompletedCheckpoint
from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.coordinator_gateway import CoordinatorGateway
from checkpoint.failure_manager import CheckpointFailureLimitError
from checkpoint.handles import StateHandle, TaskAcknowledgement, TaskId
from checkpoint.ids import CheckpointIDCounter, StandaloneCheckpointIDCounter
from checkpoint.io.storage import (
    BlobNotFoundError,
    BlobStore,
    CheckpointStorage,
    CorruptCheckpointError,
    FsBlobStore,
    MemoryBlobStore,
    StorageError,
    storage_from_uri,
)
from checkpoint.io.store import CompletedCheckpointStore, StandaloneCompletedCheckpointStore
from checkpoint.options import CheckpointConfig, CheckpointingMode, InvalidOptionError, RestartStrategy
from checkpoint.pending import AckResult, CheckpointStateError, PendingCheckpoint
from checkpoint.reasons import CheckpointFailureReason
from checkpoint.stats import CheckpointStats, CheckpointStatsSummary, CheckpointStatsTracker

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
    "FsBlobStore",
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
    "storage_from_uri",
]
