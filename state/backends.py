"""State backends: factories for the keyed and operator state of operator instances.

A job picks one backend for all its operators (`state_backend_for(name)`). The executor asks it
for a keyed backend per keyed operator instance, and on recovery hands it the serialized snapshots
of the old instances. `MemoryStateBackend` keeps state on the heap and takes *full* snapshots:
every checkpoint serializes all keyed state (Flink's HashMapStateBackend with full snapshots).
An `IncrementalStateBackend` (uploading only changed key groups, sharing the rest across
checkpoints) plugs in beside it through the same `StateBackend` interface.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from state.key_groups import KeyGroupRange
from state.keyed import KeyedStateBackend
from state.operator import OperatorStateBackend
from state.serialization import KeyedStateSnapshot


class StateBackend(abc.ABC):
    """Creates and restores the state of operator instances."""

    #: the name users select the backend by (the `state_backend` option)
    name: ClassVar[str]

    @abc.abstractmethod
    def create_keyed_backend(self, operator_name: str, key_group_range: KeyGroupRange,
                             max_parallelism: int) -> KeyedStateBackend:
        """An empty keyed backend for one operator instance."""

    @abc.abstractmethod
    def restore_keyed_backend(self, operator_name: str, key_group_range: KeyGroupRange,
                              max_parallelism: int,
                              snapshots: Iterable[bytes | KeyedStateSnapshot]) -> KeyedStateBackend:
        """A keyed backend restored from snapshots of any number of old instances (rescaling).

        Raises:
            StateFormatError: a snapshot cannot be decoded.
            StateRestoreError: the snapshots do not belong together (see `KeyedStateBackend.restore`).
        """

    def create_operator_backend(self, operator_name: str) -> OperatorStateBackend:
        """An empty operator-state backend for one operator instance."""
        return OperatorStateBackend(operator_name)

    def restore_operator_backend(self, operator_name: str, state: Mapping[str, Sequence[Any]],
                                 union_names: Iterable[str] = ()) -> OperatorStateBackend:
        """An operator-state backend holding `state` (one entry of `redistribute(...)`)."""
        return OperatorStateBackend.restore(operator_name, state, union_names)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class MemoryStateBackend(StateBackend):
    """Heap state with full Arrow snapshots."""

    name = "memory"

    def create_keyed_backend(self, operator_name: str, key_group_range: KeyGroupRange,
                             max_parallelism: int) -> KeyedStateBackend:
        return KeyedStateBackend(operator_name, key_group_range, max_parallelism)

    def restore_keyed_backend(self, operator_name: str, key_group_range: KeyGroupRange,
                              max_parallelism: int,
                              snapshots: Iterable[bytes | KeyedStateSnapshot]) -> KeyedStateBackend:
        return KeyedStateBackend.restore(operator_name, key_group_range, max_parallelism, snapshots)


_BACKENDS: dict[str, type[StateBackend]] = {MemoryStateBackend.name: MemoryStateBackend}


def register_state_backend(cls: type[StateBackend]) -> type[StateBackend]:
    """Make `cls` selectable by `cls.name` (usable as a class decorator)."""
    _BACKENDS[cls.name] = cls
    return cls


def state_backend_for(name: str | StateBackend) -> StateBackend:
    """The backend selected by the `state_backend` option (a name, or a backend instance).

    Raises:
        ValueError: unknown name; the message lists the known ones.
    """
    if isinstance(name, StateBackend):
        return name
    cls = _BACKENDS.get(name)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown state_backend {name!r}; known: {', '.join(sorted(_BACKENDS))}")
    return cls()
