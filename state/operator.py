"""Operator (non-keyed) state: named lists, and how they are split when parallelism changes.

Flink's `OperatorStateBackend` keeps per-instance *list* state because a list can be split: on a
restore with another parallelism, every old instance's entries of one name are pooled and dealt
out again. Two modes (Flink's `OperatorStateHandle.Mode`):

- *split* (even-split redistribution, `getListState`): entry j of the pooled list goes to new
  subtask `j % new_parallelism` (round robin), so no entry is lost or duplicated;
- *union* (`getUnionListState`): every new subtask gets every entry (for example all source
  offsets, each instance then picks its own).

Source offsets and two-phase-commit sink transactions are the typical users. Values must be
Arrow-representable (checked on write, as for keyed state).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from state.errors import StateAccessError, StateSerializationError
from state.values import SCALAR_TYPES, UnrepresentableValue, copy_value, describe_value, normalize_value


class OperatorListState:
    """One named list of an operator instance."""

    __slots__ = ("_backend", "_name", "_values")

    def __init__(self, backend: OperatorStateBackend, name: str, values: list[Any]) -> None:
        self._backend = backend
        self._name = name
        self._values = values

    @property
    def name(self) -> str:
        return self._name

    def _normalize(self, value: Any) -> Any:
        if type(value) in SCALAR_TYPES and type(value) is not int:
            return value
        try:
            return normalize_value(value)
        except UnrepresentableValue as exc:
            raise StateSerializationError(
                f"operator {self._backend.operator_name!r}, operator state {self._name!r}: value "
                f"{describe_value(exc.value)} cannot be stored in state: {exc.reason}") from None

    def get(self) -> list[Any]:
        """A copy of the list."""
        return [copy_value(v) for v in self._values]

    def add(self, value: Any) -> None:
        """Append a value. Raises `StateSerializationError` if Arrow cannot carry it."""
        self._values.append(self._normalize(value))

    def add_all(self, values: Iterable[Any]) -> None:
        self._values.extend([self._normalize(v) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        """Replace the list (all values are checked before anything changes)."""
        self._values[:] = [self._normalize(v) for v in values]

    def clear(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"OperatorListState({self._name!r}, entries={len(self._values)})"


class OperatorStateBackend:
    """Named list states of one operator instance.

    Args:
        operator_name: names the operator in errors.
    """

    def __init__(self, operator_name: str) -> None:
        if not isinstance(operator_name, str) or not operator_name:
            raise ValueError(f"operator_name must be a non-empty str, got {operator_name!r}")
        self.operator_name = operator_name
        self._lists: dict[str, list[Any]] = {}
        self._states: dict[str, OperatorListState] = {}
        self._union: set[str] = set()

    def get_list_state(self, name: str) -> OperatorListState:
        """The split-redistributed list state `name` (created empty on first use).

        Raises:
            StateAccessError: `name` is already a union list state, or not a non-empty str.
        """
        return self._get(name, union=False)

    def get_union_list_state(self, name: str) -> OperatorListState:
        """The union-redistributed list state `name` (every new instance gets all entries)."""
        return self._get(name, union=True)

    def _get(self, name: str, union: bool) -> OperatorListState:
        state = self._states.get(name)
        if state is None:
            if not isinstance(name, str) or not name:
                raise StateAccessError(
                    f"operator {self.operator_name!r}: state names must be non-empty str, got {name!r}")
            values = self._lists.setdefault(name, [])
            state = self._states[name] = OperatorListState(self, name, values)
            if union:
                self._union.add(name)
            return state
        if (name in self._union) != union:
            kind, other = ("union list", "list") if union else ("list", "union list")
            raise StateAccessError(f"operator {self.operator_name!r}: state {name!r} is a {other} "
                                   f"state and cannot be used as a {kind} state")
        return state

    @property
    def union_state_names(self) -> frozenset[str]:
        return frozenset(self._union)

    @property
    def state_names(self) -> list[str]:
        return list(self._lists)

    def snapshot(self) -> dict[str, list[Any]]:
        """A copy of every named list (unaffected by later changes)."""
        return {name: [copy_value(v) for v in values] for name, values in self._lists.items()}

    @classmethod
    def restore(cls, operator_name: str, state: Mapping[str, Sequence[Any]],
                union_names: Iterable[str] = ()) -> OperatorStateBackend:
        """A backend holding `state` (typically one entry of `redistribute(...)`)."""
        backend = cls(operator_name)
        union = set(union_names)
        for name, values in state.items():
            backend._get(name, union=name in union).update(values)
        return backend

    @staticmethod
    def redistribute(states_from_old_subtasks: Sequence[Mapping[str, Sequence[Any]]],
                     new_parallelism: int, union_names: Iterable[str] = ()) -> list[dict[str, list[Any]]]:
        """See `redistribute`."""
        return redistribute(states_from_old_subtasks, new_parallelism, union_names)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={len(v)}" for n, v in self._lists.items())
        return f"OperatorStateBackend({self.operator_name!r}, {sizes})"


def redistribute(states_from_old_subtasks: Sequence[Mapping[str, Sequence[Any]]], new_parallelism: int,
                 union_names: Iterable[str] = ()) -> list[dict[str, list[Any]]]:
    """Deal the operator state of the old instances out to `new_parallelism` new ones.

    Per name, the entries of all old instances (in subtask order) are pooled; union states go to
    every new subtask whole; split states go round robin (entry j to new subtask
    j % new_parallelism), except that unchanged parallelism leaves each instance its own entries.
    Every name appears in every result, possibly with an empty list.

    Args:
        states_from_old_subtasks: one `{name: entries}` per old subtask, in subtask order.
        new_parallelism: the number of new subtasks (>= 1).
        union_names: names to redistribute by union instead of split.

    Returns:
        One `{name: entries}` per new subtask.

    Raises:
        ValueError: new_parallelism < 1.
    """
    if isinstance(new_parallelism, bool) or not isinstance(new_parallelism, int) or new_parallelism < 1:
        raise ValueError(f"new_parallelism must be an int >= 1, got {new_parallelism!r}")
    union = set(union_names)
    names: list[str] = []
    for old in states_from_old_subtasks:
        names += [n for n in old if n not in names]
    unchanged = len(states_from_old_subtasks) == new_parallelism
    out: list[dict[str, list[Any]]] = [{n: [] for n in names} for _ in range(new_parallelism)]
    for name in names:
        pooled = [v for old in states_from_old_subtasks for v in old.get(name, ())]
        if name in union:
            for target in out:
                target[name] = [copy_value(v) for v in pooled]
        elif unchanged:
            for target, old in zip(out, states_from_old_subtasks):
                target[name] = [copy_value(v) for v in old.get(name, ())]
        else:
            for j, value in enumerate(pooled):
                out[j % new_parallelism][name].append(copy_value(value))
    return out
