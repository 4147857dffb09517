"""Coordinator crashes on the simulator, standalone and highly available.

Standalone: the coordinator's memory is lost; a new one recovers completed checkpoints from
storage. ZooKeeper mode (simulated by the in-memory HA services): the standby coordinator wins
the election and takes over the shared store and ID counter. Either way the job fails over
globally, stays exactly-once, and checkpoint ids strictly increase across the failover.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime import FaultPlan
from runtime.sim.executor import SimExecutor
from runtime.workloads.seeded import SINK, make_env, multiset, random_spec
from vocabulary.fault_plan import CoordinatorCrash

_REFERENCES: dict[int, tuple] = {}


def reference(job_seed: int) -> tuple:
    if job_seed not in _REFERENCES:
        result = make_env(random_spec(job_seed), mode="none").execute("job", executor="sim", seed=0)
        _REFERENCES[job_seed] = (multiset(result.output(SINK)), result.final_state)
    return _REFERENCES[job_seed]


def run(job_seed: int, sim_seed: int, ha: bool, faults: FaultPlan):
    env = make_env(random_spec(job_seed), mode="aligned")
    if ha:
        env.set_high_availability("zookeeper", cluster_id="sim")
    return env.execute("job", executor="sim", seed=sim_seed, faults=faults, trace=True)


def trigger_order(result) -> list[int]:
    ids: list[int] = []
    for event in result.trace:
        if len(event) > 2 and event[1] == "trigger" and (not ids or ids[-1] != event[2]):
            ids.append(event[2])
    return ids


@pytest.mark.slow
@pytest.mark.parametrize("ha", [False, True], ids=["standalone", "ha"])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000),
       coordinator_crashes=st.integers(1, 2), crashes=st.integers(0, 1))
@example(job_seed=3, sim_seed=3, coordinator_crashes=2, crashes=1)
# standalone: a coordinator restarted before any checkpoint completed reused ids 1, 2
@example(job_seed=0, sim_seed=96, coordinator_crashes=2, crashes=1)
@example(job_seed=43, sim_seed=99, coordinator_crashes=1, crashes=1)
def test_exactly_once_and_increasing_ids_across_coordinator_failover(ha, job_seed, sim_seed,
                                                                     coordinator_crashes, crashes) -> None:
    expected_output, expected_state = reference(job_seed)
    faults = FaultPlan.random(seed=sim_seed, crashes=crashes, coordinator_crashes=coordinator_crashes)
    result = run(job_seed, sim_seed, ha, faults)
    assert multiset(result.output(SINK)) == expected_output, result.replay
    assert result.final_state == expected_state, result.replay
    ids = trigger_order(result)
    assert ids == sorted(set(ids)), f"checkpoint ids not strictly increasing: {ids}"
    stats_ids = [c.id for c in result.checkpoints]
    assert len(stats_ids) == len(set(stats_ids))


def test_the_standby_coordinator_takes_over_in_ha_mode() -> None:
    faults = FaultPlan.of(CoordinatorCrash(at=0.004))
    result = run(3, 3, ha=True, faults=faults)
    leaders = [event[2] for event in result.trace if len(event) > 2 and event[1] == "leader"]
    assert leaders == ["coordinator-1"]
    assert any("coordinator crash" in f for f in result.failures)
    expected_output, _ = reference(3)
    assert multiset(result.output(SINK)) == expected_output


@pytest.mark.slow
def test_the_simulator_records_the_crash_and_the_promotion_as_ray_does() -> None:
    """The job master's `coordinators` on the simulator: the same record as on Ray (tests/ray/
    test_ray_ha.py) — when the leader died, when the standby was promoted, which checkpoint it
    recovered — and the result lists the dead coordinator's checkpoints too."""
    env = make_env(random_spec(3), mode="aligned")
    env.set_high_availability("zookeeper", cluster_id="sim")
    sim = SimExecutor(env.get_job_graph("job"), seed=3, faults=FaultPlan.of(CoordinatorCrash(at=0.03)))
    result = sim.run()
    assert sim.coordinators.crash_times == [pytest.approx(0.03)]
    assert sim.coordinators.promotion_times == sim.coordinators.crash_times
    before = [c for c in result.checkpoints if c.completed and c.end_time < 0.03]
    assert before and sim.coordinators.history, "need a checkpoint completed by the dead coordinator"
    assert sim.coordinators.recovered_checkpoints == [before[-1].id]
    assert [c.id for c in result.checkpoints[:len(sim.coordinators.history)]] == \
        [c.id for c in sim.coordinators.history]
    assert any(c.trigger_time > 0.03 for c in result.checkpoints)
    # the result says how the coordinators were highly available, and how often a standby took over
    assert result.high_availability.startswith("the simulator's in-memory leader election") and result.promotions == 1
    assert result.coordinator_crashes == 1
    quiet = run(3, 3, ha=False, faults=FaultPlan())
    assert quiet.high_availability is None and quiet.coordinator_crashes == 0
