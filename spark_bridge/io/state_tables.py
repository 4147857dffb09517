"""One Arrow table per keyed state of a checkpoint, keys and values in their natural types.

The `keyed_state` table (`spark_bridge.io.tables`) holds every state of every operator in one
`key` and one `value` column, so both are exact JSON text — what restoring from landed tables
needs. For queries, `state_tables` gives each state of each operator its own table, whose `key`,
`map_key` (map state) and `value` columns have the Spark type all of that state's keys, map keys
and values fit (`spark_bridge.io.values.natural_type`: `"app0"` lands as the string app0, a count as
a long; list state as an array). Columns: `subtask, key_group, key, [map_key,] value`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from checkpoint.completed import CompletedCheckpoint
from spark_bridge.io.values import natural_column
from state.serialization import StateKind, keyed_snapshot_from_bytes
from vocabulary.handles import StateHandle

__all__ = ["state_dir", "state_tables"]

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def state_dir(name: str) -> str:
    """A directory name for an operator or state name: the name itself when it is plain, else a
    readable form plus a hash of the name (distinct names never share a directory)."""
    safe = _SAFE.sub("_", name).lstrip("_.")
    if safe == name and name:
        return name
    return f"{safe or 'x'}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def state_tables(completed: CompletedCheckpoint, read: Callable[[StateHandle], bytes]
                 ) -> dict[tuple[str, str], pa.Table]:
    """`(operator, state name) -> table` for every keyed state in `completed`.

    Args:
        completed: the checkpoint (its metadata).
        read: returns the verified bytes of a state handle (`CheckpointStorage.read_task_file`).

    Raises:
        ValueEncodingError: a key or value fits no type and JSON cannot carry it either; the
            message names the operator, the state and the key.
    """
    columns: dict[tuple[str, str], dict[str, list[Any]]] = {}
    kinds: dict[tuple[str, str], StateKind] = {}
    for task_id, ack in completed.acks.items():
        for handle in ack.handles.get("keyed", ()):
            snapshot = keyed_snapshot_from_bytes(read(handle))
            for name, kind in snapshot.kinds.items():
                kinds[(task_id.vertex, name)] = kind
                out = columns.setdefault((task_id.vertex, name), {"subtask": [], "key_group": [], "key": [],
                                                                  "map_key": [], "value": []})
                for key_group, key, value in snapshot.entries(name):
                    entries = value.items() if kind is StateKind.MAP else [(None, value)]
                    for map_key, entry in entries:
                        out["subtask"].append(task_id.subtask)
                        out["key_group"].append(key_group)
                        out["key"].append(key)
                        out["map_key"].append(map_key)
                        out["value"].append(list(entry) if kind is StateKind.LIST else entry)
    tables = {}
    for (operator, name), cols in columns.items():
        def describe(i: int, column: str, cols: dict[str, list[Any]] = cols, operator: str = operator,
                     name: str = name) -> str:
            return (f"operator {operator!r}, state {name!r}, key {cols['key'][i]!r}"
                    + (f", map key {cols['map_key'][i]!r}" if column == "value" and kinds[(operator, name)]
                       is StateKind.MAP else "") + f": its {column}")

        arrays = {"subtask": pa.array(cols["subtask"], pa.int32()),
                  "key_group": pa.array(cols["key_group"], pa.int32())}
        names = ["key", "map_key", "value"] if kinds[(operator, name)] is StateKind.MAP else ["key", "value"]
        for column in names:
            arrays[column] = natural_column(cols[column], lambda i, c=column: describe(i, c))
        tables[(operator, name)] = pa.table(arrays)
    return tables
