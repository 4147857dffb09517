"""Unions on the simulator, including a stream unioned with itself.

Two edges between the same pair of vertices are two channels: a self-union sharing one input
channel would fail the job ("push on channel 1 after its EndOfPartition") or never finish. Every shape must commit the failure-free expectation, with crashes too.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.options import CheckpointingMode, RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 5}"} for i in range(300)]
OTHER = [{"id": 1000 + i, "key": f"k{i % 3}"} for i in range(40)]


def build(shape: str, mode: str) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=4, buffer_timeout=0.001)
    if mode != "none":
        env.enable_checkpointing(
            interval=0.002, unaligned=mode == "unaligned", tolerable_failures=1000,
            mode=CheckpointingMode.AT_LEAST_ONCE if mode == "at_least_once" else CheckpointingMode.EXACTLY_ONCE,
        )
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001))
    a = env.from_collection(ROWS, splits=3).map(lambda r: {**r, "side": "a"}, name="a")
    if shape == "self":
        out = a.union(a)
    elif shape == "self-rebalanced":  # a forward and a rebalance edge from the same vertex
        out = a.union(a.rebalance())
    elif shape == "three":
        b = env.from_collection(OTHER, splits=2).map(lambda r: {**r, "side": "b"}, name="b")
        out = a.union(b, a)
    elif shape == "keyed":
        counts = a.key_by("key").process(CountPerKey(), name="count")
        out = counts.union(counts)
    else:
        raise AssertionError(shape)
    out.sink_to(CollectSink("out"))
    return env


def expected(shape: str) -> Counter:
    a = [{**r, "side": "a"} for r in ROWS]
    if shape == "three":
        return multiset(a + [{**r, "side": "b"} for r in OTHER] + a)
    if shape == "keyed":
        per_key = Counter(r["key"] for r in ROWS)
        counts = [{"key": k, "count": c} for k, n in per_key.items() for c in range(1, n + 1)]
        return multiset(counts + counts)
    return multiset(a + a)


SHAPES = ["self", "self-rebalanced", "three", "keyed"]


@pytest.mark.parametrize("shape", SHAPES)
def test_union_without_checkpoints_emits_every_record_of_every_input(shape: str) -> None:
    result = build(shape, "none").execute("union", executor="sim", seed=1)
    assert multiset(result.output("out")) == expected(shape), result.replay


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
@pytest.mark.parametrize("seed", [3, 11])
def test_union_is_exactly_once_under_crashes(shape: str, mode: str, seed: int) -> None:
    faults = FaultPlan.random(seed=seed, crashes=2)
    result = build(shape, mode).execute("union", executor="sim", seed=seed, faults=faults)
    assert result.restarts >= 1, result.replay  # a drawn crash point may lie past the end of its task
    assert multiset(result.output("out")) == expected(shape), result.replay


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(shape=st.sampled_from(SHAPES), mode=st.sampled_from(["aligned", "unaligned", "at_least_once"]),
       seed=st.integers(0, 10_000), crashes=st.integers(0, 3))
def test_union_under_random_faults(shape: str, mode: str, seed: int, crashes: int) -> None:
    faults = FaultPlan.random(seed=seed, crashes=crashes)
    result = build(shape, mode).execute("union", executor="sim", seed=seed, faults=faults)
    output = multiset(result.output("out"))
    if mode == "at_least_once":
        assert not expected(shape) - output, result.replay  # nothing lost
    else:
        assert output == expected(shape), result.replay
