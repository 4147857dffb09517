"""OperatorStateBackend and operator-state redistribution on rescaling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state import (
    OperatorStateBackend,
    StateAccessError,
    StateSerializationError,
    operator_state_from_bytes,
    operator_state_to_bytes,
    redistribute,
)


def test_list_state_operations_and_snapshot_isolation():
    b = OperatorStateBackend("source")
    offsets = b.get_list_state("offsets")
    assert b.get_list_state("offsets") is offsets and offsets.get() == []
    offsets.add({"split": 0, "offset": 5})
    offsets.add_all([{"split": 1, "offset": 0}])
    got = offsets.get()
    got[0]["offset"] = 99
    assert offsets.get()[0]["offset"] == 5 and len(offsets) == 2
    snap = b.snapshot()
    offsets.update([{"split": 0, "offset": 6}])
    assert snap == {"offsets": [{"split": 0, "offset": 5}, {"split": 1, "offset": 0}]}
    assert b.snapshot() == {"offsets": [{"split": 0, "offset": 6}]}
    offsets.clear()
    assert b.snapshot() == {"offsets": []} and "offsets=0" in repr(b)


def test_values_are_checked_on_write():
    b = OperatorStateBackend("sink")
    pending = b.get_list_state("pending")
    with pytest.raises(StateSerializationError, match=r"'sink', operator state 'pending'.*set"):
        pending.add({1, 2})
    with pytest.raises(StateSerializationError, match="'pending'"):
        pending.update([1, object()])
    with pytest.raises(StateSerializationError):
        pending.add(2**64)
    assert pending.get() == []
    pending.add((1, 2))
    assert pending.get() == [[1, 2]]


def test_list_and_union_kinds_do_not_mix():
    b = OperatorStateBackend("op")
    b.get_list_state("a")
    b.get_union_list_state("u")
    with pytest.raises(StateAccessError, match="'a' is a list state and cannot be used as a union"):
        b.get_union_list_state("a")
    with pytest.raises(StateAccessError, match="'u' is a union list state"):
        b.get_list_state("u")
    with pytest.raises(StateAccessError, match="non-empty str"):
        b.get_list_state("")
    with pytest.raises(ValueError, match="operator_name"):
        OperatorStateBackend("")
    assert b.union_state_names == {"u"} and b.state_names == ["a", "u"]


def test_restore_from_bytes():
    b = OperatorStateBackend("op")
    b.get_list_state("a").add_all([1, 2])
    b.get_union_list_state("u").add("x")
    restored = OperatorStateBackend.restore("op", operator_state_from_bytes(operator_state_to_bytes(b.snapshot())),
                                            union_names=b.union_state_names)
    assert restored.snapshot() == b.snapshot() and restored.union_state_names == {"u"}


def test_redistribute_round_robin():
    old = [{"offsets": ["a0", "a1", "a2"], "u": ["x"]}, {"offsets": ["b0"], "only-here": [1]}]
    new = redistribute(old, 3, union_names={"u"})
    assert new == [
        {"offsets": ["a0", "b0"], "u": ["x"], "only-here": [1]},
        {"offsets": ["a1"], "u": ["x"], "only-here": []},
        {"offsets": ["a2"], "u": ["x"], "only-here": []},
    ]
    assert OperatorStateBackend.redistribute(old, 1) == [
        {"offsets": ["a0", "a1", "a2", "b0"], "u": ["x"], "only-here": [1]}]


def test_redistribute_unchanged_parallelism_keeps_split_state_in_place():
    old = [{"s": [1, 2, 3], "u": ["a"]}, {"s": [], "u": ["b"]}]
    assert redistribute(old, 2, union_names=["u"]) == [
        {"s": [1, 2, 3], "u": ["a", "b"]}, {"s": [], "u": ["a", "b"]}]


def test_redistribute_copies_and_validates():
    old = [{"s": [{"k": 1}]}]
    new = redistribute(old, 2)
    new[0]["s"][0]["k"] = 2
    assert old[0]["s"][0]["k"] == 1
    with pytest.raises(ValueError, match="new_parallelism"):
        redistribute(old, 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from("abc"), st.lists(st.integers(), max_size=6), max_size=3),
                min_size=1, max_size=5),
       st.integers(1, 6))
def test_redistribute_loses_and_duplicates_nothing(old, new_parallelism):
    new = redistribute(old, new_parallelism)
    assert len(new) == new_parallelism
    for name in {n for o in old for n in o}:
        before = sorted(v for o in old for v in o.get(name, []))
        after = [v for n in new for v in n[name]]
        assert sorted(after) == before
        sizes = [len(n[name]) for n in new]
        if len(old) != new_parallelism:
            assert max(sizes) - min(sizes) <= 1  # even split
