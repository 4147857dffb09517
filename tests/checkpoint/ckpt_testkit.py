"""Test doubles for the checkpoint tests: a recording gateway, a coordinator factory, and a blob
store that fails writes on demand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from checkpoint.completed import CompletedCheckpoint
from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.ids import StandaloneCheckpointIDCounter
from checkpoint.storage.layout import (
    BlobStore,
    CheckpointStorage,
    ForwardingBlobStore,
    MemoryBlobStore,
    StorageError,
)
from checkpoint.storage.store import StandaloneCompletedCheckpointStore
from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId
from vocabulary.options import CheckpointConfig
from vocabulary.ports import ManualClock, ManualTimers
from vocabulary.reasons import CheckpointFailureReason

JOB = "job-1"
SRC = [TaskId("src", 0), TaskId("src", 1)]
SINK = TaskId("sink", 0)
TASKS = [*SRC, SINK]


class RecordingGateway:
    """Records every call, in order. `events` holds compact tuples for assertions."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.failures: list[Exception] = []
        self.completed: list[CompletedCheckpoint] = []
        self.triggers: list[tuple[TaskId, int, float, bool, float | None]] = []
        #: checkpoint id -> whether its triggers were forced aligned
        self.forced_aligned: dict[int, bool] = {}

    def trigger_source(
        self, task_id: TaskId, checkpoint_id: int, timestamp: float, unaligned: bool, alignment_timeout: float | None,
        forced_aligned: bool = False,
    ) -> None:
        self.triggers.append((task_id, checkpoint_id, timestamp, unaligned, alignment_timeout))
        self.forced_aligned[checkpoint_id] = forced_aligned
        self.events.append(("trigger", str(task_id), checkpoint_id))

    def commit_checkpoint(self, checkpoint_id: int) -> None:
        self.events.append(("commit", checkpoint_id))

    def notify_complete(self, task_id: TaskId, checkpoint_id: int) -> None:
        self.events.append(("complete", str(task_id), checkpoint_id))

    def notify_aborted(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.events.append(("abort", str(task_id), checkpoint_id, reason))

    def fail_job(self, error: Exception) -> None:
        self.failures.append(error)
        self.events.append(("fail_job",))

    def on_checkpoint_completed(self, completed: CompletedCheckpoint) -> None:
        self.completed.append(completed)
        self.events.append(("completed", completed.checkpoint_id))

    # -- views --

    def triggered_ids(self) -> list[int]:
        return sorted({cid for _, cid, *_ in self.triggers})

    def completed_ids(self) -> list[int]:
        return [c.checkpoint_id for c in self.completed]

    def committed_ids(self) -> list[int]:
        """Checkpoint ids in the order they were committed (`commit_checkpoint`), repeats kept."""
        return [e[1] for e in self.events if e[0] == "commit"]

    def aborted(self) -> dict[int, CheckpointFailureReason]:
        """checkpoint id -> reason (one entry per aborted checkpoint)."""
        return {e[2]: e[3] for e in self.events if e[0] == "abort"}

    def outcome(self) -> list[int]:
        """Flink-style compact outcome: +id completed, -id aborted, in order of the event."""
        seen: list[int] = []
        for e in self.events:
            if e[0] == "completed":
                seen.append(e[1])
            elif e[0] == "abort" and -e[2] not in seen:
                seen.append(-e[2])
        return seen


@dataclass
class Harness:
    coordinator: CheckpointCoordinator
    clock: ManualClock
    timers: ManualTimers
    gateway: RecordingGateway
    store: StandaloneCompletedCheckpointStore
    storage: CheckpointStorage
    counter: Any
    tasks: list[TaskId] = field(default_factory=lambda: list(TASKS))

    def advance(self, seconds: float) -> None:
        self.timers.advance(seconds)

    def ack(self, task: TaskId, checkpoint_id: int, *, write: bool = True, **stats: Any):
        handles: dict[str, tuple[StateHandle, ...]] = {}
        if write:
            handle = self.storage.write_task_file(
                JOB, checkpoint_id, f"{task}/keyed.arrow", f"{task}@{checkpoint_id}".encode()
            )
            handles = {"keyed": (handle,)}
        return self.coordinator.receive_acknowledge(TaskAcknowledgement(task, checkpoint_id, handles, **stats))

    def ack_all(self, checkpoint_id: int, tasks: list[TaskId] | None = None) -> None:
        for task in tasks if tasks is not None else self.tasks:
            self.ack(task, checkpoint_id)


def make_harness(config: CheckpointConfig | None = None, *, blob_store: Any = None,
                 id_counter: Any = None, **kwargs: Any) -> Harness:
    """A coordinator over manual time; `id_counter(storage)` builds its id counter (default: in memory)."""
    config = config or CheckpointConfig(interval=1.0, timeout=10.0)
    clock = ManualClock()
    timers = ManualTimers(clock)
    gateway = RecordingGateway()
    storage = CheckpointStorage(blob_store if blob_store is not None else MemoryBlobStore())
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=config.retained)
    counter = id_counter(storage) if id_counter is not None else StandaloneCheckpointIDCounter()
    coordinator = CheckpointCoordinator(
        JOB,
        config,
        clock=clock,
        timers=timers,
        gateway=gateway,
        store=store,
        id_counter=counter,
        source_tasks=SRC,
        all_tasks=TASKS,
        storage=storage,
        **kwargs,
    )
    return Harness(coordinator, clock, timers, gateway, store, storage, counter)


class FailingBlobStore(ForwardingBlobStore):
    """Wraps a blob store and makes writes fail on demand (storage fault injection).

    `fail_writes(count, matching=...)` makes the next `count` writes (None: every write until
    `heal()`) whose path contains `matching` raise `StorageError`; reads and deletes pass through.
    """

    def __init__(self, inner: BlobStore) -> None:
        super().__init__(inner)
        self._remaining: int | None = 0
        self._matching: str | None = None
        self.num_failed_writes = 0
        #: called with the path of every write made to fail, when it fails
        self.on_failure: Callable[[str], None] | None = None

    def fail_writes(self, count: int | None = None, *, matching: str | None = None) -> None:
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0 or None, got {count!r}")
        self._remaining = count
        self._matching = matching

    def heal(self) -> None:
        self._remaining = 0
        self._matching = None

    @property
    def failing(self) -> bool:
        return self._remaining is None or self._remaining > 0

    def put(self, path: str, data: bytes) -> None:
        if self.failing and (self._matching is None or self._matching in path):
            if self._remaining is not None:
                self._remaining -= 1
            self.num_failed_writes += 1
            if self.on_failure is not None:
                self.on_failure(path)
            raise StorageError(f"injected write failure for {path}")
        self.inner.put(path, data)
