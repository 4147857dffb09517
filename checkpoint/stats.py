"""Per-checkpoint statistics and the tracker the coordinator feeds.

`CheckpointStats` is the record users see in `result.checkpoints`: one per checkpoint that ended
(completed or aborted), built from the acknowledgements the coordinator received. The tracker
keeps them by id and summarises them; it holds no clock and does no I/O.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vocabulary.reasons import CheckpointFailureReason

if TYPE_CHECKING:
    from checkpoint.pending import PendingCheckpoint


@dataclass(frozen=True, slots=True)
class SubtaskCheckpointStats:
    """One task's part of one checkpoint, with the names of Flink's checkpoint history.

    Durations in seconds (virtual on the simulator), sizes in bytes. The four phases follow one
    another from the trigger: `start_delay` (until the task took its first barrier),
    `alignment_duration` (first to last barrier; blocking only when `aligned_blocking`),
    `sync_duration` (the synchronous snapshot) and `async_duration` (the write), after which the
    task acknowledged; `end_to_end_duration` runs from the trigger until the coordinator received
    that acknowledgement. An unaligned checkpoint snapshots at the first barrier and keeps
    persisting the in-flight data the barriers overtake until the last one arrived: that wait is
    its `alignment_duration`, which blocks nothing.

    Attributes:
        task: the task ("vertex[subtask]").
        processed_data: input bytes processed during the alignment.
        persisted_data: in-flight (channel state) bytes persisted.
        checkpointed_size: state bytes written.
        unaligned: the task took the checkpoint unaligned.
        aligned_blocking: the alignment blocked input channels (aligned exactly-once).
        async_cpu: CPU seconds of the write (serialising and writing; 0 where not measured).
    """

    task: str
    start_delay: float
    alignment_duration: float
    sync_duration: float
    async_duration: float
    processed_data: int
    persisted_data: int
    end_to_end_duration: float
    checkpointed_size: int
    unaligned: bool = False
    aligned_blocking: bool = False
    async_cpu: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class CheckpointStats:
    """What happened to one checkpoint.

    Attributes:
        id: checkpoint id.
        completed: True when every task acknowledged and the metadata was stored.
        failure_reason: why it was aborted (None when completed).
        trigger_time: clock time of the trigger.
        duration: seconds from trigger to completion or abort.
        alignment_time: longest alignment among the tasks that acknowledged.
        bytes_buffered: bytes held back during alignment, summed over tasks.
        persisted_bytes: in-flight (channel) state persisted, summed over tasks.
        state_bytes: operator state size, summed over tasks.
        unaligned: True if any task took it unaligned.
        ack_delays: per task (``str(task_id)``), seconds from trigger to its acknowledgement.
        num_acknowledged: tasks that acknowledged.
        num_tasks: tasks it waited for.
        subtasks: per acknowledged task (``str(task_id)``), its phases and sizes.
    """

    id: int
    completed: bool
    failure_reason: CheckpointFailureReason | None
    trigger_time: float
    duration: float
    alignment_time: float = 0.0
    bytes_buffered: int = 0
    persisted_bytes: int = 0
    state_bytes: int = 0
    unaligned: bool = False
    ack_delays: dict[str, float] = field(default_factory=dict)
    num_acknowledged: int = 0
    num_tasks: int = 0
    subtasks: dict[str, SubtaskCheckpointStats] = field(default_factory=dict)

    @property
    def end_time(self) -> float:
        return self.trigger_time + self.duration

    @property
    def aborted(self) -> bool:
        return not self.completed

    @classmethod
    def of(
        cls, pending: PendingCheckpoint, end_time: float, reason: CheckpointFailureReason | None
    ) -> CheckpointStats:
        """Summarise `pending` as it ended at `end_time` (`reason` None = completed)."""
        acks = pending.acks.values()
        ack_times = pending.ack_times
        # exactly-once barriers block while aligning unless the task took the checkpoint unaligned
        blocking = pending.properties.get("mode", "EXACTLY_ONCE") == "EXACTLY_ONCE"
        subtasks = {
            str(a.task_id): SubtaskCheckpointStats(
                task=str(a.task_id),
                start_delay=a.start_delay,
                alignment_duration=a.alignment_duration,
                sync_duration=a.sync_duration,
                async_duration=a.async_duration,
                processed_data=a.processed_data,
                persisted_data=a.persisted_bytes,
                end_to_end_duration=max(0.0, ack_times.get(a.task_id, end_time) - pending.trigger_time),
                checkpointed_size=a.state_bytes,
                unaligned=a.unaligned,
                aligned_blocking=blocking and not a.unaligned,
                async_cpu=a.async_cpu,
            )
            for a in acks
        }
        return cls(
            id=pending.checkpoint_id,
            completed=reason is None,
            failure_reason=reason,
            trigger_time=pending.trigger_time,
            duration=max(0.0, end_time - pending.trigger_time),
            alignment_time=max((a.alignment_time for a in acks), default=0.0),
            bytes_buffered=sum(a.bytes_buffered for a in acks),
            persisted_bytes=sum(a.persisted_bytes for a in acks),
            state_bytes=sum(a.state_bytes for a in acks),
            unaligned=any(a.unaligned for a in acks),
            ack_delays={str(t): at - pending.trigger_time for t, at in pending.ack_times.items()},
            num_acknowledged=pending.num_acknowledged,
            num_tasks=pending.num_tasks,
            subtasks=subtasks,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "completed": self.completed,
            "failure_reason": self.failure_reason.value if self.failure_reason else None,
            "trigger_time": self.trigger_time,
            "duration": self.duration,
            "alignment_time": self.alignment_time,
            "bytes_buffered": self.bytes_buffered,
            "persisted_bytes": self.persisted_bytes,
            "state_bytes": self.state_bytes,
            "unaligned": self.unaligned,
            "ack_delays": dict(self.ack_delays),
            "num_acknowledged": self.num_acknowledged,
            "num_tasks": self.num_tasks,
            "subtasks": [s.to_json() for s in self.subtasks.values()],
        }


@dataclass(frozen=True, slots=True)
class CheckpointStatsSummary:
    """Counts and durations over the tracked history."""

    num_completed: int
    num_aborted: int
    aborted_by_reason: dict[str, int]
    refused_by_reason: dict[str, int]
    duration_p50: float | None
    duration_max: float | None
    latest_completed_id: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "num_completed": self.num_completed,
            "num_aborted": self.num_aborted,
            "aborted_by_reason": dict(self.aborted_by_reason),
            "refused_by_reason": dict(self.refused_by_reason),
            "duration_p50": self.duration_p50,
            "duration_max": self.duration_max,
            "latest_completed_id": self.latest_completed_id,
        }


#: checkpoints whose statistics a coordinator keeps (Flink's UI keeps 10): a job that checkpoints
#: every 100 ms for days must not keep every record, and a benchmark or a test needs its whole run
DEFAULT_MAX_HISTORY = 10_000


class CheckpointStatsTracker:
    """Collects `CheckpointStats` as checkpoints end.

    Args:
        max_history: keep at most this many records (oldest ids dropped first); None = all.
            Counts in `summary()` cover every checkpoint ever reported, durations only the kept ones.
    """

    def __init__(self, max_history: int | None = None) -> None:
        if max_history is not None and max_history < 1:
            raise ValueError(f"max_history must be >= 1 or None, got {max_history!r}")
        self._max_history = max_history
        self._by_id: dict[int, CheckpointStats] = {}
        self._ids: list[int] = []  # a heap of the kept ids: the oldest is dropped in O(log n)
        self._num_completed = 0
        self._aborted: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._latest_completed: CheckpointStats | None = None

    def report_completed(self, pending: PendingCheckpoint, now: float) -> CheckpointStats:
        stats = CheckpointStats.of(pending, now, None)
        self._num_completed += 1
        if self._latest_completed is None or stats.id > self._latest_completed.id:
            self._latest_completed = stats
        return self._add(stats)

    def report_aborted(
        self, pending: PendingCheckpoint, reason: CheckpointFailureReason, now: float
    ) -> CheckpointStats:
        stats = CheckpointStats.of(pending, now, reason)
        self._aborted[reason.value] += 1
        return self._add(stats)

    def report_refused(self, reason: CheckpointFailureReason) -> None:
        """A trigger attempt that did not start a checkpoint (no id was taken)."""
        self._refused[reason.value] += 1

    def _add(self, stats: CheckpointStats) -> CheckpointStats:
        if stats.id in self._by_id:
            raise ValueError(f"checkpoint {stats.id} was already reported")
        self._by_id[stats.id] = stats
        if self._max_history is not None:
            heapq.heappush(self._ids, stats.id)
            if len(self._by_id) > self._max_history:
                del self._by_id[heapq.heappop(self._ids)]
        return stats

    @property
    def history(self) -> list[CheckpointStats]:
        """Every kept record, by checkpoint id."""
        return [self._by_id[i] for i in sorted(self._by_id)]

    def get(self, checkpoint_id: int) -> CheckpointStats | None:
        return self._by_id.get(checkpoint_id)

    @property
    def latest_completed(self) -> CheckpointStats | None:
        return self._latest_completed

    @property
    def num_completed(self) -> int:
        return self._num_completed

    @property
    def num_aborted(self) -> int:
        return sum(self._aborted.values())

    def summary(self) -> CheckpointStatsSummary:
        durations = sorted(s.duration for s in self._by_id.values() if s.completed)
        return CheckpointStatsSummary(
            num_completed=self._num_completed,
            num_aborted=self.num_aborted,
            aborted_by_reason=dict(sorted(self._aborted.items())),
            refused_by_reason=dict(sorted(self._refused.items())),
            duration_p50=_median(durations),
            duration_max=durations[-1] if durations else None,
            latest_completed_id=self._latest_completed.id if self._latest_completed else None,
        )

    def __repr__(self) -> str:
        return f"CheckpointStatsTracker(completed={self._num_completed}, aborted={self.num_aborted})"


def _median(sorted_values: list[float]) -> float | None:
    n = len(sorted_values)
    if n == 0:
        return None
    mid = n // 2
    return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2
