"""Turn a completed checkpoint into the `TaskRestore` of every task of a (possibly rescaled) job.

Keyed state: every new subtask receives the keyed snapshots of *all* old subtasks of its vertex
and keeps the key groups it owns (rescaling redistributes key groups). Operator state (source
offsets, pending sink transactions): the union over the old subtasks; a source subtask seeks
the splits it is assigned, a sink re-commits pending transactions idempotently. Channel state
(unaligned) belongs to one channel of one subtask: restored as it is while every vertex keeps its
parallelism, otherwise redistributed to the new subtasks (by key group on keyed edges) by
`runtime.jobmaster.restore.channel_rescale`, which refuses what it cannot make exactly-once.

Incremental keyed state (a manifest handle first under "keyed", see `checkpoint.io.state_files`) is
rebuilt chain by chain (`state.incremental.restore_keyed_snapshot`) into one snapshot per old
subtask, so rescaling treats it exactly like a full snapshot.

`plan_restore` is what an executor calls first when a job starts from a checkpoint of another
execution (`env.restore_from`): it reads what the checkpoint holds (`checkpoint_shape`) and checks
it against the job (`runtime.jobmaster.restore.match`), so a job that does not match fails before it starts,
with an error naming the mismatch, unless `allow_non_restored_state` drops the unmatched state
(logged as a warning listing it); `build_restores(..., plan=)` then leaves that state out.

`restore_latest_valid` is what executors call on (re)deployment: it tries the retained
checkpoints newest first, re-reading each `_metadata` and verifying every file it needs; a
corrupt or missing file makes it fall back to the previous retained checkpoint with a warning
naming the file, and if none is valid it raises `NoValidCheckpointError` listing them all.

Falling back is exactly-once only while no sink committed output of a newer checkpoint: the
older checkpoint's sources replay records whose effects are already visible. So every deployment
checks the checkpoint it restores (none: 0) against the newest checkpoint whose transactions the
committer holds (`check_not_behind_committed_output`) and fails for good with
`CommittedOutputAheadError`, naming both, rather than duplicate. Restore errors are deterministic:
they are `SuppressRestartsError`s, the executors do not retry them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from checkpoint.storage.keyed_files import manifest_handle, read_keyed_snapshots
from checkpoint.storage.layout import CorruptCheckpointError
from runtime.core.operator_chain import SOURCE_OP_KEY
from runtime.core.subtask_checkpoint import TaskRestore
from runtime.jobmaster.committer.collect import CommittedOutput
from runtime.jobmaster.restore.channel_rescale import ChannelState, redistribute_channel_state
from runtime.jobmaster.restore.match import (
    CheckpointShape,
    RestoreError,
    RestorePlan,
    StateMismatchError,
    VertexShape,
    match_checkpoint,
)
from runtime.records.messages import ChannelItem, channel_state_item
from state.errors import StateFormatError
from state.incremental import Manifest
from state.serialization import (
    KeyedStateSnapshot,
    buffers_from_bytes,
    keyed_snapshot_from_bytes,
    keyed_snapshot_header,
    operator_state_from_bytes,
)
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.storage.layout import CheckpointStorage
    from checkpoint.storage.store import CompletedCheckpointStore
    from runtime.core.graph import JobGraph

log = logging.getLogger(__name__)

__all__ = ["CommittedOutputAheadError", "NoValidCheckpointError", "RestoreError", "StateMismatchError",
           "build_restores", "check_not_behind_committed_output", "checkpoint_shape", "plan_restore",
           "restore_latest_valid"]


class NoValidCheckpointError(RestoreError):
    """Every retained checkpoint is corrupt or incomplete (the message names each bad file)."""


class CommittedOutputAheadError(RestoreError):
    """The checkpoint to restore is older than output the sinks already committed: restoring it
    would commit that output again (names both checkpoints and a committed transaction)."""


def check_not_behind_committed_output(job: str, restored: int | None, committed: CommittedOutput | None,
                                      problems: Sequence[str] = ()) -> None:
    """Refuse to deploy from checkpoint `restored` (None: from scratch) when `committed` (the
    committer's newest committed checkpoint) is newer.

    Raises:
        CommittedOutputAheadError: naming both checkpoints, a committed transaction and why
            newer checkpoints could not be restored (`problems`).
    """
    if committed is None or committed.checkpoint_id <= (restored or 0):
        return
    start = f"checkpoint {restored}" if restored else "the beginning (no checkpoint)"
    why = ("; newer checkpoints could not be restored: " + "; ".join(problems)) if problems else ""
    raise CommittedOutputAheadError(
        f"job {job!r} cannot restart from {start}: the sinks already committed the output of "
        f"checkpoint {committed.checkpoint_id} (transaction {committed.transaction!r}), so its records "
        f"would be committed a second time; falling back past committed output cannot be exactly-once"
        f"{why}. Restore checkpoint {committed.checkpoint_id} (repair or recover its files) or give the "
        "job a fresh committer"
    )


def plan_restore(graph: JobGraph, completed: CompletedCheckpoint, storage: CheckpointStorage, *,
                 allow_non_restored_state: bool = False) -> RestorePlan:
    """Check that `completed` fits `graph` before a job starts from it (see `runtime.jobmaster.restore.match`).

    Args:
        allow_non_restored_state: drop the state the job does not use (operators, keyed or
            operator state names) instead of failing, with a warning listing it. Source splits
            must match regardless: their offsets are not droppable.

    Returns:
        The plan for `build_restores`; its `graph` is the job to run (defaulted split counts set
        to the checkpoint's).

    Raises:
        StateMismatchError: the job does not match the checkpoint (every mismatch is named).
        checkpoint.storage.layout.CorruptCheckpointError: a file is missing or fails its checksum.
    """
    plan = match_checkpoint(graph, checkpoint_shape(completed, storage),
                            allow_non_restored_state=allow_non_restored_state)
    if plan.dropped:
        log.warning("restoring checkpoint %d with allow_non_restored_state: dropped the state this job does not "
                    "use: %s", plan.checkpoint_id, "; ".join(plan.dropped))
    return plan


def checkpoint_shape(completed: CompletedCheckpoint, storage: CheckpointStorage) -> CheckpointShape:
    """What `completed` holds per vertex: source offsets, state names, channel state (reading only
    the operator state files and the headers of keyed state).

    Raises:
        checkpoint.storage.layout.CorruptCheckpointError: a file is missing or fails its checksum.
    """
    shape = CheckpointShape(completed.checkpoint_id)
    for task_id in sorted(completed.acks):
        ack = completed.acks[task_id]
        held = shape.vertices.setdefault(task_id.vertex, VertexShape())
        held.subtasks += 1
        held.channel_state |= bool(ack.handles.get("input_channels") or ack.handles.get("output_channels"))
        keyed_handles = ack.handles.get("keyed", ())
        manifest = manifest_handle(keyed_handles)
        for handle in [manifest] if manifest is not None else keyed_handles:
            try:
                blob = storage.read_task_file(handle)
                header = Manifest.from_bytes(blob) if manifest is not None else keyed_snapshot_header(blob)
            except StateFormatError as exc:
                raise CorruptCheckpointError(f"keyed state in {handle.path}: {exc}", handle.path) from exc
            held.keyed.update(header.kinds)
            held.max_parallelism = header.max_parallelism
        for op_key, states in _read_operator_states(storage, ack).items():
            if op_key == SOURCE_OP_KEY:
                held.splits = held.splits or {}
                held.splits.update((e["split"], e["position"]) for e in states.get("offsets", ()))
            else:
                held.operator.setdefault(op_key, set()).update(states)
    return shape


def _read_operator_states(storage: CheckpointStorage, ack: Any) -> dict[str, dict[str, list[Any]]]:
    """op_key -> name -> values of one task's operator state files."""
    op_states: dict[str, dict[str, list[Any]]] = {}
    for handle in ack.handles.get("operator", ()):
        for composite, values in operator_state_from_bytes(storage.read_task_file(handle)).items():
            op_key, _, name = composite.partition("::")
            op_states.setdefault(op_key, {}).setdefault(name, []).extend(values)
    return op_states


def build_restores(
    graph: JobGraph, completed: CompletedCheckpoint, storage: CheckpointStorage, plan: RestorePlan | None = None
) -> dict[TaskId, TaskRestore]:
    """Read `completed`'s task files and build one `TaskRestore` per task of `graph`.

    Args:
        plan: from `plan_restore` (a restore into a new execution): the state it drops is left out.

    Raises:
        checkpoint.storage.layout.CorruptCheckpointError: a file is missing or fails its checksum.
        RestoreError: the checkpoint does not fit the job (unknown vertex; in-flight data that
            cannot be redistributed to a changed parallelism, see `runtime.jobmaster.restore.channel_rescale`).
    """
    by_vertex: dict[str, list[Any]] = defaultdict(list)
    for task_id in sorted(completed.acks):
        by_vertex[task_id.vertex].append(completed.acks[task_id])
    known = {v.name for v in graph.vertices}
    unknown = sorted(set(by_vertex) - known - (plan.dropped_vertices if plan is not None else set()))
    if unknown:
        raise RestoreError(
            f"checkpoint {completed.checkpoint_id} has state for operators this job does not have: "
            f"{', '.join(unknown)}"
        )
    channel_state: dict[str, ChannelState] = {}
    for vertex in graph.vertices:
        for ack in by_vertex.get(vertex.name, []):
            inputs = _read_channels(storage, ack.handles.get("input_channels", ()))
            outputs = _read_channels(storage, ack.handles.get("output_channels", ()))
            if inputs or outputs:
                channel_state.setdefault(vertex.name, {})[ack.task_id.subtask] = (inputs, outputs)
    old_parallelism = {name: len(acks) for name, acks in by_vertex.items()}
    if channel_state and any(old_parallelism.get(v.name, v.parallelism) != v.parallelism for v in graph.vertices):
        channel_state = redistribute_channel_state(graph, old_parallelism, channel_state, completed.checkpoint_id)
    restores: dict[TaskId, TaskRestore] = {}
    for vertex in graph.vertices:
        acks = by_vertex.get(vertex.name, [])
        drop_keyed = plan.dropped_keyed.get(vertex.name, frozenset()) if plan is not None else frozenset()
        drop_operator = plan.dropped_operator.get(vertex.name, {}) if plan is not None else {}
        keyed: list[bytes | KeyedStateSnapshot] = []
        op_states: dict[str, dict[str, list[Any]]] = {}
        for ack in acks:
            keyed.extend(read_keyed_snapshots(storage, ack.handles.get("keyed", ())))
            for op_key, states in _read_operator_states(storage, ack).items():
                for name, values in states.items():
                    if name not in drop_operator.get(op_key, ()):
                        op_states.setdefault(op_key, {}).setdefault(name, []).extend(values)
        if drop_keyed:
            keyed = [_without_states(snapshot, drop_keyed) for snapshot in keyed]
        for subtask in range(vertex.parallelism):
            inputs, outputs = channel_state.get(vertex.name, {}).get(subtask, ({}, {}))
            restores[TaskId(vertex.name, subtask)] = TaskRestore(
                checkpoint_id=completed.checkpoint_id,
                keyed_snapshots=keyed,  # type: ignore[arg-type]  # Task restores accept both
                operator_states=op_states,
                input_channel_state=inputs,
                output_channel_state=outputs,
            )
    return restores


def _without_states(snapshot: bytes | KeyedStateSnapshot, names: frozenset[str]) -> KeyedStateSnapshot:
    if not isinstance(snapshot, KeyedStateSnapshot):
        snapshot = keyed_snapshot_from_bytes(snapshot)
    return dataclasses.replace(snapshot, kinds={n: k for n, k in snapshot.kinds.items() if n not in names},
                               groups={n: g for n, g in snapshot.groups.items() if n not in names})


def _read_channels(storage: CheckpointStorage, handles: Any) -> dict[int, list[ChannelItem]]:
    """Channel state files: per channel, its buffers and watermark events in order."""
    channels: dict[int, list[ChannelItem]] = {}
    for handle in handles:
        for channel, batches in buffers_from_bytes(storage.read_task_file(handle)).items():
            channels.setdefault(int(channel), []).extend(channel_state_item(b) for b in batches)
    return channels


def restore_latest_valid(graph: JobGraph, store: CompletedCheckpointStore, storage: CheckpointStorage,
                         committed: CommittedOutput | None = None,
                         ) -> tuple[CompletedCheckpoint | None, dict[TaskId, TaskRestore]]:
    """The restores of the newest retained checkpoint that verifies, falling back to older ones
    but never behind `committed` (the committer's newest committed checkpoint).

    Returns:
        `(checkpoint, restores)`; `(None, {})` when the store retains nothing.

    Raises:
        NoValidCheckpointError: the store retains checkpoints but none verifies.
        CommittedOutputAheadError: the checkpoint that verifies is older than `committed`.
        RestoreError: the checkpoint does not fit the job (not a corruption: no fallback).
    """
    problems: list[str] = []
    for completed in reversed(store.get_all_checkpoints()):
        try:
            if completed.metadata_path is not None:
                on_disk = storage.read_metadata(completed.metadata_path)
                if on_disk.checkpoint_id != completed.checkpoint_id:
                    raise CorruptCheckpointError(
                        f"checkpoint metadata {completed.metadata_path} describes checkpoint "
                        f"{on_disk.checkpoint_id}", completed.metadata_path)
                on_disk.metadata_path = completed.metadata_path
                completed = on_disk
            restores = build_restores(graph, completed, storage)
        except CorruptCheckpointError as exc:
            log.warning("cannot restore checkpoint %d of job %s: %s (file %s); falling back to the "
                        "previous retained checkpoint", completed.checkpoint_id, completed.job_id, exc, exc.path)
            problems.append(f"checkpoint {completed.checkpoint_id}: {exc}")
            continue
        check_not_behind_committed_output(graph.job_name, completed.checkpoint_id, committed, problems)
        return completed, restores
    if problems:
        raise NoValidCheckpointError("no retained checkpoint can be restored: " + "; ".join(problems))
    return None, {}
