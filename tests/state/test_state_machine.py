"""Model-based test: the keyed backend against a dict model, across snapshots and restores.

Every rule mutates both; after every step the backend's `dump()` must equal the model. `snapshot`
records the model alongside the snapshot object; `restore` (later, after more mutations) turns an
old snapshot into bytes, restores it (whole or split across two rescaled instances) and checks
that exactly the model of that moment comes back, then continues from it like a failover would.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from state import KeyedStateBackend, KeyGroupRange, key_group_for

MAX_P = 8
OP = "model-op"
_UNSET = object()

keys = st.one_of(st.sampled_from(["a", "b", "c", "d", "e"]), st.text(max_size=3))
ints = st.integers(-(2**63), 2**63 - 1)
# one Arrow type per state (mixed types are a serialization error by design, tested elsewhere)
value_values = st.one_of(st.none(), ints)
list_elements = st.one_of(st.none(), st.text(max_size=4))
map_keys = st.sampled_from(["x", "y", "z"])
map_values = st.one_of(st.none(), st.lists(st.floats(allow_nan=False), max_size=3))


class KeyedBackendMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.backend = KeyedStateBackend(OP, KeyGroupRange.of(MAX_P), MAX_P)
        self.model: dict[str, dict] = {"v": {}, "l": {}, "m": {}}
        self.key = _UNSET
        self.snapshots: list[tuple[object, dict]] = []
        self.next_checkpoint = 1

    def _has_key(self) -> bool:
        return self.key is not _UNSET

    @rule(key=keys)
    def set_current_key(self, key):
        self.backend.set_current_key(key)
        self.key = key

    @precondition(_has_key)
    @rule(value=value_values)
    def value_update(self, value):
        self.backend.value_state("v", default=-1).update(value)
        if value is None:
            self.model["v"].pop(self.key, None)
        else:
            self.model["v"][self.key] = value

    @precondition(_has_key)
    @rule()
    def value_read_and_clear(self):
        state = self.backend.value_state("v", default=-1)
        assert state.value() == self.model["v"].get(self.key, -1)
        state.clear()
        self.model["v"].pop(self.key, None)

    @precondition(_has_key)
    @rule(value=list_elements)
    def list_add(self, value):
        self.backend.list_state("l").add(value)
        self.model["l"].setdefault(self.key, []).append(value)

    @precondition(_has_key)
    @rule(values=st.lists(list_elements, max_size=3))
    def list_update(self, values):
        self.backend.list_state("l").update(values)
        if values:
            self.model["l"][self.key] = list(values)
        else:
            self.model["l"].pop(self.key, None)

    @precondition(_has_key)
    @rule()
    def list_clear(self):
        assert self.backend.list_state("l").get() == self.model["l"].get(self.key, [])
        self.backend.list_state("l").clear()
        self.model["l"].pop(self.key, None)

    @precondition(_has_key)
    @rule(map_key=map_keys, value=map_values)
    def map_put(self, map_key, value):
        self.backend.map_state("m").put(map_key, value)
        self.model["m"].setdefault(self.key, {})[map_key] = copy.deepcopy(value)

    @precondition(_has_key)
    @rule(map_key=map_keys)
    def map_remove(self, map_key):
        state = self.backend.map_state("m")
        expected = self.model["m"].get(self.key, {})
        assert state.contains(map_key) == (map_key in expected)
        assert state.get(map_key, "absent") == expected.get(map_key, "absent")
        state.remove(map_key)
        expected.pop(map_key, None)
        if not expected:
            self.model["m"].pop(self.key, None)

    @precondition(_has_key)
    @rule()
    def map_mutate_what_was_read(self):
        # values read from state are copies: mutating them must not leak into state
        for _, value in self.backend.map_state("m").items():
            if isinstance(value, list):
                value.append(1.0)

    @rule()
    def snapshot(self):
        snap = self.backend.snapshot(self.next_checkpoint)
        self.next_checkpoint += 1
        self.snapshots.append((snap, copy.deepcopy(self.model)))

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data(), split=st.booleans(), via_bytes=st.booleans())
    def restore_from_snapshot(self, data, split, via_bytes):
        index = data.draw(st.integers(0, len(self.snapshots) - 1), label="snapshot")
        snap, expected = self.snapshots[index]
        source = [snap.to_bytes()] if via_bytes else [snap]
        if split:  # rescale 1 -> 2: the two halves together hold exactly the snapshot's state
            halves = [KeyedStateBackend.restore(OP, r, MAX_P, source)
                      for r in (KeyGroupRange(0, 3), KeyGroupRange(3, MAX_P))]
            for half in halves:
                for entries in half.dump().values():
                    assert all(key_group_for(k, MAX_P) in half.key_group_range for k in entries)
            merged = self._merge(h.dump() for h in halves)
            assert merged == self._non_empty(expected)
            source = [h.snapshot(0).to_bytes() for h in halves]
        self.backend = KeyedStateBackend.restore(OP, KeyGroupRange.of(MAX_P), MAX_P, source)
        self.model = copy.deepcopy(expected)
        self.key = _UNSET

    @staticmethod
    def _merge(dumps) -> dict:
        merged: dict[str, dict] = {}
        for dump in dumps:
            for name, entries in dump.items():
                assert not merged.get(name, {}).keys() & entries.keys()
                merged.setdefault(name, {}).update(entries)
        return merged

    @staticmethod
    def _non_empty(model: dict) -> dict:
        return {name: entries for name, entries in model.items() if entries}

    @invariant()
    def backend_equals_model(self):
        assert self.backend.dump() == self._non_empty(self.model)
        assert self.backend.num_keys == len({k for entries in self.model.values() for k in entries})

    @invariant()
    def old_snapshots_are_unchanged(self):
        if self.snapshots:  # the latest is enough per step: each one was the latest once
            snap, expected = self.snapshots[-1]
            assert snap.to_dump() == self._non_empty(expected)


KeyedBackendMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
TestKeyedBackendMachine = KeyedBackendMachine.TestCase
TestKeyedBackendMachine.pytestmark = [pytest.mark.slow]  # a long stateful run
