"""Identifiers and handles shared by tasks, the coordinator and the stores.

`checkpoint` sits below `runtime` in the layering: nothing in this package imports `runtime`,
so plain values (ids, paths, numbers) cross the boundary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class TaskId(NamedTuple):
    """One parallel instance (`subtask`) of a job vertex.

    A named tuple: the simulator hashes and compares task ids millions of times a run, which a
    tuple does in C (its hash and order are those of `(vertex, subtask)`)."""

    vertex: str
    subtask: int

    def __str__(self) -> str:
        return f"{self.vertex}[{self.subtask}]"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        vertex, _, rest = text.rpartition("[")
        if not vertex or not rest.endswith("]"):
            raise ValueError(f"not a task id: {text!r}")
        return cls(vertex, int(rest[:-1]))


@dataclass(frozen=True, slots=True)
class StateHandle:
    """A written piece of state: where it is, how big, and its checksum (verified on restore).

    `offset`/`length` address a segment inside a shared physical file (file merging); a
    handle for a whole file has offset 0 and length == size. `key` is the logical id of a
    piece of state the shared-state registry counts references to (incremental checkpoints);
    None for state owned by one checkpoint.
    """

    path: str
    size: int
    checksum: str
    offset: int = 0
    length: int | None = None
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "size": self.size,
            "checksum": self.checksum,
            "offset": self.offset,
            "length": self.length,
        }
        if self.key is not None:  # absent when unset, so older metadata keeps its checksum
            data["key"] = self.key
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StateHandle:
        return cls(data["path"], int(data["size"]), data["checksum"], int(data.get("offset", 0)),
                   data.get("length"), data.get("key"))


@dataclass(frozen=True, slots=True)
class TaskAcknowledgement:
    """What a task reports for one checkpoint: its state handles and its own stats.

    `handles` maps a kind ("keyed", "operator", "input_channels", "output_channels") to the
    handles written for it; a task without state of a kind omits it.

    The task's phases, in seconds, with Flink's names (they add up to the time from the trigger
    to this acknowledgement): `start_delay` (trigger to the first barrier the task took),
    `alignment_duration` (first barrier to the last one; for an unaligned checkpoint the time it
    kept persisting the in-flight data the barriers overtook, which does not block),
    `sync_duration` (the synchronous snapshot) and `async_duration` (the write).
    `processed_data`: bytes the task processed during the alignment. `async_cpu`: CPU seconds the
    write spent (serialising and writing, on the writer thread; 0 where not measured).
    """

    task_id: TaskId
    checkpoint_id: int
    handles: dict[str, tuple[StateHandle, ...]] = field(default_factory=dict)
    state_bytes: int = 0
    persisted_bytes: int = 0
    alignment_time: float = 0.0
    bytes_buffered: int = 0
    unaligned: bool = False
    sync_duration: float = 0.0
    async_duration: float = 0.0
    start_delay: float = 0.0
    alignment_duration: float = 0.0
    processed_data: int = 0
    async_cpu: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": str(self.task_id),
            "checkpoint_id": self.checkpoint_id,
            "handles": {k: [h.to_json() for h in hs] for k, hs in sorted(self.handles.items())},
            "state_bytes": self.state_bytes,
            "persisted_bytes": self.persisted_bytes,
            "alignment_time": self.alignment_time,
            "bytes_buffered": self.bytes_buffered,
            "unaligned": self.unaligned,
            "sync_duration": self.sync_duration,
            "async_duration": self.async_duration,
            "start_delay": self.start_delay,
            "alignment_duration": self.alignment_duration,
            "processed_data": self.processed_data,
            "async_cpu": self.async_cpu,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskAcknowledgement:
        return cls(
            task_id=TaskId.parse(data["task_id"]),
            checkpoint_id=int(data["checkpoint_id"]),
            handles={k: tuple(StateHandle.from_json(h) for h in hs) for k, hs in data["handles"].items()},
            state_bytes=int(data.get("state_bytes", 0)),
            persisted_bytes=int(data.get("persisted_bytes", 0)),
            alignment_time=float(data.get("alignment_time", 0.0)),
            bytes_buffered=int(data.get("bytes_buffered", 0)),
            unaligned=bool(data.get("unaligned", False)),
            sync_duration=float(data.get("sync_duration", 0.0)),
            async_duration=float(data.get("async_duration", 0.0)),
            start_delay=float(data.get("start_delay", 0.0)),
            alignment_duration=float(data.get("alignment_duration", 0.0)),
            processed_data=int(data.get("processed_data", 0)),
            async_cpu=float(data.get("async_cpu", 0.0)),
        )


def check_task_lists(
    source_tasks: Iterable[TaskId], all_tasks: Iterable[TaskId]
) -> tuple[tuple[TaskId, ...], tuple[TaskId, ...]]:
    """The checkpoint coordinator's source and all tasks, sorted.

    Raises:
        ValueError: a list is empty, holds something other than a `TaskId`, repeats a task, or
            names a source outside `all_tasks`.
    """
    sources = list(source_tasks)
    tasks = list(all_tasks)
    for name, items in (("source_tasks", sources), ("all_tasks", tasks)):
        if not items:
            raise ValueError(f"checkpoint coordinator needs at least one task in {name}")
        bad = [t for t in items if not isinstance(t, TaskId)]
        if bad:
            raise ValueError(f"{name} must hold TaskIds, got {bad[0]!r}")
        if len(set(items)) != len(items):
            dupes = sorted({t for t in items if items.count(t) > 1})
            raise ValueError(f"{name} repeats {', '.join(map(str, dupes))}")
    outside = sorted(set(sources) - set(tasks))
    if outside:
        raise ValueError(f"source tasks {', '.join(map(str, outside))} are not in all_tasks")
    return tuple(sorted(sources)), tuple(sorted(tasks))
