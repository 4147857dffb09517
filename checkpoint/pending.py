"""A triggered checkpoint collecting acknowledgements (Flink's `PendingCheckpoint`).

Theory of operation
-------------------
A pending checkpoint knows the tasks that still have to acknowledge (`tasks_to_ack`) and the
acknowledgements received. It moves through three states and never back::

    PENDING --finalize()--> FINALIZED --abort()--> ABORTED   (storing the metadata failed)
    PENDING --abort()-----> ABORTED

Only a PENDING checkpoint accepts acknowledgements; anything else answers `DISCARDED`, which is
how late acks for an aborted checkpoint are recognised. The coordinator owns the timers and the
notifications; this class is only the bookkeeping, with no clock of its own (times are passed in).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from checkpoint.completed import CompletedCheckpoint
from vocabulary.handles import TaskAcknowledgement, TaskId
from vocabulary.reasons import CheckpointFailureReason


class AckResult(enum.Enum):
    """What `PendingCheckpoint.acknowledge` did with an acknowledgement."""

    SUCCESS = "success"
    #: the task had already acknowledged this checkpoint
    DUPLICATE = "duplicate"
    #: the task is not one this checkpoint waits for
    UNKNOWN_TASK = "unknown task"
    #: the checkpoint is no longer pending (finalized or aborted)
    DISCARDED = "discarded"


class PendingStatus(enum.Enum):
    PENDING = "pending"
    FINALIZED = "finalized"
    ABORTED = "aborted"


class CheckpointStateError(RuntimeError):
    """An operation that the pending checkpoint's state does not allow (a coordinator bug)."""


class PendingCheckpoint:
    """Bookkeeping of one triggered checkpoint.

    Args:
        checkpoint_id: the id given by the ID counter.
        trigger_time: clock time of the trigger (seconds).
        tasks_to_ack: every task that must acknowledge before the checkpoint completes.
        job_id: the job (copied into the completed checkpoint).
        properties: JSON-representable options of this checkpoint (e.g. ``{"unaligned": True}``).
    """

    __slots__ = (
        "checkpoint_id",
        "trigger_time",
        "job_id",
        "properties",
        "_tasks",
        "_not_yet_acknowledged",
        "_acks",
        "_ack_times",
        "_status",
        "_failure_reason",
        "_end_time",
    )

    def __init__(
        self,
        checkpoint_id: int,
        trigger_time: float,
        tasks_to_ack: Iterable[TaskId],
        *,
        job_id: str = "",
        properties: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(checkpoint_id, int) or checkpoint_id < 1:
            raise ValueError(f"checkpoint id must be an integer >= 1, got {checkpoint_id!r}")
        self.checkpoint_id = checkpoint_id
        self.trigger_time = trigger_time
        self.job_id = job_id
        self.properties: dict[str, Any] = dict(properties or {})
        self._tasks: tuple[TaskId, ...] = tuple(sorted(set(tasks_to_ack)))
        self._not_yet_acknowledged: set[TaskId] = set(self._tasks)
        self._acks: dict[TaskId, TaskAcknowledgement] = {}
        self._ack_times: dict[TaskId, float] = {}
        self._status = PendingStatus.PENDING
        self._failure_reason: CheckpointFailureReason | None = None
        self._end_time: float | None = None

    # -- queries -------------------------------------------------------------------------------

    @property
    def status(self) -> PendingStatus:
        return self._status

    @property
    def tasks(self) -> tuple[TaskId, ...]:
        """Every task this checkpoint waits for, sorted."""
        return self._tasks

    @property
    def not_yet_acknowledged(self) -> list[TaskId]:
        return sorted(self._not_yet_acknowledged)

    @property
    def acks(self) -> dict[TaskId, TaskAcknowledgement]:
        """Acknowledgements received so far, in task order (a copy)."""
        return {t: self._acks[t] for t in sorted(self._acks)}

    @property
    def ack_times(self) -> dict[TaskId, float]:
        """Clock time at which each acknowledgement arrived, in task order (a copy)."""
        return {t: self._ack_times[t] for t in sorted(self._ack_times)}

    @property
    def num_acknowledged(self) -> int:
        return len(self._acks)

    @property
    def num_tasks(self) -> int:
        return len(self._tasks)

    @property
    def is_fully_acknowledged(self) -> bool:
        return not self._not_yet_acknowledged

    @property
    def is_disposed(self) -> bool:
        return self._status is not PendingStatus.PENDING

    @property
    def failure_reason(self) -> CheckpointFailureReason | None:
        return self._failure_reason

    @property
    def end_time(self) -> float | None:
        """When it was finalized or aborted (None while pending)."""
        return self._end_time

    # -- transitions ---------------------------------------------------------------------------

    def acknowledge(self, ack: TaskAcknowledgement, now: float) -> AckResult:
        """Record one task's acknowledgement.

        Returns:
            SUCCESS, DUPLICATE, UNKNOWN_TASK, or DISCARDED when no longer pending.

        Raises:
            ValueError: the acknowledgement is for another checkpoint (routing bug).
        """
        if ack.checkpoint_id != self.checkpoint_id:
            raise ValueError(
                f"acknowledgement from {ack.task_id} for checkpoint {ack.checkpoint_id} "
                f"delivered to checkpoint {self.checkpoint_id}"
            )
        if self._status is not PendingStatus.PENDING:
            return AckResult.DISCARDED
        if ack.task_id not in self._not_yet_acknowledged:
            return AckResult.DUPLICATE if ack.task_id in self._acks else AckResult.UNKNOWN_TASK
        self._not_yet_acknowledged.discard(ack.task_id)
        self._acks[ack.task_id] = ack
        self._ack_times[ack.task_id] = now
        return AckResult.SUCCESS

    def finalize(self, now: float) -> CompletedCheckpoint:
        """Turn a fully acknowledged checkpoint into a `CompletedCheckpoint`.

        Raises:
            CheckpointStateError: not pending, or some task has not acknowledged yet.
        """
        if self._status is not PendingStatus.PENDING:
            raise CheckpointStateError(f"checkpoint {self.checkpoint_id} is {self._status.value}, cannot finalize")
        if self._not_yet_acknowledged:
            missing = ", ".join(str(t) for t in self.not_yet_acknowledged)
            raise CheckpointStateError(f"checkpoint {self.checkpoint_id} still waits for {missing}")
        self._status = PendingStatus.FINALIZED
        self._end_time = now
        return CompletedCheckpoint(
            job_id=self.job_id,
            checkpoint_id=self.checkpoint_id,
            trigger_time=self.trigger_time,
            completion_time=now,
            acks=self.acks,
            properties=dict(self.properties),
        )

    def abort(self, reason: CheckpointFailureReason, now: float | None = None) -> None:
        """Abort with `reason` (also valid after `finalize()` when storing it failed).

        Raises:
            CheckpointStateError: it was already aborted.
        """
        if not isinstance(reason, CheckpointFailureReason):
            raise TypeError(f"abort reason must be a CheckpointFailureReason, got {reason!r}")
        if self._status is PendingStatus.ABORTED:
            raise CheckpointStateError(
                f"checkpoint {self.checkpoint_id} was already aborted ({self._failure_reason.value})"  # type: ignore[union-attr]
            )
        self._status = PendingStatus.ABORTED
        self._failure_reason = reason
        if now is not None:
            self._end_time = now

    def __repr__(self) -> str:
        return (
            f"PendingCheckpoint(id={self.checkpoint_id}, status={self._status.value}, "
            f"acked={len(self._acks)}/{len(self._tasks)})"
        )
