"""The page-view job on real Ray: exactly-once under actor kills, at-least-once loses nothing,
and a failure-free run agrees with the simulator (an agreement test across executors)."""

from __future__ import annotations

import pytest
from ray_jobs import expected_counts, pageview_env, pageview_rows

from checkpoint.options import CheckpointingMode
from runtime import FaultPlan
from runtime.faults import TaskCrash
from runtime.sim.workloads import multiset

ROWS = pageview_rows(6000)
EXPECTED = expected_counts(ROWS)
APP_COUNTS = {app: sum(1 for r in ROWS if r["app"] == app) for app in {r["app"] for r in ROWS}}

PLANS = [
    pytest.param(FaultPlan.random(seed=11, crashes=1), id="1-random-kill"),
    pytest.param(FaultPlan.random(seed=12, crashes=3), id="3-random-kills"),
    pytest.param(FaultPlan.of(TaskCrash(task="count[1]", after_records=1500),
                              TaskCrash(task="Source: collection[0]", at_fraction=0.6)), id="2-named-kills"),
]


@pytest.mark.ray
@pytest.mark.parametrize("faults", PLANS)
def test_exactly_once_with_task_actors_killed(ray_session, faults: FaultPlan) -> None:
    result = pageview_env(ROWS).execute("pv", executor="ray", faults=faults)
    assert result.executor == "ray"
    assert result.restarts >= 1, f"no kill happened: {result.failures}"
    assert all("died" in f for f in result.failures), result.failures  # detected as actor death
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    assert result.final_state["count"]["count"] == APP_COUNTS
    assert result.completed_checkpoints, "no checkpoint completed"
    assert result.metrics.records_in > len(ROWS)  # sources rewound and replayed


@pytest.mark.ray
def test_at_least_once_loses_nothing_with_kills(ray_session) -> None:
    env = pageview_env(ROWS, mode=CheckpointingMode.AT_LEAST_ONCE)
    result = env.execute("pv", executor="ray", faults=FaultPlan.random(seed=5, crashes=2))
    assert result.restarts >= 1
    assert not (EXPECTED - multiset(result.output("pv"))), "records were lost"


@pytest.mark.ray
def test_failure_free_run_agrees_with_the_simulator(ray_session) -> None:
    on_ray = pageview_env(ROWS).execute("pv", executor="ray")
    on_sim = pageview_env(ROWS).execute("pv", executor="sim", seed=3)
    assert on_ray.restarts == 0 and on_sim.restarts == 0
    assert multiset(on_ray.output("pv")) == multiset(on_sim.output("pv")) == EXPECTED
    assert on_ray.final_state == on_sim.final_state
    assert on_ray.sink_names == on_sim.sink_names
    assert on_ray.metrics.records_in == on_sim.metrics.records_in == len(ROWS)
    assert on_ray.completed_checkpoints and all(c.duration >= 0 for c in on_ray.completed_checkpoints)
