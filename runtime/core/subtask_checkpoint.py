"""A task's side of checkpoints: its snapshots in flight, their channel state, the asynchronous
write and the acknowledgement (Flink's `SubtaskCheckpointCoordinator` and `ChannelStateWriter`).

A snapshot taken synchronously (`TaskSnapshot`) stays in flight until it can be written: an
unaligned one waits for its input channel state (handed over buffer by buffer until the last
barrier arrived), one whose barrier waits behind output for its alignment timeout waits for the
barrier to leave or overtake. Then `TaskPorts.write_snapshot` writes it off the hot path and
`on_snapshot_written` acknowledges — unless the checkpoint was cancelled meanwhile, in which case
the write is reported back as discarded. Pure: no I/O, time from the injected clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.core.barriers import AlignmentStats
from runtime.records.messages import ChannelItem, channel_state_batch, sealed
from state.serialization import buffers_to_bytes, operator_state_to_bytes
from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId
from vocabulary.ports import Clock
from vocabulary.reasons import CheckpointFailureReason


class TaskPorts(Protocol):
    """What a task asks of its executor."""

    def acknowledge(self, ack: TaskAcknowledgement) -> None: ...

    def decline(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None: ...

    def source_finished(self, task_id: TaskId) -> None: ...

    def write_snapshot(self, snapshot: TaskSnapshot) -> None:
        """Serialise (`snapshot.to_files()`) and write off the hot path, then call
        `task.on_snapshot_written(...)` or `task.on_snapshot_failed(...)`."""
        ...

    def buffer_consumed(self, task_id: TaskId, input_channel: int) -> None:
        """A buffer from `input_channel` was consumed: give its sender a credit back."""
        ...

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        """The task learned that `checkpoint_id` completed without a notification of its own (from
        a barrier or its trigger, `runtime.jobmaster.coordination.completions`): forward it wherever the
        executor forwards notifications (the snapshot writer)."""
        ...

    def wake(self, task_id: TaskId) -> None:
        """The task has work no input announced (a timer callback came due): step it soon."""
        ...


@dataclass
class TaskSnapshot:
    """The synchronous part of a task's checkpoint; `to_files()` is the asynchronous part."""

    task_id: TaskId
    checkpoint_id: int
    barrier_timestamp: float
    stats: AlignmentStats
    keyed: Any | None = None  # state.keyed snapshot object (immutable copy)
    operator_states: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    #: channel -> buffers and watermark events in flight (unaligned checkpoints)
    input_channel_state: dict[int, list[ChannelItem]] = field(default_factory=dict)
    output_channel_state: dict[int, list[ChannelItem]] = field(default_factory=dict)
    sync_time: float = 0.0

    @property
    def persisted_bytes(self) -> int:
        """Bytes of channel state (in-flight data) in this snapshot."""
        return sum(b.size_bytes for bs in self.input_channel_state.values() for b in bs) + sum(
            b.size_bytes for bs in self.output_channel_state.values() for b in bs
        )

    def to_files(self) -> dict[str, bytes]:
        """Serialise to Arrow IPC, one blob per kind (called by the executor, off the hot path)."""
        files: dict[str, bytes] = {}
        if self.keyed is not None and self.keyed.num_entries:
            files["keyed"] = self.keyed.to_bytes()
        if any(self.operator_states.values()):
            flat: dict[str, list[Any]] = {}
            for op_key, states in sorted(self.operator_states.items()):
                for name, values in sorted(states.items()):
                    flat[f"{op_key}::{name}"] = values
            files["operator"] = operator_state_to_bytes(flat)
        if any(self.input_channel_state.values()):
            files["input_channels"] = buffers_to_bytes(
                {ch: [channel_state_batch(b) for b in bs] for ch, bs in self.input_channel_state.items() if bs}
            )
        if any(self.output_channel_state.values()):
            files["output_channels"] = buffers_to_bytes(
                {ch: [channel_state_batch(b) for b in bs] for ch, bs in self.output_channel_state.items() if bs}
            )
        return files


@dataclass
class TaskRestore:
    """State a task starts from (built by `runtime.jobmaster.restore.state_assignment` from a completed checkpoint)."""

    checkpoint_id: int
    keyed_snapshots: list[bytes] = field(default_factory=list)
    #: op_key -> name -> values, the union over all old subtasks of the vertex
    operator_states: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    input_channel_state: dict[int, list[ChannelItem]] = field(default_factory=dict)
    output_channel_state: dict[int, list[ChannelItem]] = field(default_factory=dict)


@dataclass
class InFlightSnapshot:
    """A snapshot between its synchronous part and its write, and what it still waits for."""

    snapshot: TaskSnapshot
    awaiting_channel_state: bool
    write_started: bool = False
    #: an aligned barrier with an alignment timeout still queued behind output buffers
    awaiting_output: bool = False
    output_timer: Any = None
    #: clock times: the synchronous part ended; the write started (phases of the acknowledgement)
    sync_end: float = 0.0
    write_started_at: float = 0.0


class SubtaskCheckpointCoordinator:
    """The snapshots of one task between its synchronous part and its acknowledgement."""

    def __init__(self, task_id: TaskId, ports: TaskPorts, clock: Clock, calls: Counter[str] | None = None) -> None:
        self.task_id = task_id
        self.ports = ports
        self.clock = clock
        #: control calls this task took part in, by kind (the task's `control_calls`)
        self.calls: Counter[str] = calls if calls is not None else Counter()
        self.in_flight: dict[int, InFlightSnapshot] = {}
        self._cancelled: set[int] = set()
        #: checkpoint id -> bytes of input processed while its barriers were being collected
        #: (Flink's "processed data"), counted only while the handler has one pending
        self._processed: dict[int, int] = {}
        self.latest_checkpoint_id = 0

    def start(self, snapshot: TaskSnapshot, *, awaiting_channel_state: bool) -> InFlightSnapshot:
        """Keep `snapshot` in flight (its synchronous part ends now)."""
        entry = InFlightSnapshot(snapshot, awaiting_channel_state=awaiting_channel_state)
        self.in_flight[snapshot.checkpoint_id] = entry
        entry.sync_end = self.clock.now()
        return entry

    def count_processed(self, checkpoint_id: int, size_bytes: int) -> None:
        self._processed[checkpoint_id] = self._processed.get(checkpoint_id, 0) + size_bytes

    def add_input_channel_state(self, checkpoint_id: int, channel: int, buffers: Sequence[ChannelItem]) -> None:
        entry = self.in_flight.get(checkpoint_id)
        if entry is None or not buffers:
            return
        entry.snapshot.input_channel_state.setdefault(channel, []).extend(sealed(buffers))

    def finish_input_channel_state(self, checkpoint_id: int) -> None:
        entry = self.in_flight.get(checkpoint_id)
        if entry is None or not entry.awaiting_channel_state:
            return
        entry.awaiting_channel_state = False
        self.maybe_start_write(checkpoint_id)

    def maybe_start_write(self, checkpoint_id: int) -> None:
        entry = self.in_flight.get(checkpoint_id)
        if entry is None or entry.write_started or entry.awaiting_channel_state or entry.awaiting_output:
            return
        entry.write_started = True
        entry.write_started_at = self.clock.now()
        self.ports.write_snapshot(entry.snapshot)

    def on_snapshot_written(
        self, checkpoint_id: int, handles: dict[str, tuple[StateHandle, ...]], async_duration: float = 0.0,
        async_cpu: float = 0.0,
    ) -> bool:
        """The executor finished writing (in `async_duration` s, `async_cpu` of them on a CPU);
        acknowledge unless the checkpoint was cancelled.

        Returns False when the write was for a cancelled checkpoint (the executor then deletes
        the files it wrote).
        """
        entry = self.in_flight.pop(checkpoint_id, None)
        if entry is None or checkpoint_id in self._cancelled:
            return False
        snap = entry.snapshot
        state_bytes = sum(h.length or h.size for hs in handles.values() for h in hs)
        first = snap.stats.first_barrier_at if snap.stats.first_barrier_at is not None else snap.sync_time
        self.calls["ack"] += 1
        self.ports.acknowledge(
            TaskAcknowledgement(
                task_id=self.task_id,
                checkpoint_id=checkpoint_id,
                handles=handles,
                state_bytes=state_bytes,
                persisted_bytes=snap.persisted_bytes,
                alignment_time=snap.stats.alignment_time,
                bytes_buffered=snap.stats.bytes_buffered,
                unaligned=snap.stats.unaligned,
                sync_duration=max(0.0, entry.sync_end - snap.sync_time),
                async_duration=async_duration,
                async_cpu=async_cpu,
                start_delay=max(0.0, first - snap.barrier_timestamp),
                # unaligned: the wait for the channel state (the last barrier) before the write
                alignment_duration=max(0.0, snap.sync_time - first)
                + max(0.0, entry.write_started_at - entry.sync_end),
                processed_data=self._processed.pop(checkpoint_id, 0),
            )
        )
        return True

    def on_snapshot_failed(self, checkpoint_id: int, error: BaseException) -> None:
        entry = self.in_flight.pop(checkpoint_id, None)
        if entry is None or checkpoint_id in self._cancelled:
            return
        self.decline(checkpoint_id, CheckpointFailureReason.STORAGE_FAILURE)

    def decline(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        """Tell the coordinator this task declines `checkpoint_id`."""
        self.calls["decline"] += 1
        self.ports.decline(self.task_id, checkpoint_id, reason)

    def cancel(self, checkpoint_id: int) -> None:
        self._cancelled.add(checkpoint_id)
        self.in_flight.pop(checkpoint_id, None)
        self._processed.pop(checkpoint_id, None)

    def is_cancelled(self, checkpoint_id: int) -> bool:
        return checkpoint_id in self._cancelled

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: older cancellations need no remembering."""
        self._cancelled = {c for c in self._cancelled if c > checkpoint_id}
