"""Turn a completed checkpoint into the `TaskRestore` of every task of a (possibly rescaled) job.

Keyed state: every new subtask receives the keyed snapshots of *all* old subtasks of its vertex
and keeps the key groups it owns (rescaling redistributes key groups). Operator state (source
offsets, pending sink transactions): the union over the old subtasks; a source subtask seeks
the splits it is assigned, a sink re-commits pending transactions idempotently. Channel state
(unaligned) belongs to one channel of one subtask, so it is restored only when the vertex kept
its parallelism; otherwise restoring is refused with a clear error.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from checkpoint.handles import TaskId
from runtime.messages import Buffer
from runtime.task import TaskRestore
from state.serialization import buffers_from_bytes, operator_state_from_bytes

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.storage import CheckpointStorage
    from runtime.graph import JobGraph


class RestoreError(RuntimeError):
    """A checkpoint cannot be restored into this job (names the vertex and the reason)."""


def build_restores(
    graph: JobGraph, completed: CompletedCheckpoint, storage: CheckpointStorage
) -> dict[TaskId, TaskRestore]:
    """Read `completed`'s task files and build one `TaskRestore` per task of `graph`.

    Raises:
        checkpoint.storage.CorruptCheckpointError: a file is missing or fails its checksum.
        RestoreError: the checkpoint does not fit the job (unknown vertex, channel state with a
            changed parallelism).
    """
    by_vertex: dict[str, list[Any]] = defaultdict(list)
    for task_id in sorted(completed.acks):
        by_vertex[task_id.vertex].append(completed.acks[task_id])
    known = {v.name for v in graph.vertices}
    unknown = sorted(set(by_vertex) - known)
    if unknown:
        raise RestoreError(
            f"checkpoint {completed.checkpoint_id} has state for operators this job does not have: "
            f"{', '.join(unknown)}"
        )
    restores: dict[TaskId, TaskRestore] = {}
    for vertex in graph.vertices:
        acks = by_vertex.get(vertex.name, [])
        keyed: list[bytes] = []
        op_states: dict[str, dict[str, list[Any]]] = {}
        channel_state: dict[int, tuple[dict[int, list[Buffer]], dict[int, list[Buffer]]]] = {}
        for ack in acks:
            for handle in ack.handles.get("keyed", ()):
                keyed.append(storage.read_task_file(handle))
            for handle in ack.handles.get("operator", ()):
                flat = operator_state_from_bytes(storage.read_task_file(handle))
                for composite, values in flat.items():
                    op_key, _, name = composite.partition("::")
                    op_states.setdefault(op_key, {}).setdefault(name, []).extend(values)
            inputs = _read_channels(storage, ack.handles.get("input_channels", ()))
            outputs = _read_channels(storage, ack.handles.get("output_channels", ()))
            if inputs or outputs:
                channel_state[ack.task_id.subtask] = (inputs, outputs)
        if channel_state and len(acks) != vertex.parallelism:
            raise RestoreError(
                f"checkpoint {completed.checkpoint_id} holds unaligned channel state for operator "
                f"{vertex.name!r} at parallelism {len(acks)}; it cannot be restored at parallelism "
                f"{vertex.parallelism} (take an aligned checkpoint or a savepoint to rescale)"
            )
        for subtask in range(vertex.parallelism):
            inputs, outputs = channel_state.get(subtask, ({}, {}))
            restores[TaskId(vertex.name, subtask)] = TaskRestore(
                checkpoint_id=completed.checkpoint_id,
                keyed_snapshots=keyed,
                operator_states=op_states,
                input_channel_state=inputs,
                output_channel_state=outputs,
            )
    return restores


def _read_channels(storage: CheckpointStorage, handles: Any) -> dict[int, list[Buffer]]:
    channels: dict[int, list[Buffer]] = {}
    for handle in handles:
        for channel, batches in buffers_from_bytes(storage.read_task_file(handle)).items():
            channels.setdefault(int(channel), []).extend(Buffer.of(b) for b in batches)
    return channels
