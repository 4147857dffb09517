"""`CoordinatorGateway`: everything the checkpoint coordinator does to the rest of the job.

The coordinator is pure; an executor implements this gateway (the simulator in virtual time,
the Ray coordinator actor with real messages) and hands it to `CheckpointCoordinator`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from vocabulary.handles import TaskId
from vocabulary.reasons import CheckpointFailureReason

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint


class CoordinatorGateway(Protocol):
    """Everything the coordinator does to the rest of the job (the executor implements it)."""

    def trigger_source(
        self,
        task_id: TaskId,
        checkpoint_id: int,
        timestamp: float,
        unaligned: bool,
        alignment_timeout: float | None,
        forced_aligned: bool = False,
    ) -> None:
        """Ask a source task to inject barrier `checkpoint_id` (created at `timestamp`);
        `forced_aligned`: every task aligns it, whatever its mode (the final checkpoint)."""
        ...

    def commit_checkpoint(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is durable: commit what every sink staged up to it (Flink's
        global committer). Called once per completed checkpoint (and once for a restored final
        one), before any task is notified of it; a gateway whose process dies here
        (`CoordinatorCrashBeforeNotify`) commits nothing and notifies no task of it."""
        ...

    def notify_complete(self, task_id: TaskId, checkpoint_id: int) -> None: ...

    def notify_aborted(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None: ...

    def fail_job(self, error: Exception) -> None:
        """Too many consecutive checkpoint failures: fail (and maybe restart) the job."""
        ...

    def on_checkpoint_completed(self, completed: CompletedCheckpoint) -> None:
        """Hook after a checkpoint is durable, committed and tasks were notified (landing, executors)."""
        ...
