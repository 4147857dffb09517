"""Keyed state: value, list and map state scoped to the current key, on the heap.

Theory of operation
-------------------
A `KeyedStateBackend` serves one keyed operator instance, which owns a range of key groups (see
`state.key_groups`). The task calls `set_current_key(key)` before handing each record to the user
function; state objects (`ValueState`, `ListState`, `MapState`, in `state.keyed_states`) read the
backend's current key and key group on every access, so they are created once per name, cached,
and never re-bound. That is
the per-record hot path: `value_state(name)` is a dict lookup, and `value()`/`update()` are two
dict lookups plus a set insertion for dirty tracking (about 0.4 µs per record including
`set_current_key`, measured on the development box; `python -m benchmarks.record_path` measures
the keyed step of a whole job).

Storage is `table.groups[key_group][key] -> value`, one table per state name. Grouping by key
group makes the two expensive operations cheap:

- *snapshot* (synchronous, at the barrier) copies only the key groups written since the previous
  snapshot (`table.dirty`) and reuses the previous snapshot's frozen copies for the rest. Stored
  values are private (see `state.values`), so a shallow copy of a group is an immutable snapshot:
  later updates replace entries in the live dicts and never touch the copy.
- *restore* with a different parallelism keeps whole key groups from any number of old snapshots.

Semantics follow Flink's heap backend: `update(None)` on a value state clears it, an empty list
state and an empty map state do not exist (they are removed), reading state without a current key
is an error, and one name has one kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import MappingProxyType
from typing import Any

from state.errors import KeyGroupRangeError, StateAccessError, StateRestoreError, StateSerializationError
from state.key_groups import (
    KeyGroupRange,
    canonical_key,
    check_max_parallelism,
    key_group_for,
)
from state.keyed_states import NO_KEY, STATE_CLASSES, KeyedState, ListState, MapState, StateTable, ValueState
from state.serialization import KeyedStateSnapshot, StateKind, keyed_snapshot_from_bytes
from state.values import (
    SCALAR_TYPES,
    UnrepresentableValue,
    copy_value,
    describe_value,
    normalize_value,
)

_KEY_CACHE_MAX = 1 << 16


class KeyedStateBackend:
    """Heap keyed state of one operator instance over a key-group range. Not thread-safe.

    Args:
        operator_name: names the operator in errors and snapshots; restore checks it.
        key_group_range: the key groups this instance owns.
        max_parallelism: number of key groups of the job (fixed for the job's lifetime).
    """

    def __init__(self, operator_name: str, key_group_range: KeyGroupRange, max_parallelism: int) -> None:
        if not isinstance(operator_name, str) or not operator_name:
            raise ValueError(f"operator_name must be a non-empty str, got {operator_name!r}")
        check_max_parallelism(max_parallelism)
        if not isinstance(key_group_range, KeyGroupRange) or key_group_range.end > max_parallelism:
            raise ValueError(f"operator {operator_name!r}: key_group_range {key_group_range} must be a "
                             f"KeyGroupRange within [0, max_parallelism={max_parallelism})")
        self.operator_name = operator_name
        self.key_group_range = key_group_range
        self.max_parallelism = max_parallelism
        self._tables: dict[str, StateTable] = {}
        self._states: dict[str, KeyedState] = {}
        self._key: Any = NO_KEY
        self._kg: int | None = None
        self._kg_cache: dict[Any, int] = {}
        #: per state, the frozen copy of every non-empty key group as of the last snapshot
        self._frozen: dict[str, dict[int, dict[Any, Any]]] = {}

    # ------------------------------------------------------------------ current key

    def set_current_key(self, key: Any) -> None:
        """Make `key` the key that state objects read and write.

        Raises:
            TypeError: `key` is not a supported key type (names the key).
            KeyGroupRangeError: `key`'s key group is not owned by this backend.
        """
        try:
            kg = self._kg_cache.get(key)
        except TypeError:
            kg = None
        if kg is None:
            kg = key_group_for(key, self.max_parallelism)
            if not self.key_group_range.start <= kg < self.key_group_range.end:
                raise KeyGroupRangeError(
                    f"operator {self.operator_name!r}: key {key!r} is in key group {kg}, outside this "
                    f"instance's key groups {self.key_group_range} (max_parallelism="
                    f"{self.max_parallelism}); was the record partitioned by another key?")
            key = canonical_key(key)  # every NaN one key (a NaN object misses the cache: it lands here)
            if len(self._kg_cache) >= _KEY_CACHE_MAX:
                self._kg_cache.clear()
            self._kg_cache[key] = kg
        self._key = key
        self._kg = kg

    @property
    def current_key(self) -> Any:
        """The current key.

        Raises:
            StateAccessError: no key was set.
        """
        if self._key is NO_KEY:
            raise StateAccessError(f"operator {self.operator_name!r}: no current key is set")
        return self._key

    @property
    def current_key_group(self) -> int | None:
        return self._kg

    def _no_key(self, state_name: str) -> None:
        raise StateAccessError(f"operator {self.operator_name!r}: state {state_name!r} used with no "
                               "current key (keyed state needs set_current_key first)")

    # ------------------------------------------------------------------ state objects

    def value_state(self, name: str, default: Any = None) -> ValueState:
        """The value state `name`; `default` is what `value()` returns for keys without a value.

        Raises:
            StateAccessError: `name` is registered as another kind.
            StateSerializationError: `default` is not Arrow-representable.
        """
        state = self._states.get(name)
        if type(state) is ValueState:
            if state._default is not default and state._default != default:
                state._default = self._check_default(name, default)
            return state
        state = self._register(name, StateKind.VALUE)
        state._default = self._check_default(name, default)  # type: ignore[attr-defined]
        return state  # type: ignore[return-value]

    def list_state(self, name: str) -> ListState:
        """The list state `name`. Raises `StateAccessError` if `name` is another kind."""
        state = self._states.get(name)
        if type(state) is ListState:
            return state
        return self._register(name, StateKind.LIST)  # type: ignore[return-value]

    def map_state(self, name: str) -> MapState:
        """The map state `name`. Raises `StateAccessError` if `name` is another kind."""
        state = self._states.get(name)
        if type(state) is MapState:
            return state
        return self._register(name, StateKind.MAP)  # type: ignore[return-value]

    def _check_default(self, name: str, default: Any) -> Any:
        try:
            return normalize_value(default)
        except UnrepresentableValue as exc:
            raise StateSerializationError(
                f"operator {self.operator_name!r}, state {name!r}: default "
                f"{describe_value(default)} cannot be stored in state: {exc.reason}") from None

    def _table(self, name: str, kind: StateKind) -> StateTable:
        table = self._tables.get(name)
        if table is None:
            if not isinstance(name, str) or not name:
                raise StateAccessError(
                    f"operator {self.operator_name!r}: state names must be non-empty str, got {name!r}")
            table = self._tables[name] = StateTable(name, kind)
        elif table.kind is not kind:
            raise StateAccessError(
                f"operator {self.operator_name!r}: state {name!r} is a {table.kind.value} state and "
                f"cannot be used as a {kind.value} state")
        return table

    def _register(self, name: str, kind: StateKind) -> KeyedState:
        table = self._table(name, kind)
        cls = STATE_CLASSES[kind]
        state = cls(self, table, None) if cls is ValueState else cls(self, table)  # type: ignore[call-arg]
        self._states[name] = state
        return state

    # ------------------------------------------------------------------ inspection

    @property
    def state_names(self) -> list[str]:
        return list(self._tables)

    def kind_of(self, name: str) -> StateKind:
        return self._tables[name].kind

    def keys(self, state_name: str) -> Iterator[Any]:
        """Keys with an entry in `state_name`, by key group then insertion order (a snapshot
        list, so state may be changed while iterating)."""
        table = self._tables.get(state_name)
        if table is None:
            return iter(())
        return iter([k for kg in sorted(table.groups) for k in table.groups[kg]])

    def entries(self, state_name: str) -> list[tuple[Any, Any]]:
        """`(key, value)` of every key with an entry in `state_name`, by key group then insertion
        order, without touching the current key (values are the live ones: read only)."""
        table = self._tables.get(state_name)
        if table is None:
            return []
        return [(k, v) for kg in sorted(table.groups) for k, v in table.groups[kg].items()]

    def dump(self) -> dict[str, dict[Any, Any]]:
        """Every non-empty state as `{state: {key: value}}` (copies; lists as lists)."""
        out: dict[str, dict[Any, Any]] = {}
        for name, table in self._tables.items():
            flat: dict[Any, Any] = {}
            for kg in sorted(table.groups):
                for key, value in table.groups[kg].items():
                    if table.kind is StateKind.MAP:
                        flat[key] = {k: copy_value(v) for k, v in value.items()}
                    else:
                        flat[key] = copy_value(value)
            if flat:
                out[name] = flat
        return out

    @property
    def num_keys(self) -> int:
        """Distinct keys with an entry in any state."""
        return len({k for t in self._tables.values() for g in t.groups.values() for k in g})

    @property
    def approx_bytes(self) -> int:
        """A rough size of the state in memory terms (8 bytes per number, string lengths, ...)."""
        total = 0
        for table in self._tables.values():
            for group in table.groups.values():
                for key, value in group.items():
                    total += 4 + _approx_size(key) + _approx_size(value)
        return total

    @property
    def changed_key_groups(self) -> frozenset[int]:
        """Key groups written since the last snapshot (or restore)."""
        return frozenset(kg for t in self._tables.values() for kg in t.dirty)

    def __repr__(self) -> str:
        return (f"KeyedStateBackend({self.operator_name!r}, key_groups={self.key_group_range}, "
                f"states={len(self._tables)}, dirty_key_groups={len(self.changed_key_groups)})")

    # ------------------------------------------------------------------ snapshot / restore

    def snapshot(self, checkpoint_id: int) -> KeyedStateSnapshot:
        """An immutable copy of all keyed state, unaffected by later updates.

        Copies only key groups written since the previous snapshot; the rest is shared with it.
        """
        changed: set[int] = set()
        groups: dict[str, MappingProxyType[int, dict[Any, Any]]] = {}
        for name, table in self._tables.items():
            frozen = self._frozen.setdefault(name, {})
            for kg in table.dirty:
                copy = table.freeze(kg)
                if copy is None:
                    frozen.pop(kg, None)
                else:
                    frozen[kg] = copy
            changed |= table.dirty
            table.dirty.clear()
            groups[name] = MappingProxyType(dict(frozen))
        kinds = MappingProxyType({name: t.kind for name, t in self._tables.items()})
        return KeyedStateSnapshot(self.operator_name, checkpoint_id, self.max_parallelism,
                                  self.key_group_range, kinds, MappingProxyType(groups),
                                  frozenset(changed))

    @classmethod
    def restore(cls, operator_name: str, key_group_range: KeyGroupRange, max_parallelism: int,
                snapshots: Iterable[bytes | KeyedStateSnapshot]) -> KeyedStateBackend:
        """A backend holding the key groups in `key_group_range` from snapshots of any number of
        old instances (rescaling: each old snapshot contributes the key groups both own).

        Raises:
            StateFormatError: a blob cannot be decoded.
            StateRestoreError: a snapshot is of another operator or max parallelism, two
                snapshots claim the same key groups, or a state name changes kind.
        """
        backend = cls(operator_name, key_group_range, max_parallelism)
        seen: list[KeyGroupRange] = []
        for snapshot in snapshots:
            if not isinstance(snapshot, KeyedStateSnapshot):
                snapshot = keyed_snapshot_from_bytes(snapshot)
            backend._check_compatible(snapshot, seen)
            seen.append(snapshot.key_group_range)
            for name, kind in snapshot.kinds.items():
                try:
                    table = backend._table(name, kind)
                except StateAccessError as exc:
                    raise StateRestoreError(f"restoring {operator_name!r}: {exc}") from None
                for kg, entries in snapshot.groups[name].items():
                    if kg not in key_group_range:
                        continue
                    if kind is StateKind.VALUE:
                        table.groups[kg] = {k: copy_value(v) for k, v in entries.items()}
                    elif kind is StateKind.LIST:
                        table.groups[kg] = {k: [copy_value(x) for x in v] for k, v in entries.items()}
                    else:
                        table.groups[kg] = {k: {mk: copy_value(mv) for mk, mv in v.items()}
                                            for k, v in entries.items()}
                    table.dirty.add(kg)
                    if kind is StateKind.LIST and table.plain:
                        table.plain = all(type(x) in SCALAR_TYPES for v in entries.values() for x in v)
        return backend

    def _check_compatible(self, snapshot: KeyedStateSnapshot, seen: list[KeyGroupRange]) -> None:
        what = f"restoring operator {self.operator_name!r} from checkpoint {snapshot.checkpoint_id}"
        if snapshot.operator_name != self.operator_name:
            raise StateRestoreError(f"{what}: the snapshot belongs to operator {snapshot.operator_name!r}")
        if snapshot.max_parallelism != self.max_parallelism:
            raise StateRestoreError(
                f"{what}: the snapshot has max_parallelism {snapshot.max_parallelism}, the job "
                f"{self.max_parallelism}; max parallelism cannot change across a restore")
        for other in seen:
            if other.overlaps(snapshot.key_group_range):
                raise StateRestoreError(
                    f"{what}: two snapshots claim key groups {other.intersection(snapshot.key_group_range)}")


def _approx_size(value: Any) -> int:
    t = type(value)
    if t is str or t is bytes:
        return len(value)
    if t is list or t is tuple:
        return 8 + sum(_approx_size(v) for v in value)
    if t is dict:
        return 8 + sum(_approx_size(k) + _approx_size(v) for k, v in value.items())
    if value is None or t is bool:
        return 1
    return 8
