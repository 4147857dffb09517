"""`SharedStateRegistry` unit tests, including the seed's chk-1/chk-2/chk-3 `4.sst`/`5.sst` case."""

from __future__ import annotations

import pytest

from state.registry import RegistryError, SharedStateRegistry, manifest_key, reuse_floor_of
from vocabulary.handles import StateHandle


def seg(key: str, path: str, offset: int, length: int = 10, size: int = 100) -> StateHandle:
    return StateHandle(path, size, f"sum-{path}-{offset}", offset, length, key=key)


def test_seed_chk2_chk3_concurrent_4sst_5sst_keeps_the_live_segment() -> None:
    """Two concurrent checkpoints sharing a file: chk-1 done; chk-2 and chk-3 both based on chk-1; chk-2 completes first.

    chk-3 uploaded its own copy of 4.sst next to 5.sst in physical file F3. Registering chk-3
    finds 4.sst registered by chk-2 and reuses that copy, so F3's 4.sst has no reference — but
    5.sst, registered right after, lives in F3. Deciding deletion per handle would delete F3.
    """
    registry = SharedStateRegistry()
    chk1 = [seg("1.sst", "F1", 0), seg("2.sst", "F1", 10), seg("3.sst", "F1", 20)]
    assert registry.register_checkpoint(1, chk1) == {}
    assert registry.collect() == []
    # chk-2 and chk-3 are both based on chk-1 (reuse floor 1)
    chk2 = [*chk1, seg("4.sst", "F2", 0)]
    chk3 = [*chk1, seg("4.sst", "F3", 0), seg("5.sst", "F3", 10)]
    assert registry.register_checkpoint(2, chk2, [1]) == {}
    assert registry.collect() == []
    replaced = registry.register_checkpoint(3, chk3, [1])
    assert replaced == {seg("4.sst", "F3", 0): seg("4.sst", "F2", 0)}
    assert registry.collect() == []  # F3 holds 5.sst: not deleted
    assert registry.handle_of("5.sst").path == "F3"
    # chk-3 subsumes chk-2 (retained = 1): F2 still holds chk-3's 4.sst
    registry.release_checkpoint(2)
    registry.release_checkpoint(1)
    assert registry.collect() == []
    assert registry.reference_count("4.sst") == 1
    assert set(registry.live_files()) == {"F1", "F2", "F3"}
    # a later checkpoint that no longer uses F1/F2 releases them, after the horizon passes
    registry.register_checkpoint(4, [seg("5.sst", "F3", 10), seg("6.sst", "F4", 0)], [3])
    registry.release_checkpoint(3)
    assert registry.collect() == []  # keys of chk-3 are at the horizon: a task may still reuse them
    registry.register_checkpoint(5, [seg("5.sst", "F3", 10), seg("6.sst", "F4", 0)], [4])
    registry.release_checkpoint(4)
    assert registry.collect() == ["F1", "F2"]
    # F3's dead 4.sst copy stays until 5.sst dies too: that is space amplification
    stats = registry.stats()
    assert stats.physical_bytes == 200 and stats.live_bytes == 20


def test_keys_reused_by_a_lagging_task_survive_until_the_horizon_passes() -> None:
    registry = SharedStateRegistry()
    registry.register_checkpoint(1, [seg("a", "F1", 0)], [1])
    registry.register_checkpoint(2, [seg("b", "F2", 0)], [1])  # a task still based on chk-1
    registry.release_checkpoint(1)
    assert registry.collect() == []  # "a" could still be reused by that task
    assert registry.reference_count("a") == 0
    registry.register_checkpoint(3, [seg("b", "F2", 0)], [2])
    registry.release_checkpoint(2)
    assert registry.collect() == ["F1"]


def test_manifest_keys_carry_floors_and_are_not_counted() -> None:
    key = manifest_key("count[0]", 7, 5)
    assert reuse_floor_of(key) == 5 and reuse_floor_of("count[0]/kg1") is None
    registry = SharedStateRegistry()
    registry.register_checkpoint(7, [StateHandle("m", 5, "x", key=key), seg("a", "F", 0)])
    assert registry.horizon == 5
    assert registry.reference_counts() == {"a": 1}


def test_handles_without_key_are_ignored_and_double_registration_fails() -> None:
    registry = SharedStateRegistry()
    registry.register_checkpoint(1, [StateHandle("own", 3, "c")])
    assert registry.live_files() == []
    with pytest.raises(RegistryError, match="checkpoint 1 is already registered"):
        registry.register_checkpoint(1, [])


def test_rebuild_after_restart_counts_only_the_recovered_checkpoints() -> None:
    registry = SharedStateRegistry()
    registry.register_checkpoint(1, [seg("a", "F1", 0)])
    registry.register_checkpoint(2, [seg("a", "F1", 0), seg("b", "F2", 0)])
    registry.rebuild([(2, [seg("a", "F1", 0), seg("b", "F2", 0)], [2])])
    assert registry.registered_checkpoints == [2]
    assert registry.reference_counts() == {"a": 1, "b": 1}
    registry.register_checkpoint(3, [seg("c", "F3", 0)], [3])
    registry.release_checkpoint(2)
    assert registry.collect() == ["F1", "F2"]
    assert registry.collect(ignore_horizon=True) == []
