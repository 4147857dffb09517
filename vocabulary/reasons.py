"""Why a checkpoint did not complete. Every abort carries one of these."""

from __future__ import annotations

import enum


class CheckpointFailureReason(enum.Enum):
    """Reasons a checkpoint is aborted, named after Flink's `CheckpointFailureReason`."""

    #: a newer checkpoint's barrier arrived before this one completed (or a newer one completed)
    SUBSUMED = "subsumed"
    #: not complete within `timeout`
    TIMEOUT = "timeout"
    #: a task declined it (for example it was not running, or it had finished)
    DECLINED = "declined"
    #: an upstream task cancelled it (`CancelCheckpointMarker`)
    CANCELLED = "cancelled"
    #: barrier alignment held more bytes than allowed
    ALIGNMENT_BUFFER_FULL = "alignment buffer full"
    #: writing task state or checkpoint metadata failed
    STORAGE_FAILURE = "storage failure"
    #: a task failed while the checkpoint was pending (global failover)
    TASK_FAILURE = "task failure"
    #: the coordinator was shut down or failed over
    COORDINATOR_SHUTDOWN = "coordinator shutdown"
    #: an acknowledgement was lost, so the checkpoint cannot complete (ends as TIMEOUT in practice)
    ACK_LOST = "acknowledgement lost"
    #: a channel ended (EndOfPartition) before the barrier and no inputs remain open
    INPUT_FINISHED = "input finished"
    #: too many concurrent checkpoints / min pause not respected (trigger refused)
    TOO_MANY_CHECKPOINTS = "too many concurrent checkpoints"
    MIN_PAUSE = "minimum pause not elapsed"
    #: the job finished or failed before it could complete
    JOB_FINISHED = "job finished"

    @property
    def counts_as_failure(self) -> bool:
        """Whether this reason counts against `tolerable_failures` (Flink does not count
        subsumption, cancellation by the coordinator, or refused triggers)."""
        return self in _COUNTED


_COUNTED = frozenset(
    {
        CheckpointFailureReason.TIMEOUT,
        CheckpointFailureReason.DECLINED,
        CheckpointFailureReason.ALIGNMENT_BUFFER_FULL,
        CheckpointFailureReason.STORAGE_FAILURE,
        CheckpointFailureReason.ACK_LOST,
    }
)
