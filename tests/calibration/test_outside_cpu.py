"""The CPU a task's process spends outside its steps (Ray: calls, serialisation, threads): fitted
per step and per record from a calibration run and its full-speed run, charged with the steps on
the task's core, and derived per record for a profile that stored only its per-second total."""

from __future__ import annotations

import json

import pytest

from runtime.calibration.fit import fit_outside, fit_plane, fit_profile
from runtime.calibration.outside import calibration_duration, has_outside, outside_from_background
from runtime.calibration.predict import at_full_speed
from runtime.calibration.profile import CostProfile
from runtime.jobmaster.registry import get_executor
from runtime.sim.costs import CostModel, StepCost
from runtime.sim.network import NetworkOptions
from tests.calibration.jobs import small_job
from vocabulary.handles import TaskId
from vocabulary.task_metrics import StepTimes

COSTS = CostModel(per_step=3e-5, per_record=4e-5, cores=2)
NETWORK = NetworkOptions(delay_min=0.0005, delay_max=0.003, control_delay=0.001, ack_delay=0.002)
#: the known CPU outside the steps: per step (a call received and sent) and per record (serialisation)
OUTSIDE_STEP, OUTSIDE_RECORD = 2e-4, 3e-5


def _with_process_cpu(result, per_second: float = 0.0) -> None:
    """As Ray measures it: each task's process CPU = its steps' + the known outside CPU."""
    for times in result.metrics.tasks.values():
        times.cpu = (times.busy + OUTSIDE_STEP * times.steps + OUTSIDE_RECORD * times.records
                     + per_second * result.metrics.duration)


@pytest.fixture(scope="module")
def runs() -> tuple:
    env = small_job(records=4000, rate=5000)
    graph = env.get_job_graph("known")
    result = env.execute("known", executor="sim", costs=COSTS, network=NETWORK, seed=5, trace_barriers=True)
    saturated = get_executor("sim")(at_full_speed(graph, 4000), costs=COSTS, network=NETWORK, seed=5)
    _with_process_cpu(result)
    _with_process_cpu(saturated)
    return result, saturated, graph


def test_the_fit_recovers_a_known_cpu_outside_the_steps_from_the_two_runs(runs: tuple) -> None:
    result, saturated, graph = runs
    # the two runs' records per step differ enough to split per step from per record
    slow, fast = result.metrics.tasks["count[0]"], saturated.metrics.tasks["count[0]"]
    assert fast.records / fast.steps > 5 * slow.records / slow.steps
    profile = fit_profile(result, graph, cores=2, saturated=saturated)
    for name in ("default", "Source: generator", "count"):
        assert profile.steps[name].outside_per_step == pytest.approx(OUTSIDE_STEP, rel=1e-6), name
        assert profile.steps[name].outside_per_record == pytest.approx(OUTSIDE_RECORD, rel=1e-6), name
        assert profile.steps[name].per_record == pytest.approx(4e-5, rel=0.1), name  # the steps' own stay
    assert profile.cores == 2  # charged per step and record: the steps get every core measured
    assert profile.calibrated["background_cpu"] > 0 and profile.calibrated["saturated_duration"] > 0
    # the profile file keeps the terms
    again = CostProfile.from_json(json.loads(json.dumps(profile.to_json())))
    assert again.steps["count"].outside_per_record == profile.steps["count"].outside_per_record


def test_without_a_full_speed_run_the_outside_cpu_stays_a_per_second_background(runs: tuple) -> None:
    result, _, graph = runs
    profile = fit_profile(result, graph, cores=4)
    assert not has_outside(profile)
    background = profile.calibrated["background_cpu"]
    assert background > 0 and profile.cores == max(1, round(4 - background))


def test_the_fit_needs_every_tasks_process_cpu_in_both_runs() -> None:
    measured = StepTimes(steps=10, records=100, busy=0.01, cpu=0.02)
    shared = StepTimes(steps=10, records=100, busy=0.01)  # a process shared with siblings: no cpu
    assert fit_outside([{"a": measured}]) == {}
    assert fit_outside([{"a": measured}, {"a": shared}]) == {}
    assert fit_outside([{"a": measured, "b": shared}, {"a": measured, "b": measured}]) == {}


def test_fit_plane_splits_two_terms_and_falls_back_to_one_when_they_cannot_be_told_apart() -> None:
    points = [(100, 800, 100 * 2e-4 + 800 * 3e-5), (10, 9000, 10 * 2e-4 + 9000 * 3e-5)]
    assert fit_plane(points) == pytest.approx((2e-4, 3e-5))
    # proportional steps and records: all of it per record or per step, whichever fits (equally)
    a, b = fit_plane([(10, 100, 1.0), (20, 200, 2.0)])
    assert a * 10 + b * 100 == pytest.approx(1.0)
    # a negative per-step slope is noise: the records carry it all
    assert fit_plane([(100, 1000, 0.01), (10, 10_000, 0.2)])[0] == 0.0


def test_the_simulator_charges_outside_cpu_with_the_step_and_does_not_slow_it() -> None:
    task = TaskId("count", 0)
    costs = CostModel(task_costs={"count": StepCost(1e-5, 2e-6, 0.0, 1e-4, 3e-6)}, slow_tasks={"count": 10.0})
    cpu, wait = costs.step_times(task, 100)
    assert cpu == pytest.approx((1e-5 + 100 * 2e-6) * 10 + 1e-4 + 100 * 3e-6) and wait == 0.0
    default = CostModel(per_step=1e-5, per_record=2e-6, outside_per_step=1e-4, outside_per_record=3e-6)
    assert default.step_times(task, 100)[0] == pytest.approx(1e-5 + 100 * 2e-6 + 1e-4 + 100 * 3e-6)


def test_a_profile_without_the_terms_loads_with_none() -> None:
    doc = {"format": "barrierflow-profile/1", "cores": 1,
           "steps": {"default": {"per_step": 1e-5, "per_record": 2e-6, "wait_per_record": 0.0}}}
    profile = CostProfile.from_json(doc)
    assert profile.steps["default"] == StepCost(1e-5, 2e-6) and not has_outside(profile)
    assert profile.cost_model().step_times(TaskId("x", 0), 10)[0] == pytest.approx(1e-5 + 10 * 2e-6)


def test_an_old_profiles_background_becomes_cpu_per_record_handled() -> None:
    # a Ray calibration of 100,000 records whose full-speed run read 58,349 (5 s of its rate):
    # 8.569 s long, 1.008 cores outside the steps
    profile = CostProfile(steps={"default": StepCost(5e-4, 6e-6), "q5": StepCost(1e-4, 3.5e-5)}, cores=1,
                          calibrated={"background_cpu": 1.008, "cores_measured": 2, "records_in": 100_000,
                                      "saturated_records": 58_349})
    assert calibration_duration(profile.calibrated) == pytest.approx(5 * 100_000 / 58_349)
    records = {"Source[0]": 50_000, "Source[1]": 50_000, "q5[0]": 20_000, "q5[1]": 30_000}
    derived = outside_from_background(profile, records)
    per_record = 1.008 * (5 * 100_000 / 58_349) / 150_000
    assert derived.steps["q5"] == StepCost(1e-4, 3.5e-5, 0.0, 0.0, pytest.approx(per_record))
    assert derived.steps["default"].outside_per_record == pytest.approx(per_record)
    assert derived.cores == 2 and "derived" in derived.calibrated["outside_cpu"]
    assert profile.cores == 1 and not has_outside(profile)  # the profile itself is left alone
    # a stored duration wins; a capped full-speed run says nothing of the duration
    assert calibration_duration({"duration": 9.5, "records_in": 100_000, "saturated_records": 58_349}) == 9.5
    assert calibration_duration({"records_in": 3000, "saturated_records": 3000}) is None
    assert outside_from_background(derived, records) is None  # it has its terms already
    assert outside_from_background(CostProfile(calibrated={"background_cpu": 1.0}), records) is None
