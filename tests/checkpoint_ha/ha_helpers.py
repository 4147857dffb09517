"""Helpers for the in-memory HA tests."""

from __future__ import annotations

from checkpoint.completed import CompletedCheckpoint
from checkpoint.storage.layout import CheckpointStorage
from vocabulary.handles import TaskAcknowledgement, TaskId

JOB = "pv"


def make_checkpoint(storage: CheckpointStorage, checkpoint_id: int, job_id: str = JOB) -> CompletedCheckpoint:
    """A one-task checkpoint whose state file is written through `storage`."""
    task = TaskId("count", 0)
    handle = storage.write_task_file(job_id, checkpoint_id, "count-0.state", f"state-{checkpoint_id}".encode())
    ack = TaskAcknowledgement(task, checkpoint_id, {"keyed": (handle,)}, state_bytes=handle.size)
    return CompletedCheckpoint(job_id, checkpoint_id, float(checkpoint_id), checkpoint_id + 0.5, {task: ack})


def ids(checkpoints) -> list[int]:
    return [c.checkpoint_id for c in checkpoints]
