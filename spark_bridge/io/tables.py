"""A completed checkpoint as five Arrow tables, and back (the landed format; no Spark here).

`checkpoint_tables(completed, read)` decodes every task file of a checkpoint into rows;
`checkpoint_from_tables(tables, ...)` re-encodes such rows into state files and a
`CompletedCheckpoint`, so that a job restores from landed tables through the ordinary restore
path (`runtime.jobmaster.restore.state_assignment.build_restores`). Every table starts with `checkpoint_id, job_id,
operator, subtask` (operator = the job vertex, subtask = the task that owned the state):

- `keyed_state`: one row per key and state (per map entry for map state): `key_group`,
  `state_name`, `state_kind` (value/list/map), `key`, `map_key`, `value` — keys and values as
  exact JSON text (`spark_bridge.io.values`), one column for every state, as a restore needs them;
  `spark_bridge.io.state_tables` gives each state its own table in natural Spark types, for queries.
- `source_offsets`: `split`, `position` (rows of the split already emitted).
- `operator_state`: non-keyed operator state other than offsets (e.g. a sink's pending
  transactions): `op_key` (chain index:operator name), `state_name`, `idx`, `value` (JSON).
- `channel_state`: summary of in-flight data of unaligned checkpoints, per `direction`
  (input/output) and `channel`: `buffers`, `records`, `bytes`, plus `payload`, the exact Arrow
  IPC blob the restore replays.
- `checkpoint_stats`: one row per task: trigger/completion time, duration, the task's state and
  persisted bytes, alignment time, bytes buffered, unaligned, sync/async durations, the key-group
  range of its keyed state, and the checkpoint's properties (JSON).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from checkpoint.completed import CompletedCheckpoint
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore
from runtime.core.operator_chain import SOURCE_OP_KEY
from spark_bridge.io.values import decode_value, encode_value
from state.key_groups import KeyGroupRange
from state.serialization import (
    KeyedStateSnapshot,
    StateKind,
    buffers_from_bytes,
    buffers_to_bytes,
    keyed_snapshot_from_bytes,
    operator_state_from_bytes,
    operator_state_to_bytes,
)
from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId

__all__ = ["SCHEMAS", "TABLES", "checkpoint_from_tables", "checkpoint_tables"]

_COMMON = [("checkpoint_id", pa.int64()), ("job_id", pa.string()), ("operator", pa.string()),
           ("subtask", pa.int32())]

SCHEMAS: dict[str, pa.Schema] = {
    "keyed_state": pa.schema(_COMMON + [
        ("key_group", pa.int32()), ("state_name", pa.string()), ("state_kind", pa.string()),
        ("key", pa.string()), ("map_key", pa.string()), ("value", pa.string())]),
    "source_offsets": pa.schema(_COMMON + [("split", pa.string()), ("position", pa.int64())]),
    "operator_state": pa.schema(_COMMON + [
        ("op_key", pa.string()), ("state_name", pa.string()), ("idx", pa.int32()), ("value", pa.string())]),
    "channel_state": pa.schema(_COMMON + [
        ("direction", pa.string()), ("channel", pa.int32()), ("buffers", pa.int32()), ("records", pa.int64()),
        ("bytes", pa.int64()), ("payload", pa.binary())]),
    "checkpoint_stats": pa.schema(_COMMON + [
        ("trigger_time", pa.float64()), ("completion_time", pa.float64()), ("duration", pa.float64()),
        ("state_bytes", pa.int64()), ("persisted_bytes", pa.int64()), ("alignment_time", pa.float64()),
        ("bytes_buffered", pa.int64()), ("unaligned", pa.bool_()), ("sync_duration", pa.float64()),
        ("async_duration", pa.float64()), ("max_parallelism", pa.int32()), ("key_group_start", pa.int32()),
        ("key_group_end", pa.int32()), ("properties", pa.string())]),
}
TABLES = tuple(SCHEMAS)

_CHANNEL_KINDS = {"input_channels": "input", "output_channels": "output"}


class _Columns:
    """Column-wise row accumulator for one table."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.columns: dict[str, list[Any]] = {name: [] for name in schema.names}

    def add_many(self, common: tuple[int, str, str, int], n: int, **columns: list[Any]) -> None:
        for name, value in zip(("checkpoint_id", "job_id", "operator", "subtask"), common):
            self.columns[name].extend([value] * n)
        for name, values in columns.items():
            self.columns[name].extend(values)

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.columns, schema=self.schema)


def checkpoint_tables(completed: CompletedCheckpoint, read: Callable[[StateHandle], bytes]) -> dict[str, pa.Table]:
    """Decode `completed` into the landed tables (see the module docstring).

    Args:
        completed: the checkpoint (its metadata).
        read: returns the verified bytes of a state handle (`CheckpointStorage.read_task_file`).

    Raises:
        checkpoint.storage.layout.CorruptCheckpointError: a state file is missing or corrupt.
        ValueEncodingError: a state value cannot be written as landed JSON (names the state).
    """
    out = {name: _Columns(schema) for name, schema in SCHEMAS.items()}
    properties = json.dumps(completed.properties, sort_keys=True)
    for task_id, ack in completed.acks.items():
        common = (completed.checkpoint_id, completed.job_id, task_id.vertex, task_id.subtask)
        key_groups: KeyGroupRange | None = None
        max_parallelism = None
        for handle in ack.handles.get("keyed", ()):
            snapshot = keyed_snapshot_from_bytes(read(handle))
            key_groups, max_parallelism = snapshot.key_group_range, snapshot.max_parallelism
            _keyed_rows(out["keyed_state"], common, snapshot)
        for handle in ack.handles.get("operator", ()):
            for composite, values in operator_state_from_bytes(read(handle)).items():
                op_key, _, name = composite.partition("::")
                if op_key == SOURCE_OP_KEY and name == "offsets":
                    out["source_offsets"].add_many(common, len(values), split=[v["split"] for v in values],
                                                   position=[v["position"] for v in values])
                else:
                    what = f"operator {task_id.vertex!r}, operator state {composite!r}"
                    out["operator_state"].add_many(
                        common, len(values), op_key=[op_key] * len(values), state_name=[name] * len(values),
                        idx=list(range(len(values))), value=[encode_value(v, what) for v in values])
        for kind, direction in _CHANNEL_KINDS.items():
            for handle in ack.handles.get(kind, ()):
                for channel, batches in buffers_from_bytes(read(handle)).items():
                    out["channel_state"].add_many(
                        common, 1, direction=[direction], channel=[channel], buffers=[len(batches)],
                        records=[sum(b.num_rows for b in batches)], bytes=[sum(b.nbytes for b in batches)],
                        payload=[buffers_to_bytes({channel: batches})])
        out["checkpoint_stats"].add_many(
            common, 1, trigger_time=[completed.trigger_time], completion_time=[completed.completion_time],
            duration=[completed.duration], state_bytes=[ack.state_bytes], persisted_bytes=[ack.persisted_bytes],
            alignment_time=[ack.alignment_time], bytes_buffered=[ack.bytes_buffered], unaligned=[ack.unaligned],
            sync_duration=[ack.sync_duration], async_duration=[ack.async_duration],
            max_parallelism=[max_parallelism], key_group_start=[key_groups.start if key_groups else None],
            key_group_end=[key_groups.end if key_groups else None], properties=[properties])
    return {name: columns.table() for name, columns in out.items()}


def _keyed_rows(out: _Columns, common: tuple[int, str, str, int], snapshot: KeyedStateSnapshot) -> None:
    for name, kind in snapshot.kinds.items():
        what = f"operator {snapshot.operator_name!r}, state {name!r}"
        groups, keys, map_keys, values = [], [], [], []
        for key_group, key, value in snapshot.entries(name):
            encoded_key = encode_value(key, what)
            if kind is StateKind.MAP:
                for map_key, map_value in value.items():
                    groups.append(key_group)
                    keys.append(encoded_key)
                    map_keys.append(encode_value(map_key, what))
                    values.append(encode_value(map_value, what))
            else:
                groups.append(key_group)
                keys.append(encoded_key)
                map_keys.append(None)
                values.append(encode_value(list(value) if kind is StateKind.LIST else value, what))
        n = len(groups)
        out.add_many(common, n, key_group=groups, state_name=[name] * n, state_kind=[kind.value] * n,
                     key=keys, map_key=map_keys, value=values)


# ------------------------------------------------------------------------------ back to a checkpoint


def _rows_by_task(table: pa.Table | None) -> dict[tuple[str, int], list[dict[str, Any]]]:
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
    if table is None:
        return grouped
    for row in table.to_pylist():
        grouped.setdefault((row["operator"], row["subtask"]), []).append(row)
    return grouped


def checkpoint_from_tables(tables: dict[str, pa.Table]) -> tuple[CompletedCheckpoint, CheckpointStorage]:
    """Rebuild one checkpoint from its landed rows: state files in a fresh in-memory storage and
    the `CompletedCheckpoint` pointing at them (what `SimExecutor(restore_from=...)` takes).

    Args:
        tables: the landed tables, filtered to one job and one checkpoint.

    Raises:
        ValueError: the tables hold no checkpoint, or several, or rows of tasks the stats do not list.
    """
    stats = tables["checkpoint_stats"].to_pylist()
    ids = {(r["job_id"], r["checkpoint_id"]) for r in stats}
    if len(ids) != 1:
        raise ValueError(f"expected the tables of exactly one checkpoint, found {sorted(ids) or 'none'}")
    ((job_id, checkpoint_id),) = ids
    keyed = _rows_by_task(tables.get("keyed_state"))
    offsets = _rows_by_task(tables.get("source_offsets"))
    op_state = _rows_by_task(tables.get("operator_state"))
    channels = _rows_by_task(tables.get("channel_state"))
    tasks = {(r["operator"], r["subtask"]): r for r in stats}
    for what, rows in (("keyed_state", keyed), ("source_offsets", offsets), ("operator_state", op_state),
                       ("channel_state", channels)):
        stray = sorted(set(rows) - set(tasks))
        if stray:
            raise ValueError(f"landed {what} of checkpoint {checkpoint_id} has rows of tasks {stray} that its "
                             "checkpoint_stats do not list")
    storage = CheckpointStorage(MemoryBlobStore())
    acks: dict[TaskId, TaskAcknowledgement] = {}
    trigger_time = completion_time = 0.0
    properties: dict[str, Any] = {}
    for (operator, subtask), info in sorted(tasks.items()):
        task_id = TaskId(operator, subtask)
        trigger_time, completion_time = info["trigger_time"], info["completion_time"]
        properties = json.loads(info["properties"]) if info["properties"] else {}
        files: dict[str, bytes] = {}
        if keyed.get((operator, subtask)):
            files["keyed"] = _keyed_blob(operator, checkpoint_id, info, keyed[(operator, subtask)])
        flat: dict[str, list[Any]] = {}
        for row in sorted(op_state.get((operator, subtask), []), key=lambda r: (r["op_key"], r["state_name"], r["idx"])):
            flat.setdefault(f"{row['op_key']}::{row['state_name']}", []).append(decode_value(row["value"]))
        if offsets.get((operator, subtask)):
            flat[f"{SOURCE_OP_KEY}::offsets"] = [{"split": r["split"], "position": r["position"]}
                                                 for r in offsets[(operator, subtask)]]
        if flat:
            files["operator"] = operator_state_to_bytes(flat)
        for kind, direction in _CHANNEL_KINDS.items():
            merged: dict[int, list[pa.RecordBatch]] = {}
            for row in channels.get((operator, subtask), []):
                if row["direction"] == direction:
                    for channel, batches in buffers_from_bytes(row["payload"]).items():
                        merged.setdefault(channel, []).extend(batches)
            if merged:
                files[kind] = buffers_to_bytes(merged)
        handles = {kind: (storage.write_task_file(job_id, checkpoint_id, f"{operator}-{subtask}-{kind}", blob),)
                   for kind, blob in files.items()}
        acks[task_id] = TaskAcknowledgement(
            task_id=task_id, checkpoint_id=checkpoint_id, handles=handles, state_bytes=info["state_bytes"] or 0,
            persisted_bytes=info["persisted_bytes"] or 0, alignment_time=info["alignment_time"] or 0.0,
            bytes_buffered=info["bytes_buffered"] or 0, unaligned=bool(info["unaligned"]),
            sync_duration=info["sync_duration"] or 0.0, async_duration=info["async_duration"] or 0.0)
    completed = CompletedCheckpoint(job_id, checkpoint_id, trigger_time, completion_time, acks, properties)
    return completed, storage


def _keyed_blob(operator: str, checkpoint_id: int, info: dict[str, Any], rows: list[dict[str, Any]]) -> bytes:
    if info["max_parallelism"] is None or info["key_group_start"] is None:
        raise ValueError(f"landed checkpoint {checkpoint_id}: task {operator}[{info['subtask']}] has keyed state "
                         "but its checkpoint_stats row has no key-group range")
    kinds: dict[str, StateKind] = {}
    groups: dict[str, dict[int, dict[Any, Any]]] = {}
    for row in rows:
        name, kind = row["state_name"], StateKind(row["state_kind"])
        kinds.setdefault(name, kind)
        group = groups.setdefault(name, {}).setdefault(row["key_group"], {})
        key = decode_value(row["key"])
        if kind is StateKind.MAP:
            group.setdefault(key, {})[decode_value(row["map_key"])] = decode_value(row["value"])
        elif kind is StateKind.LIST:
            group[key] = tuple(decode_value(row["value"]))
        else:
            group[key] = decode_value(row["value"])
    snapshot = KeyedStateSnapshot(operator, checkpoint_id, info["max_parallelism"],
                                  KeyGroupRange(info["key_group_start"], info["key_group_end"]), kinds, groups)
    return snapshot.to_bytes()
