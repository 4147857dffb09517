"""The keyed state objects — `ValueState`, `ListState`, `MapState` — and the table each reads.

Theory of operation
-------------------
A state object is created once per name by its `state.keyed.KeyedStateBackend` and cached; it
reads the backend's current key and key group on every access, so it is never re-bound. That is
the per-record hot path: `value()`/`update()` are two dict lookups plus a set insertion for
dirty tracking.

Storage is `table.groups[key_group][key] -> value`, one `StateTable` per state name, with the
key groups written since the last snapshot in `table.dirty` (the backend snapshots only those).
Values are private copies (`state.values`): what a state object hands out or takes in is copied
unless it is a scalar, so a shallow copy of a group is an immutable snapshot.

Semantics follow Flink's heap backend: `update(None)` on a value state clears it, an empty list
state and an empty map state do not exist (they are removed), reading state without a current key
is an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from state.errors import StateSerializationError
from state.key_groups import canonical_key, canonical_key_bytes, is_supported_key
from state.serialization import StateKind
from state.values import (
    INT64_MAX,
    INT64_MIN,
    SCALAR_TYPES,
    UnrepresentableValue,
    copy_value,
    describe_value,
    normalize_value,
)

if TYPE_CHECKING:
    from state.keyed import KeyedStateBackend

__all__ = ["ListState", "MapState", "ValueState"]

_ABSENT: Any = object()
#: the backend's current key before any was set
NO_KEY: Any = object()
_FAST_WRITE = frozenset({int, float, str, bool, bytes})


class StateTable:
    """The data of one named state: key group -> key -> value, plus dirty key groups."""

    __slots__ = ("name", "kind", "groups", "dirty", "plain")

    def __init__(self, name: str, kind: StateKind) -> None:
        self.name = name
        self.kind = kind
        self.groups: dict[int, dict[Any, Any]] = {}
        self.dirty: set[int] = set()
        #: no container was ever stored, so reads need no copying (list state)
        self.plain = True

    def freeze(self, key_group: int) -> dict[Any, Any] | None:
        """An immutable copy of one live key group, or None if it is empty."""
        live = self.groups.get(key_group)
        if not live:
            return None
        if self.kind is StateKind.LIST:
            return {k: tuple(v) for k, v in live.items()}
        if self.kind is StateKind.MAP:
            return {k: dict(v) for k, v in live.items()}
        return dict(live)


class KeyedState:
    """Base of the state objects: one named state, read at the backend's current key."""

    __slots__ = ("_backend", "_table", "_groups", "_dirty")

    def __init__(self, backend: KeyedStateBackend, table: StateTable) -> None:
        self._backend = backend
        self._table = table
        self._groups = table.groups
        self._dirty = table.dirty

    @property
    def name(self) -> str:
        return self._table.name

    def _group(self) -> dict[Any, Any] | None:
        """The current key's live group for reading (None if empty); checks a key is set."""
        group = self._groups.get(self._backend._kg)
        if group is None and self._backend._kg is None:
            self._backend._no_key(self._table.name)
        return group

    def _write_group(self) -> dict[Any, Any]:
        b = self._backend
        kg = b._kg
        if kg is None:
            b._no_key(self._table.name)
        self._dirty.add(kg)
        group = self._groups.get(kg)
        if group is None:
            group = self._groups[kg] = {}
        return group

    def _normalize(self, value: Any, what: str = "value") -> Any:
        try:
            value = normalize_value(value)
        except UnrepresentableValue as exc:
            b = self._backend
            key = "<no current key>" if b._key is NO_KEY else repr(b._key)
            raise StateSerializationError(
                f"operator {b.operator_name!r}, state {self._table.name!r}, key {key}: {what} "
                f"{describe_value(exc.value)} cannot be stored in state: {exc.reason}") from None
        if type(value) not in SCALAR_TYPES:
            self._table.plain = False
        return value

    def clear(self) -> None:
        """Remove the current key's entry from this state."""
        group = self._group()
        if group is not None:
            b = self._backend
            if group.pop(b._key, _ABSENT) is not _ABSENT:
                self._dirty.add(b._kg)
                if not group:
                    del self._groups[b._kg]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._table.name!r})"


class ValueState(KeyedState):
    """One value per key (Flink's `ValueState`). `update(None)` clears."""

    __slots__ = ("_default",)

    def __init__(self, backend: KeyedStateBackend, table: StateTable, default: Any) -> None:
        super().__init__(backend, table)
        self._default = default

    def value(self) -> Any:
        """The current key's value, or the default if it has none."""
        group = self._groups.get(self._backend._kg)
        if group is not None:
            value = group.get(self._backend._key, _ABSENT)
            if value is not _ABSENT:
                return value if type(value) in SCALAR_TYPES else copy_value(value)
        elif self._backend._kg is None:
            self._backend._no_key(self._table.name)
        default = self._default
        return default if type(default) in SCALAR_TYPES else copy_value(default)

    def update(self, value: Any) -> None:
        """Set the current key's value (None clears it).

        Raises:
            StateSerializationError: Arrow cannot carry `value`; names operator, state, key, value.
        """
        t = type(value)
        if t not in _FAST_WRITE or (t is int and not INT64_MIN <= value <= INT64_MAX):
            if value is None:
                self.clear()
                return
            value = self._normalize(value)
        b = self._backend
        kg = b._kg
        if kg is None:
            b._no_key(self._table.name)
        group = self._groups.get(kg)
        if group is None:
            group = self._groups[kg] = {}
        group[b._key] = value
        self._dirty.add(kg)


class ListState(KeyedState):
    """A list of values per key (Flink's `ListState`)."""

    __slots__ = ()

    def get(self) -> list[Any]:
        """A copy of the current key's list (empty if none)."""
        group = self._group()
        if group is None:
            return []
        values = group.get(self._backend._key)
        if values is None:
            return []
        return list(values) if self._table.plain else [copy_value(v) for v in values]

    def add(self, value: Any) -> None:
        """Append one value.

        Raises:
            StateSerializationError: Arrow cannot carry `value`.
        """
        value = self._normalize(value)
        group = self._write_group()
        values = group.get(self._backend._key)
        if values is None:
            group[self._backend._key] = [value]
        else:
            values.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        """Append several values (all are checked before any is added)."""
        checked = [self._normalize(v) for v in values]
        if checked:
            self._write_group().setdefault(self._backend._key, []).extend(checked)

    def update(self, values: Iterable[Any]) -> None:
        """Replace the current key's list (an empty iterable clears it)."""
        checked = [self._normalize(v) for v in values]
        if not checked:
            self.clear()
            return
        self._write_group()[self._backend._key] = checked


class MapState(KeyedState):
    """A dict per key (Flink's `MapState`). Map keys follow the rules for keys (int, str, float,
    bool, bytes, None, tuples); map values those for state values."""

    __slots__ = ()

    def _map(self) -> dict[Any, Any] | None:
        group = self._group()
        return None if group is None else group.get(self._backend._key)

    def _check_map_key(self, map_key: Any) -> None:
        t = type(map_key)
        if t in SCALAR_TYPES and (t is not int or INT64_MIN <= map_key <= INT64_MAX):
            return
        if t is tuple and is_supported_key(map_key):
            return
        if t is int:
            b = self._backend
            raise StateSerializationError(
                f"operator {b.operator_name!r}, state {self._table.name!r}, key {b._key!r}: map key "
                f"{map_key} does not fit Arrow's int64")
        try:
            canonical_key_bytes(map_key)
        except TypeError as exc:
            b = self._backend
            raise StateSerializationError(
                f"operator {b.operator_name!r}, state {self._table.name!r}, key {b._key!r}: map key "
                f"{describe_value(map_key)} cannot be stored in state: {exc}") from None

    def get(self, map_key: Any, default: Any = None) -> Any:
        """The value under `map_key` for the current key, or `default`."""
        mapping = self._map()
        if mapping is None:
            return default
        value = mapping.get(canonical_key(map_key), _ABSENT)
        if value is _ABSENT:
            return default
        return value if type(value) in SCALAR_TYPES else copy_value(value)

    def put(self, map_key: Any, value: Any) -> None:
        """Set `map_key` to `value` for the current key.

        Raises:
            StateSerializationError: the map key or the value cannot be stored.
        """
        self._check_map_key(map_key)
        map_key = canonical_key(map_key)
        value = self._normalize(value)
        group = self._write_group()
        mapping = group.get(self._backend._key)
        if mapping is None:
            group[self._backend._key] = {map_key: value}
        else:
            mapping[map_key] = value

    def put_all(self, entries: dict[Any, Any]) -> None:
        for map_key, value in entries.items():
            self.put(map_key, value)

    def remove(self, map_key: Any) -> None:
        """Remove `map_key` (no error if absent)."""
        mapping = self._map()
        map_key = canonical_key(map_key)
        if mapping is None or map_key not in mapping:
            return
        b = self._backend
        del mapping[map_key]
        self._dirty.add(b._kg)
        if not mapping:
            group = self._groups[b._kg]
            del group[b._key]
            if not group:
                del self._groups[b._kg]

    def contains(self, map_key: Any) -> bool:
        mapping = self._map()
        return mapping is not None and canonical_key(map_key) in mapping

    def items(self) -> list[tuple[Any, Any]]:
        mapping = self._map()
        return [] if mapping is None else [(k, copy_value(v)) for k, v in mapping.items()]

    def keys(self) -> list[Any]:
        mapping = self._map()
        return [] if mapping is None else list(mapping)

    def values(self) -> list[Any]:
        mapping = self._map()
        return [] if mapping is None else [copy_value(v) for v in mapping.values()]

    def is_empty(self) -> bool:
        return not self._map()


#: the state object class of each kind
STATE_CLASSES: dict[StateKind, type[KeyedState]] = {
    StateKind.VALUE: ValueState, StateKind.LIST: ListState, StateKind.MAP: MapState}
