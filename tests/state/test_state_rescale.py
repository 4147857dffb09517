"""Restoring keyed state into another parallelism: every key exactly once, in the right subtask."""

from __future__ import annotations

import pytest

from state import (
    KeyedStateBackend,
    KeyGroupRange,
    MemoryStateBackend,
    StateFormatError,
    StateRestoreError,
    key_group_for,
    key_group_range_for_subtask,
    state_backend_for,
    subtask_for_key_group,
)

MAX_P = 128
KEYS = [f"user-{i}" for i in range(400)]
# keys of one state must share an Arrow type; other key types are rescaled in their own jobs
OTHER_KEYS = {"int": list(range(200)), "tuple": [("eu", i) for i in range(100)]}


def write_job(parallelism: int, keys: list = KEYS) -> tuple[list[bytes], dict[str, dict]]:
    """Run a keyed 'job' at `parallelism`, return each subtask's snapshot bytes and the expected
    global state."""
    backends = [KeyedStateBackend("agg", key_group_range_for_subtask(MAX_P, parallelism, i), MAX_P)
                for i in range(parallelism)]
    expected: dict[str, dict] = {"count": {}, "events": {}, "by_hour": {}}
    for n, key in enumerate(keys * 2):
        b = backends[subtask_for_key_group(MAX_P, parallelism, key_group_for(key, MAX_P))]
        b.set_current_key(key)
        count = b.value_state("count", default=0)
        count.update(count.value() + 1)
        b.list_state("events").add(n)
        b.map_state("by_hour").put(n % 3, n)
        expected["count"][key] = expected["count"].get(key, 0) + 1
        expected["events"].setdefault(key, []).append(n)
        expected["by_hour"].setdefault(key, {})[n % 3] = n
    return [b.snapshot(5).to_bytes() for b in backends], expected


def restore_job(blobs: list[bytes], parallelism: int) -> list[KeyedStateBackend]:
    backend = MemoryStateBackend()
    return [backend.restore_keyed_backend("agg", key_group_range_for_subtask(MAX_P, parallelism, i), MAX_P,
                                          blobs) for i in range(parallelism)]


@pytest.mark.parametrize(("old", "new", "keys"), [
    (2, 3, KEYS), (2, 1, KEYS), (4, 2, KEYS), (3, 3, KEYS), (1, 4, KEYS),
    (2, 3, OTHER_KEYS["int"]), (4, 2, OTHER_KEYS["tuple"]),
])
def test_rescaling_loses_and_duplicates_nothing(old, new, keys):
    blobs, expected = write_job(old, keys)
    restored = restore_job(blobs, new)
    merged: dict[str, dict] = {name: {} for name in expected}
    for subtask, b in enumerate(restored):
        for name, entries in b.dump().items():
            for key, value in entries.items():
                assert key not in merged[name], f"{key!r} restored twice"
                merged[name][key] = value
                assert subtask_for_key_group(MAX_P, new, key_group_for(key, MAX_P)) == subtask
    assert merged == expected
    # and the restored instances keep working: every key is accepted by its new owner
    for key in keys:
        b = restored[subtask_for_key_group(MAX_P, new, key_group_for(key, MAX_P))]
        b.set_current_key(key)
        assert b.value_state("count", default=0).value() == 2


def test_restore_accepts_decoded_snapshots_and_subsets_in_any_order():
    blobs, expected = write_job(2)
    one = KeyedStateBackend("agg", KeyGroupRange.of(MAX_P), MAX_P)
    snaps = [KeyedStateBackend.restore("agg", key_group_range_for_subtask(MAX_P, 2, i), MAX_P, [blobs[i]])
             .snapshot(6) for i in (1, 0)]
    merged = KeyedStateBackend.restore("agg", one.key_group_range, MAX_P, snaps)
    assert merged.dump() == expected
    assert merged.snapshot(7).changed_key_groups == {key_group_for(k, MAX_P) for k in KEYS}


def test_restore_checks_operator_max_parallelism_and_overlap():
    blobs, _ = write_job(2)
    with pytest.raises(StateRestoreError, match="belongs to operator 'agg'"):
        KeyedStateBackend.restore("other", KeyGroupRange.of(MAX_P), MAX_P, blobs)
    wrong_max = KeyedStateBackend("agg", KeyGroupRange(0, 64), 64).snapshot(1).to_bytes()
    with pytest.raises(StateRestoreError, match="max_parallelism 64"):
        KeyedStateBackend.restore("agg", KeyGroupRange.of(MAX_P), MAX_P, [wrong_max])
    with pytest.raises(StateRestoreError, match=r"two snapshots claim key groups \[0, 64\)"):
        KeyedStateBackend.restore("agg", KeyGroupRange.of(MAX_P), MAX_P, [blobs[0], blobs[0]])
    with pytest.raises(StateFormatError):
        KeyedStateBackend.restore("agg", KeyGroupRange.of(MAX_P), MAX_P, [blobs[0][:-3]])


def test_restore_rejects_a_state_that_changed_kind():
    a = KeyedStateBackend("agg", KeyGroupRange(0, 64), MAX_P)
    a.value_state("s")
    b = KeyedStateBackend("agg", KeyGroupRange(64, 128), MAX_P)
    b.list_state("s")
    with pytest.raises(StateRestoreError, match="'s' is a value state"):
        KeyedStateBackend.restore("agg", KeyGroupRange.of(MAX_P), MAX_P,
                                  [a.snapshot(1).to_bytes(), b.snapshot(1).to_bytes()])


def test_state_backend_selection():
    assert isinstance(state_backend_for("memory"), MemoryStateBackend)
    backend = MemoryStateBackend()
    assert state_backend_for(backend) is backend and repr(backend) == "MemoryStateBackend()"
    with pytest.raises(ValueError, match="unknown state_backend 'rocksdb'; known: .*memory"):
        state_backend_for("rocksdb")
    keyed = backend.create_keyed_backend("op", KeyGroupRange(0, 4), 4)
    assert keyed.key_group_range == KeyGroupRange(0, 4) and keyed.max_parallelism == 4
    ops = backend.create_operator_backend("op")
    ops.get_list_state("x").add(1)
    assert backend.restore_operator_backend("op", ops.snapshot()).snapshot() == {"x": [1]}
