"""Keyed and operator state, key groups, state backends and their Arrow snapshot format."""

from state.backends import MemoryStateBackend, StateBackend, register_state_backend, state_backend_for
from state.errors import (
    KeyGroupRangeError,
    StateAccessError,
    StateError,
    StateFormatError,
    StateRestoreError,
    StateSerializationError,
)
from state.key_groups import (
    KeyGroupRange,
    default_max_parallelism,
    key_group_for,
    key_group_range_for_subtask,
    stable_key_hash,
    subtask_for_key,
    subtask_for_key_group,
)
from state.keyed import KeyedStateBackend
from state.keyed_states import ListState, MapState, ValueState
from state.operator import OperatorListState, OperatorStateBackend, redistribute
from state.serialization import (
    KeyedStateSnapshot,
    StateKind,
    buffers_from_bytes,
    buffers_to_bytes,
    keyed_snapshot_from_bytes,
    keyed_snapshot_to_bytes,
    operator_state_from_bytes,
    operator_state_to_bytes,
)

__all__ = [
    "KeyGroupRange",
    "KeyGroupRangeError",
    "KeyedStateBackend",
    "KeyedStateSnapshot",
    "ListState",
    "MapState",
    "MemoryStateBackend",
    "OperatorListState",
    "OperatorStateBackend",
    "StateAccessError",
    "StateBackend",
    "StateError",
    "StateFormatError",
    "StateKind",
    "StateRestoreError",
    "StateSerializationError",
    "ValueState",
    "buffers_from_bytes",
    "buffers_to_bytes",
    "default_max_parallelism",
    "key_group_for",
    "key_group_range_for_subtask",
    "keyed_snapshot_from_bytes",
    "keyed_snapshot_to_bytes",
    "operator_state_from_bytes",
    "operator_state_to_bytes",
    "redistribute",
    "register_state_backend",
    "stable_key_hash",
    "state_backend_for",
    "subtask_for_key",
    "subtask_for_key_group",
]
