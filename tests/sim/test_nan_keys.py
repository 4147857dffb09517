"""NaN keys: every NaN is one key, as in Flink (whose keys compare by their serialised bytes).

Python's NaN is unequal to itself and each record carries its own NaN object, so without care
10,000 NaN records became 10,000 keys of count 1. One NaN key must hold for key-group hashing,
state lookup and snapshots and restores (full, incremental), on the record path and the vectorised
path (`tests/ray/test_ray_pageview.py` runs the same job on Ray).
"""

from __future__ import annotations

import pytest

from runtime import FaultPlan, StreamEnvironment
from runtime.workloads.scenarios import nan_key_counts, nan_keys_job
from state.key_groups import KeyGroupRange, key_group_for
from state.keyed import KeyedStateBackend

NAN_RECORDS = 2_000


def nan_env(*, vectorised: bool, backend: str = "memory", storage: str | None = None) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=64)
    env.enable_checkpointing(interval=0.001, storage=storage, state_backend=backend)
    nan_keys_job(env, NAN_RECORDS, vectorised=vectorised)
    return env


def test_distinct_nan_objects_are_one_key_of_the_state_backend() -> None:
    backend = KeyedStateBackend("op", KeyGroupRange(0, 128), 128)
    for _ in range(100):
        backend.set_current_key(float("nan"))
        state = backend.value_state("n", default=0)
        state.update(state.value() + 1)
    backend.set_current_key((1, float("nan")))  # inside a tuple key too
    backend.value_state("n", default=0).update(7)
    backend.set_current_key((1, float("nan")))
    assert backend.value_state("n", default=0).value() == 7
    assert backend.num_keys == 2
    backend.map_state("m").put(float("nan"), 1)  # map keys alike
    backend.map_state("m").put(float("nan"), 2)
    assert backend.map_state("m").items() == [(pytest.approx(float("nan"), nan_ok=True), 2)]
    assert key_group_for(float("nan"), 128) == key_group_for(-float("nan"), 128)


def test_a_restored_nan_key_is_the_same_key() -> None:
    """A NaN key read back from a snapshot is the key later NaN records update, not a second one."""
    backend = KeyedStateBackend("op", KeyGroupRange(0, 128), 128)
    backend.set_current_key(float("nan"))
    backend.value_state("n", default=0).update(5)
    blob = backend.snapshot(1).to_bytes()
    restored = KeyedStateBackend.restore("op", KeyGroupRange(0, 128), 128, [blob])
    restored.set_current_key(float("nan"))
    state = restored.value_state("n", default=0)
    assert state.value() == 5
    state.update(6)
    assert restored.num_keys == 1


@pytest.mark.parametrize("vectorised", [False, True], ids=["records", "vectorised"])
def test_nan_records_count_as_one_key_on_the_simulator(vectorised: bool) -> None:
    result = nan_env(vectorised=vectorised).execute("nans", executor="sim", seed=3)
    assert nan_key_counts(result) == {"count": [NAN_RECORDS], "per-key": [NAN_RECORDS]}
    assert max(r["count"] for r in result.output("counts") if r["k"] != r["k"]) == NAN_RECORDS


@pytest.mark.parametrize("backend", ["memory", "incremental"])
def test_nan_keys_stay_one_key_across_restores(tmp_path, backend: str) -> None:
    """Crashes restore the NaN key from checkpoints (full, or base plus deltas) again and again."""
    env = nan_env(vectorised=False, backend=backend, storage=str(tmp_path / "chk"))
    result = env.execute("nans", executor="sim", seed=5, faults=FaultPlan.random(seed=5, crashes=3))
    assert result.restored_checkpoints, "no restore happened"
    assert nan_key_counts(result) == {"count": [NAN_RECORDS], "per-key": [NAN_RECORDS]}
