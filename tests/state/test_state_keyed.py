"""KeyedStateBackend: value/list/map state scoped to the current key, errors, snapshots."""

from __future__ import annotations

import pytest

from state import (
    KeyedStateBackend,
    KeyGroupRange,
    KeyGroupRangeError,
    StateAccessError,
    StateKind,
    StateSerializationError,
    key_group_for,
)

MAX_P = 16


def backend(name: str = "counter") -> KeyedStateBackend:
    return KeyedStateBackend(name, KeyGroupRange(0, MAX_P), MAX_P)


def test_value_state_is_scoped_to_the_current_key():
    b = backend()
    for key in ["a", "b", "a", "a", 7]:
        b.set_current_key(key)
        count = b.value_state("count", default=0)
        count.update(count.value() + 1)
    assert b.dump() == {"count": {"a": 3, "b": 1, 7: 1}}
    b.set_current_key("a")
    assert b.current_key == "a" and b.current_key_group == key_group_for("a", MAX_P)
    assert b.value_state("count", default=0).value() == 3
    b.set_current_key("zzz")
    assert b.value_state("count", default=0).value() == 0


def test_value_state_none_clears_and_clear_removes():
    b = backend()
    b.set_current_key("a")
    v = b.value_state("v", default="dflt")
    v.update("x")
    v.update(None)
    assert v.value() == "dflt" and b.dump() == {}
    v.update("y")
    v.clear()
    v.clear()  # clearing an absent entry is fine
    assert v.value() == "dflt" and b.num_keys == 0


def test_value_state_objects_are_cached_and_default_follows_the_caller():
    b = backend()
    b.set_current_key(1)
    first = b.value_state("v", default=0)
    assert b.value_state("v", default=0) is first
    assert b.value_state("v", default=5).value() == 5


def test_container_values_are_private():
    b = backend()
    b.set_current_key("k")
    v = b.value_state("v", default=[])
    written = [1, 2]
    v.update(written)
    written.append(3)  # mutating what was written does not change state
    read = v.value()
    read.append(4)  # nor does mutating what was read
    assert v.value() == [1, 2]
    default = b.value_state("w", default=[]).value()
    default.append(1)
    assert b.value_state("w", default=[]).value() == []
    v.update((5, 6))  # tuples are stored as Arrow returns them: lists
    assert v.value() == [5, 6]
    v.update({"a": [1, {"b": 2}][0], "c": "d"})
    assert v.value() == {"a": 1, "c": "d"}


def test_list_state():
    b = backend()
    b.set_current_key("k")
    ls = b.list_state("items")
    assert ls.get() == []
    ls.add(1)
    ls.add(2)
    ls.add_all([3, None])
    got = ls.get()
    got.append(99)
    assert ls.get() == [1, 2, 3, None]
    ls.update(["x"])  # replace (mixing types across time is fine; one list is one column cell)
    assert ls.get() == ["x"]
    ls.update([])
    assert ls.get() == [] and b.dump() == {}
    ls.add({"a": 1})
    inner = ls.get()
    inner[0]["a"] = 2
    assert ls.get() == [{"a": 1}]
    ls.clear()
    assert b.num_keys == 0
    ls.add_all([])
    assert b.dump() == {}


def test_map_state():
    b = backend()
    b.set_current_key("k")
    m = b.map_state("m")
    assert m.get("x") is None and m.get("x", 5) == 5 and m.is_empty()
    m.put("x", 1)
    m.put(("t", 1), [1, 2])
    m.put(None, None)
    assert m.contains("x") and m.contains(None) and not m.contains("y")
    assert m.get(None, "d") is None  # a stored None is a value, not absence
    assert m.keys() == ["x", ("t", 1), None]
    assert m.values() == [1, [1, 2], None]
    assert m.items() == [("x", 1), (("t", 1), [1, 2]), (None, None)]
    m.get(("t", 1)).append(3)
    assert m.get(("t", 1)) == [1, 2]
    m.remove("x")
    m.remove("not there")
    assert m.keys() == [("t", 1), None]
    m.remove(("t", 1))
    m.remove(None)
    assert m.is_empty() and b.dump() == {}
    m.put_all({"a": 1, "b": 2})
    m.clear()
    assert m.items() == [] and b.num_keys == 0


def test_no_current_key_is_an_error_for_every_access():
    b = backend("op-x")
    with pytest.raises(StateAccessError, match="no current key"):
        _ = b.current_key
    v, ls, m = b.value_state("v"), b.list_state("l"), b.map_state("m")
    for action in (v.value, lambda: v.update(1), v.clear, ls.get, lambda: ls.add(1),
                   lambda: ls.update([1]), lambda: m.put("a", 1), lambda: m.get("a"), m.items):
        with pytest.raises(StateAccessError, match="'op-x'.*used with no current key"):
            action()


def test_kind_conflict_is_an_error():
    b = backend("op-y")
    b.value_state("s")
    with pytest.raises(StateAccessError, match="state 's' is a value state and cannot be used as a list"):
        b.list_state("s")
    with pytest.raises(StateAccessError, match="as a map state"):
        b.map_state("s")
    b.map_state("m")
    with pytest.raises(StateAccessError, match="'m' is a map state"):
        b.value_state("m")
    with pytest.raises(StateAccessError, match="non-empty str"):
        b.value_state("")
    assert b.kind_of("m") is StateKind.MAP and b.state_names == ["s", "m"]


def test_key_outside_the_range_names_key_and_range():
    key = next(k for k in (f"k{i}" for i in range(100)) if key_group_for(k, MAX_P) >= 8)
    b = KeyedStateBackend("op-z", KeyGroupRange(0, 8), MAX_P)
    with pytest.raises(KeyGroupRangeError, match=rf"'op-z'.*key '{key}' is in key group \d+.*\[0, 8\)"):
        b.set_current_key(key)
    b.set_current_key(next(k for k in (f"k{i}" for i in range(100)) if key_group_for(k, MAX_P) < 8))
    # still out of range on the second try (the key-group cache only caches accepted keys)
    with pytest.raises(KeyGroupRangeError):
        b.set_current_key(key)


def test_unsupported_key_type():
    with pytest.raises(TypeError, match=r"key \[1\]"):
        backend().set_current_key([1])


@pytest.mark.parametrize("bad", [{1, 2}, object(), {1: "int dict key"}, [1, "mixed"], 2**64, [{1, 2}],
                                 frozenset({1})])
def test_unrepresentable_values_name_operator_state_key_and_value(bad):
    b = backend("op-w")
    b.set_current_key("the-key")
    writers = [
        lambda: b.value_state("vs").update(bad),
        lambda: b.list_state("ls").add(bad),
        lambda: b.list_state("ls").update([1, bad]),
        lambda: b.map_state("ms").put("k", bad),
    ]
    for write in writers:
        with pytest.raises(StateSerializationError) as info:
            write()
        message = str(info.value)
        assert "'op-w'" in message and "'the-key'" in message and type(bad).__name__ in message
        assert any(f"state '{s}'" in message for s in ("vs", "ls", "ms"))
    assert b.dump() == {}  # nothing half-written


def test_bad_map_key_and_bad_default():
    b = backend("op-m")
    b.set_current_key("k")
    with pytest.raises(StateSerializationError, match="map key"):
        b.map_state("m").put([1], 1)
    with pytest.raises(StateSerializationError, match="map key"):
        b.map_state("m").put(2**70, 1)
    with pytest.raises(StateSerializationError, match="state 'd': default"):
        b.value_state("d", default={1, 2})


def test_constructor_validation():
    with pytest.raises(ValueError, match="operator_name"):
        KeyedStateBackend("", KeyGroupRange(0, 4), 4)
    with pytest.raises(ValueError, match="key_group_range"):
        KeyedStateBackend("op", KeyGroupRange(0, 8), 4)
    with pytest.raises(ValueError, match="max_parallelism"):
        KeyedStateBackend("op", KeyGroupRange(0, 0), 0)


def test_snapshot_is_isolated_from_later_updates():
    b = backend()
    b.set_current_key("a")
    b.value_state("v").update(1)
    b.list_state("l").add(1)
    b.map_state("m").put("x", [1])
    snap = b.snapshot(1)
    b.value_state("v").update(2)
    b.list_state("l").add(2)
    b.map_state("m").put("x", [2])
    b.map_state("m").put("y", 3)
    b.set_current_key("b")
    b.value_state("v").update(9)
    assert snap.to_dump() == {"v": {"a": 1}, "l": {"a": [1]}, "m": {"a": {"x": [1]}}}
    assert snap.checkpoint_id == 1 and snap.num_entries == 3
    assert b.dump() == {"v": {"a": 2, "b": 9}, "l": {"a": [1, 2]}, "m": {"a": {"x": [2], "y": 3}}}


def test_snapshot_copies_only_changed_key_groups():
    b = backend()
    keys = [f"k{i}" for i in range(40)]
    for k in keys:
        b.set_current_key(k)
        b.value_state("v").update(k)
    first = b.snapshot(1)
    assert first.changed_key_groups == {key_group_for(k, MAX_P) for k in keys}
    b.set_current_key("k3")
    b.value_state("v").update("changed")
    assert b.changed_key_groups == {key_group_for("k3", MAX_P)}
    second = b.snapshot(2)
    kg = key_group_for("k3", MAX_P)
    assert second.changed_key_groups == {kg}
    for other in first.groups["v"]:
        if other != kg:  # untouched key groups are shared, not copied again
            assert second.groups["v"][other] is first.groups["v"][other]
    assert second.groups["v"][kg] is not first.groups["v"][kg]
    assert b.snapshot(3).changed_key_groups == frozenset()
    # clearing the last key of a key group drops the group from the next snapshot
    b.set_current_key("k3")
    b.value_state("v").clear()
    for k in keys:
        if key_group_for(k, MAX_P) == kg:
            b.set_current_key(k)
            b.value_state("v").clear()
    assert kg not in b.snapshot(4).groups["v"]


def test_snapshot_cannot_be_mutated():
    b = backend()
    b.set_current_key("a")
    b.value_state("v").update(1)
    snap = b.snapshot(1)
    with pytest.raises(TypeError):
        snap.groups["v"][0] = {}  # type: ignore[index]
    with pytest.raises(AttributeError):
        snap.checkpoint_id = 5  # type: ignore[misc]


def test_inspection():
    b = backend()
    for k in ("a", "b"):
        b.set_current_key(k)
        b.value_state("v").update("xyz")
        b.list_state("l").add(1)
    assert b.num_keys == 2
    assert sorted(b.keys("v")) == ["a", "b"] and list(b.keys("nope")) == []
    assert b.approx_bytes == 2 * ((4 + 1 + 3) + (4 + 1 + 8 + 8))
    assert "counter" in repr(b) and "states=2" in repr(b)


def test_the_per_record_path_reuses_one_state_object_per_name():
    # The hot path (set_current_key, value_state lookup, value()/update()) allocates nothing per
    # record: a state object is created once per name and reads the backend's current key on every
    # access. Its speed is measured by `python -m benchmarks.record_path` (the keyed count step).
    b = backend()
    first = b.value_state("count", default=0)
    keys = [f"key-{i % 500}" for i in range(5_000)]
    for key in keys:
        b.set_current_key(key)
        count = b.value_state("count", default=0)
        assert count is first
        count.update(count.value() + 1)
    assert b.dump()["count"] == {f"key-{k}": 10 for k in range(500)}
