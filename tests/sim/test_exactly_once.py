"""Exactly-once (DESIGN §6) on the simulator, proven over random jobs, seeds and fault plans.

The reference for a job is its failure-free run without checkpointing; the workloads in
`runtime.workloads.seeded` have order-free output multisets, so any fault schedule must commit
the identical multiset and end in the identical keyed state.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime import FaultPlan
from runtime.workloads.seeded import SINK, make_env, multiset, random_spec

_REFERENCES: dict[int, tuple] = {}


def reference(job_seed: int) -> tuple:
    if job_seed not in _REFERENCES:
        spec = random_spec(job_seed)
        result = make_env(spec, mode="none").execute("job", executor="sim", seed=0)
        _REFERENCES[job_seed] = (multiset(result.output(SINK)), result.final_state)
    return _REFERENCES[job_seed]


def run(job_seed: int, mode: str, sim_seed: int, crashes: int, **more):
    spec = random_spec(job_seed)
    faults = FaultPlan.random(seed=sim_seed, crashes=crashes, **more)
    return make_env(spec, mode=mode).execute("job", executor="sim", seed=sim_seed, faults=faults)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
EXACTLY_ONCE_MODES = ["aligned", "unaligned", "timeout"]


@pytest.mark.parametrize("mode", EXACTLY_ONCE_MODES)
@SETTINGS
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 3))
@example(job_seed=0, sim_seed=0, crashes=2)
# a task of the failed execution kept sending during the restart delay (stale-epoch sends)
@example(job_seed=0, sim_seed=187, crashes=1)
# unaligned: in-flight records of the final checkpoint (channel state) were never committed
@example(job_seed=84, sim_seed=84, crashes=0)
@example(job_seed=93, sim_seed=93, crashes=1)
def test_exactly_once_under_crashes(mode: str, job_seed: int, sim_seed: int, crashes: int) -> None:
    expected_output, expected_state = reference(job_seed)
    result = run(job_seed, mode, sim_seed, crashes)
    assert multiset(result.output(SINK)) == expected_output, result.replay
    assert result.final_state == expected_state, result.replay
    # every transaction a failed attempt staged past its restored checkpoint was aborted
    assert result.committer.staged_transactions(SINK) == [], result.replay


def test_recovery_aborts_what_failed_attempts_staged_and_nothing_else() -> None:
    expected_output, _ = reference(13)
    result = run(13, "aligned", 13, 2)
    assert result.restarts == 2
    # three transactions were staged by attempts that failed before their checkpoint completed
    assert result.committer.aborted_transactions == 3
    assert result.committer.staged_transactions(SINK) == []
    assert multiset(result.output(SINK)) == expected_output, result.replay


@pytest.mark.parametrize("mode", EXACTLY_ONCE_MODES)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 2),
       lost_acks=st.integers(0, 1), stalls=st.integers(0, 2), storage_failures=st.integers(0, 1))
def test_exactly_once_under_mixed_faults(mode, job_seed, sim_seed, crashes, lost_acks, stalls,
                                         storage_failures) -> None:
    expected_output, expected_state = reference(job_seed)
    result = run(job_seed, mode, sim_seed, crashes, lost_acks=lost_acks, stalls=stalls,
                 storage_failures=storage_failures, coordinator_crashes=0)
    assert multiset(result.output(SINK)) == expected_output, result.replay
    assert result.final_state == expected_state, result.replay


@pytest.mark.parametrize("mode", EXACTLY_ONCE_MODES)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 3))
def test_exactly_once_with_buffer_debloating(mode: str, job_seed: int, sim_seed: int, crashes: int) -> None:
    """Buffer debloating changes the buffer size senders cut at, mid-run and across restarts;
    an aggressive setting (recalculated every 0.2 ms, sizes down to one record) makes it do so
    even in these short jobs. Exactly-once must not notice."""
    expected_output, expected_state = reference(job_seed)
    spec = random_spec(job_seed)
    env = make_env(spec, mode=mode)
    env.set_buffer_debloating(target=0.0005, period=0.0002, samples=2, threshold=0.0)
    result = env.execute("job", executor="sim", seed=sim_seed, faults=FaultPlan.random(seed=sim_seed, crashes=crashes))
    assert multiset(result.output(SINK)) == expected_output, result.replay
    assert result.final_state == expected_state, result.replay


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 3))
def test_at_least_once_loses_nothing(job_seed: int, sim_seed: int, crashes: int) -> None:
    expected_output, _ = reference(job_seed)
    result = run(job_seed, "at_least_once", sim_seed, crashes)
    got = multiset(result.output(SINK))
    missing = expected_output - got
    assert not missing, f"lost {sum(missing.values())} records; {result.replay}"


def test_same_seed_same_trace_and_output() -> None:
    spec = random_spec(11)
    runs = []
    for _ in range(2):
        env = make_env(spec, mode="aligned")
        result = env.execute("job", executor="sim", seed=5, faults=FaultPlan.random(seed=5, crashes=2), trace=True)
        runs.append(result)
    assert runs[0].trace == runs[1].trace
    assert len(runs[0].trace) > 10
    assert runs[0].output(SINK) == runs[1].output(SINK)
    assert [c.id for c in runs[0].checkpoints] == [c.id for c in runs[1].checkpoints]


def test_different_seeds_give_different_interleavings() -> None:
    spec = random_spec(11)
    traces = {
        tuple(make_env(spec).execute("job", executor="sim", seed=s, trace=True).trace) for s in (1, 2, 3)
    }
    assert len(traces) > 1
