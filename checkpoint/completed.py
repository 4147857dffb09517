"""A completed checkpoint: every task acknowledged, metadata ready to be made durable.

A `CompletedCheckpoint` is a value: the job, the id, when it was triggered and completed, and each
task's `TaskAcknowledgement` (state handles + task stats). `to_json()`/`from_json()` are its
metadata format (the store writes it through `CheckpointStorage`); `metadata_path` is filled in by
the store once the metadata is durable and takes no part in equality.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId


class CheckpointMetadataError(ValueError):
    """Checkpoint metadata is malformed (a missing or mistyped field)."""


#: the metadata property naming the run that took a checkpoint (`checkpoint.storage.store` stamps it)
RUN_ID_PROPERTY = "run_id"


@dataclass(eq=True, slots=True)
class CompletedCheckpoint:
    """A checkpoint that every task acknowledged.

    Attributes:
        job_id: the job it belongs to.
        checkpoint_id: its id (strictly increasing per job).
        trigger_time: seconds (clock time) at which the coordinator triggered it.
        completion_time: seconds at which the last acknowledgement arrived.
        acks: each task's acknowledgement, keyed and ordered by task id.
        properties: JSON-representable extras (mode, unaligned, ...).
        metadata_path: where the store wrote its metadata (None until stored).
    """

    job_id: str
    checkpoint_id: int
    trigger_time: float
    completion_time: float
    acks: dict[TaskId, TaskAcknowledgement]
    properties: dict[str, Any] = field(default_factory=dict)
    metadata_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.acks = {t: self.acks[t] for t in sorted(self.acks)}
        for task, ack in self.acks.items():
            if ack.task_id != task or ack.checkpoint_id != self.checkpoint_id:
                raise ValueError(
                    f"acknowledgement of {ack.task_id} for checkpoint {ack.checkpoint_id} filed under "
                    f"{task} in checkpoint {self.checkpoint_id}"
                )

    @property
    def duration(self) -> float:
        return self.completion_time - self.trigger_time

    @property
    def state_bytes(self) -> int:
        """Sum of every task's state size."""
        return sum(a.state_bytes for a in self.acks.values())

    @property
    def persisted_bytes(self) -> int:
        """Sum of every task's persisted in-flight (channel) state."""
        return sum(a.persisted_bytes for a in self.acks.values())

    @property
    def task_ids(self) -> list[TaskId]:
        return list(self.acks)

    @property
    def run_id(self) -> str | None:
        """The run that took it (None: not recorded)."""
        run = self.properties.get(RUN_ID_PROPERTY)
        return run if isinstance(run, str) else None

    @property
    def parallelism(self) -> dict[str, int]:
        """Operator (job vertex) -> how many subtasks it had when this checkpoint was taken."""
        counts: dict[str, int] = {}
        for task in self.acks:
            counts[task.vertex] = max(counts.get(task.vertex, 0), task.subtask + 1)
        return counts

    def task_state(self, task_id: TaskId) -> TaskAcknowledgement:
        """The acknowledgement (state handles) of one task.

        Raises:
            KeyError: the task is not part of this checkpoint (the message names both).
        """
        try:
            return self.acks[task_id]
        except KeyError:
            raise KeyError(f"task {task_id} has no state in checkpoint {self.checkpoint_id}") from None

    def state_handles(self) -> Iterator[StateHandle]:
        """Every state handle, in task order then kind order."""
        for ack in self.acks.values():
            for kind in sorted(ack.handles):
                yield from ack.handles[kind]

    def referenced_paths(self) -> list[str]:
        """Distinct paths of the files this checkpoint's state lives in, sorted."""
        return sorted({h.path for h in self.state_handles()})

    def to_json(self) -> dict[str, Any]:
        """The metadata body (plain JSON types only)."""
        return {
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "trigger_time": self.trigger_time,
            "completion_time": self.completion_time,
            "acks": [a.to_json() for a in self.acks.values()],
            "properties": dict(self.properties),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompletedCheckpoint:
        """Rebuild from `to_json()` output.

        Raises:
            CheckpointMetadataError: a field is missing or has the wrong type.
        """
        try:
            acks = [TaskAcknowledgement.from_json(a) for a in data["acks"]]
            properties = data.get("properties", {})
            if not isinstance(properties, dict):
                raise TypeError("properties must be an object")
            checkpoint = cls(
                job_id=_typed(data, "job_id", str),
                checkpoint_id=_typed(data, "checkpoint_id", int),
                trigger_time=float(_typed(data, "trigger_time", int | float)),
                completion_time=float(_typed(data, "completion_time", int | float)),
                acks={a.task_id: a for a in acks},
                properties=dict(properties),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointMetadataError(f"malformed checkpoint metadata: {exc!r}") from exc
        if len(checkpoint.acks) != len(acks):
            raise CheckpointMetadataError("malformed checkpoint metadata: a task acknowledged twice")
        return checkpoint

    def to_json_bytes(self) -> bytes:
        """Canonical JSON encoding of `to_json()` (sorted keys, no whitespace)."""
        return canonical_json(self.to_json())

    def __repr__(self) -> str:
        return (
            f"CompletedCheckpoint(job={self.job_id!r}, id={self.checkpoint_id}, tasks={len(self.acks)}, "
            f"state_bytes={self.state_bytes}, persisted_bytes={self.persisted_bytes})"
        )


def canonical_json(value: Any) -> bytes:
    """One byte encoding per JSON value, so a checksum over it is reproducible."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode(
        "ascii"
    )


def _typed(data: Mapping[str, Any], key: str, kind: Any) -> Any:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{key} has the wrong type: {value!r}")
    return value
