"""The issue's test: a profile fitted from a simulator run with a known cost model recovers that
model's parameters within 10 %, and predicting the same run with it reproduces its figures."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from runtime.calibration.fit import (
    CalibrationError,
    fit_line,
    fit_profile,
    fit_size_line,
    fit_steps,
    fit_transport,
    refit_cpu,
)
from runtime.calibration.predict import METRICS, at_full_speed, calibrate, figures, predict
from runtime.calibration.profile import CostProfile
from runtime.core.pacing import STEP_TARGET
from runtime.sim.costs import CostModel, StepCost
from runtime.sim.network import NetworkOptions
from tests.calibration.jobs import small_job
from vocabulary.task_metrics import StepTimes

KNOWN_COSTS = CostModel(per_step=3e-5, per_record=4e-5, cores=2, checkpoint_cpu=0.003, write_cpu=2e-4,
                        write_cpu_per_byte=1e-8,
                        task_costs={"count[1]": StepCost(3e-5, 4e-5, wait_per_record=1e-4)})
KNOWN_NETWORK = NetworkOptions(delay_min=0.0005, delay_max=0.003, control_delay=0.001, ack_delay=0.002,
                               write_latency=0.004, write_bandwidth=50e6)


@pytest.fixture(scope="module")
def calibrated() -> tuple:
    return calibrate(small_job(records=4000, rate=5000), "known", executor="sim", costs=KNOWN_COSTS,
                     network=KNOWN_NETWORK, seed=5)


@pytest.mark.slow
def test_the_fit_recovers_the_known_model(calibrated: tuple) -> None:
    profile, _ = calibrated
    close = pytest.approx
    for name in ("default", "Source: generator", "count"):
        assert profile.steps[name].per_step == close(3e-5, rel=0.1), name
        assert profile.steps[name].per_record == close(4e-5, rel=0.1), name
    assert profile.steps["count"].wait_per_record == close(0.0, abs=1e-9)  # count[0]: the typical task
    assert profile.steps["count[1]"].wait_per_record == close(1e-4, rel=0.1)  # the outlier keeps its own
    assert profile.cores == 2
    assert profile.latency_min == close(0.0005, rel=0.1)
    assert profile.latency_max == close(0.003, rel=0.1)
    assert profile.trigger_delay == close(0.001, rel=0.1)
    assert profile.ack_delay == close(0.002, rel=0.1)
    assert profile.finalize == close(0.0, abs=1e-9)
    # 16 keys: snapshots of 0.9-4.3 KB, too narrow a span for a cost per byte (`fit.SIZE_SPAN`):
    # each write's mean (4 ms + 20 ns/B, 0.2 ms + 10 ns/B of CPU at ~2.6 KB)
    assert profile.write_per_byte == 0.0 and profile.write_latency == close(0.004 + 2600 / 50e6, rel=0.1)
    assert profile.write_cpu_per_byte == 0.0 and profile.write_cpu == close(2e-4 + 2600 * 1e-8, rel=0.1)
    assert (profile.sync_latency, profile.sync_per_byte) == (0.0, 0.0)
    assert profile.checkpoint_cpu == close(0.003, rel=0.1)
    assert profile.source_pacing == 0.0  # the simulator's sources read when a record is due
    assert len(profile.ack_delay_quantiles) == 21  # the simulator's fixed 2 ms: no spread
    assert profile.ack_delay_quantiles[0] == close(0.002, rel=0.1) and profile.ack_delay_quantiles[-1] == close(0.002, rel=0.1)
    assert len(profile.trigger_delay_quantiles) == 21  # and its fixed 1 ms trigger delay
    assert profile.trigger_delay_quantiles[0] == close(0.001, rel=0.1)
    assert profile.trigger_delay_quantiles[-1] == close(0.001, rel=0.1)


@pytest.mark.slow
def test_snapshot_costs_per_byte_are_recovered_from_sizes_that_span_enough() -> None:
    # 4,000 keys: the counts' state grows from checkpoint to checkpoint (0.9-44 KB)
    profile, _ = calibrate(small_job(records=4000, rate=5000, keys=4000), "known", executor="sim",
                           costs=KNOWN_COSTS, network=KNOWN_NETWORK, seed=5)
    close = pytest.approx
    assert profile.write_latency == close(0.004, rel=0.1)
    assert profile.write_per_byte == close(1 / 50e6, rel=0.1)
    assert profile.write_cpu == close(2e-4, rel=0.1)
    assert profile.write_cpu_per_byte == close(1e-8, rel=0.1)
    assert (profile.sync_latency, profile.sync_per_byte) == (0.0, 0.0)


@pytest.mark.slow
def test_predicting_the_same_run_reproduces_its_figures(calibrated: tuple) -> None:
    profile, measured = calibrated
    predicted = predict(small_job(records=4000, rate=5000), "known", profile, seed=5)
    want, got = figures(measured), figures(predicted, finalize=profile.finalize)
    for metric in METRICS:
        if want[metric] in (None, 0) or want[metric] == 0.0:
            assert got[metric] == pytest.approx(want[metric] or 0.0, abs=1e-9), metric
        else:
            assert got[metric] == pytest.approx(want[metric], rel=0.1), metric


def test_least_squares_splits_step_and_record_costs() -> None:
    times = StepTimes()
    for records in (0, 1, 5, 64, 64, 30):
        times.add(records, 2e-5 + records * 3e-6)
    assert times.fit() == pytest.approx((2e-5, 3e-6))
    same = StepTimes()
    for _ in range(3):
        same.add(10, 1e-3)
    assert same.fit() == pytest.approx((0.0, 1e-4))  # unknowable split: all per record


def test_a_step_that_fires_windows_is_fitted_apart_per_emitted_record() -> None:
    # a window task: steps of a buffer at 20 us + 3 us a record, and every so often a watermark
    # that fires 3,000 results at 13 us each (measured on Ray: NexMark q5's counts, ~40 ms a firing).
    # Pooled into the line, a firing raised every step's cost instead of being a burst of its own
    times = StepTimes()
    for i in range(400):
        records = 1 + i % 50
        times.add(records, 2e-5 + records * 3e-6, 2 * (2e-5 + records * 3e-6), emitted=records)
        if i % 100 == 99:
            times.add(0, 2e-5 + 3000 * 13e-6, 0.08, emitted=3000)
    times.add(0, 1e-5)  # a watermark that fired nothing is an ordinary step
    assert (times.emitting_steps, times.emitted) == (4, 12_000)
    assert times.fit() == pytest.approx((2e-5, 3e-6), rel=0.05)
    assert times.fit_emitted(2e-5) == pytest.approx(13e-6)
    steps = fit_steps({"counts[0]": times, "counts[1]": times.pooled(StepTimes())})
    assert steps["counts"].per_emitted == pytest.approx(13e-6, rel=0.05)
    assert steps["counts"].per_step == pytest.approx(2e-5, rel=0.05)
    assert StepTimes().fit_emitted(1e-5) == 0.0


def test_timer_lateness_is_fitted_per_vertex_from_the_tasks_timers() -> None:
    # Ray counts each task's timer callbacks and how late they ran: a vertex's typical task
    # (the lower median) and the default (the median over every task) carry it to the simulator
    def times(timers: int, late: float) -> StepTimes:
        t = StepTimes(timers=timers, timer_lateness=timers * late)
        for records in (5, 10, 20):
            t.add(records, 2e-5 + records * 3e-6)
        return t

    tasks = {"Source: gen[0]": times(700, 6e-3), "Source: gen[1]": times(760, 5.4e-3),
             "count[0]": times(300, 3.5e-3), "count[1]": times(320, 3.3e-3), "sink[0]": times(0, 0.0)}
    assert tasks["count[0]"].mean_timer_lateness == pytest.approx(3.5e-3)
    assert StepTimes().mean_timer_lateness == 0.0
    steps = fit_steps(tasks)
    assert steps["Source: gen"].timer_lateness == pytest.approx(5.4e-3)
    assert steps["count"].timer_lateness == pytest.approx(3.3e-3)
    assert steps["sink"].timer_lateness == 0.0
    assert steps["default"].timer_lateness == pytest.approx(3.5e-3)


def test_off_cpu_time_per_step_is_contention_not_a_cost_per_record() -> None:
    # a low-rate task whose every step waits 1 ms for the GIL or a core, whatever its records:
    # charged per record it would cap a max-rate prediction at 1 ms / 3 records per step
    times = StepTimes()
    for records in (1, 2, 3, 5, 1, 4):
        times.add(records, 2e-5 + records * 3e-6, 2e-5 + records * 3e-6 + 1e-3)
    sleeper = StepTimes()  # sleeps 100 us per record: that is its cost
    for records in (1, 2, 3, 5, 1, 4):
        sleeper.add(records, 2e-5 + records * 3e-6, 2e-5 + records * 1.03e-4)
    typical = {}
    for name in ("a[0]", "b[0]", "c[0]"):  # no contention: elapsed = CPU
        typical[name] = StepTimes()
        typical[name].add(10, 1e-4)
    steps = fit_steps({"gen[0]": times, "slow[0]": sleeper, **typical})
    assert steps["gen"].wait_per_record == pytest.approx(0.0, abs=1e-9)
    assert steps["slow"].wait_per_record == pytest.approx(1e-4, rel=1e-6)


def test_elapsed_time_stretched_like_the_other_tasks_is_contention_not_off_cpu_time() -> None:
    # Ray calibration runs (2 cores): the GIL and the cores stretch a task's elapsed time per
    # record 1.0-3.9x its CPU (median of the tasks ~2-2.5), a sleeping task's 27x. Read as
    # off-CPU time, the stretch of the most contended source capped its max-rate prediction at
    # 1 / 11.5 us (slow-channel: 128k against 259k rec/s measured on Ray)
    def task(cpu_per_record: float, stretch: float, sleep: float = 0.0) -> StepTimes:
        times = StepTimes()
        for records in (2, 5, 8, 11, 20, 3):
            cpu = 3e-5 + records * cpu_per_record
            times.add(records, cpu, cpu * stretch + records * sleep)
        return times

    tasks = {"gen[0]": task(3.7e-6, 3.1), "gen[1]": task(4.5e-6, 1.1), "parse[0]": task(4e-6, 2.5),
             "count[0]": task(3e-6, 1.9), "count[1]": task(9e-6, 2.0, sleep=2.3e-4)}
    steps = fit_steps(tasks)
    for name in ("gen[0]", "gen[1]", "parse[0]", "count[0]"):
        assert steps.get(name, steps[name.partition("[")[0]]).wait_per_record == 0.0, name
    contention = 2.5  # the five tasks' median elapsed/CPU ratio: what stretches the sleeper's own CPU
    assert steps["count[1]"].wait_per_record == pytest.approx(2.3e-4 + 9e-6 * (2.0 - contention), rel=0.01)


def test_a_cost_per_byte_needs_sizes_that_span_enough() -> None:
    # Ray, slow-channel: 0.9-6 KB snapshots, the counts' (keyed state) writes slower than the
    # sources' whatever their size; a slope through them is a per-task difference, not per byte
    sizes = [936, 3000, 3100, 3700, 4700, 6100] * 5
    cpu = [7e-4, 8.5e-4, 8e-4, 1.2e-3, 1.2e-3, 1.3e-3] * 5
    assert fit_line(sizes, cpu)[1] > 1e-7  # what a plain line says: 100+ ns per byte
    per_write, per_byte = fit_size_line(sizes, cpu)
    assert per_byte == 0.0 and per_write == pytest.approx(sum(cpu) / len(cpu))
    wide = [936, 10_000, 40_000, 76_000]  # backpressure's channel state: a slope it can carry
    assert fit_size_line(wide, [1e-3 + 8e-9 * s for s in wide]) == pytest.approx((1e-3, 8e-9))


def test_steps_at_full_speed_give_the_fit_the_leverage_a_rate_limited_run_lacks() -> None:
    # Ray, slow-channel: at 5,000 rec/s a step holds ~8 records and costs ~4 us a record more or
    # less; at full speed ~1,000 records at 1.4 us each. The slow steps alone cannot say which
    # part is per step: fitted alone they gave 4 us a record, capping a max-rate prediction
    slow, fast = StepTimes(), StepTimes()
    for records in (6, 7, 8, 9, 10) * 40:
        slow.add(records, 3e-5 + 4e-6 * records)
    for records in (960, 1000, 1040) * 10:
        fast.add(records, 3e-5 + 1.4e-6 * records)
    assert slow.fit()[1] == pytest.approx(4e-6)
    per_step, per_record = slow.pooled(fast).fit()
    assert per_record == pytest.approx(1.4e-6, rel=0.05)  # full speed as measured
    assert per_step + 8 * per_record == pytest.approx(3e-5 + 8 * 4e-6, rel=0.1)  # a slow step as measured
    assert (slow.steps, slow.records) == (200, 1600)  # pooling leaves both runs' sums alone


@pytest.mark.slow
def test_a_calibration_reads_the_job_once_more_at_full_speed() -> None:
    env = small_job(records=3000, rate=5000)
    graph = env.get_job_graph("known")
    full = at_full_speed(graph, 1200)
    (source,) = [v.source for v in full.vertices if v.source is not None]
    assert (source.rate, source.count, source.stamp) == (None, 1200, "read")
    (original,) = [v.source for v in graph.vertices if v.source is not None]
    assert (original.rate, original.count) == (5000.0, 3000)  # the job itself is untouched
    assert at_full_speed(small_job(records=3000, rate=None).get_job_graph("known"), 1200) is None
    profile, result = calibrate(env, "known", executor="sim", costs=KNOWN_COSTS, network=KNOWN_NETWORK, seed=5)
    # 5 s of the calibration's rate, at most what the job reads
    assert profile.calibrated["saturated_records"] == 3000 == result.metrics.records_in


def test_a_declared_slow_link_is_not_transport(calibrated: tuple) -> None:
    _, result = calibrated
    graph = small_job(records=4000, rate=5000).get_job_graph("known")
    sender = str(graph.channel_routes()[0].sender)
    late = [(at + 0.05, *rest) if rest[0] == "barrier-in" and rest[2] != sender and
            any(str(r.sender) == sender and (str(r.receiver), r.input_channel) == (rest[2], rest[3])
                for r in graph.channel_routes()) else (at, *rest) for at, *rest in result.trace]
    assert late != list(result.trace)
    base = fit_transport(result.trace, graph)
    assert fit_transport(late, graph)[1] > base[1] + 0.01  # read as transport, the link widens it
    assert fit_transport(late, graph, link_delays={sender: 0.05}) == pytest.approx(base)


def test_cpu_outside_the_steps_takes_from_the_shared_cores(calibrated: tuple) -> None:
    _, result = calibrated
    graph = small_job(records=4000, rate=5000).get_job_graph("known")
    for times in result.metrics.tasks.values():  # as on Ray: 0.3 cores per task outside its steps
        times.cpu = times.busy + 0.3 * result.metrics.duration
    profile = fit_profile(result, graph, cores=4)
    assert profile.cores == 3 and profile.calibrated["background_cpu"] == pytest.approx(1.2)
    assert profile.steps["count"].per_step == pytest.approx(3e-5, rel=0.1)  # the steps' own cost stays
    # the machine keeps its 4 cores for reckoning a step's time: the CPU outside the steps shares them
    assert profile.machine_cores == 4.0 and profile.background_cores == pytest.approx(1.2)
    costs = profile.cost_model()
    assert (costs.cores, costs.machine_cores, costs.background_cores) == (3, 4.0, profile.background_cores)
    unknown = fit_profile(result, graph, cores=None)  # a core per task: no machine to share
    assert (unknown.cores, unknown.machine_cores, unknown.background_cores) == (None, 0.0, 0.0)


def test_the_full_speed_runs_cpu_outside_the_steps_is_measured_as_its_own_regime(calibrated: tuple) -> None:
    _, kept = calibrated
    result, saturated = copy.deepcopy(kept), copy.deepcopy(kept)
    graph = small_job(records=4000, rate=5000).get_job_graph("known")
    for run, outside in ((result, 0.3), (saturated, 0.1)):  # cores' worth per task outside its steps
        for times in run.metrics.tasks.values():
            times.cpu = times.busy + outside * run.metrics.duration
    profile = fit_profile(result, graph, cores=4, saturated=saturated)
    assert profile.background_cores == pytest.approx(1.2) and profile.saturated_background_cores == pytest.approx(0.4)
    assert profile.cores == 3  # the rate-limited run's, rounded
    costs = profile.cost_model()
    assert costs.shared_cores(paced=False).background == pytest.approx(0.4)
    assert costs.shared_cores(paced=True).background == pytest.approx(1.2)
    again = refit_cpu(CostProfile.from_json(json.loads(json.dumps(profile.to_json())), "saved.json"))
    assert (again.background_cores, again.saturated_background_cores) == \
        (profile.background_cores, profile.saturated_background_cores)
    assert fit_profile(result, graph, cores=4).saturated_background_cores == 0.0  # no full-speed run: unmeasured


def test_a_saved_profile_is_fitted_again_from_the_tallies_it_kept(calibrated: tuple) -> None:
    _, result = calibrated
    graph = small_job(records=4000, rate=5000).get_job_graph("known")
    for times in result.metrics.tasks.values():  # as on Ray: 0.3 cores per task outside its steps
        times.cpu = times.busy + 0.3 * result.metrics.duration
    fitted = fit_profile(result, graph, cores=4, saturated=result)
    saved = CostProfile.from_json(json.loads(json.dumps(fitted.to_json())), "saved.json")
    again = refit_cpu(saved)
    assert again.steps == fitted.steps and again.cores == fitted.cores == 3
    assert again.calibrated["background_cpu"] == fitted.calibrated["background_cpu"]
    assert (again.machine_cores, again.background_cores) == (fitted.machine_cores, fitted.background_cores) \
        == (4.0, fitted.calibrated["background_cpu"])
    assert (again.latency_max, again.ack_delay_quantiles) == (fitted.latency_max, fitted.ack_delay_quantiles)
    # the tallies, not the fitted costs, are what a refit reads: less CPU outside steps, more cores
    for times in saved.calibrated["task_steps"]["tasks"].values():
        times["cpu"] = times["busy"]
    assert refit_cpu(saved).cores == 4 and refit_cpu(saved).background_cores == 0.0
    old = replace(saved, calibrated={k: v for k, v in saved.calibrated.items() if k != "task_steps"})
    with pytest.raises(CalibrationError, match="keeps no per-task step tallies"):
        refit_cpu(old)


def test_a_ray_runs_sources_are_paced_by_its_buffer_timeout(calibrated: tuple) -> None:
    # Ray wakes a rate-limited source at most once per buffer timeout: the profile of a Ray run says
    # so (`source_pacing`), and a prediction reads the records as late as Ray does
    _, result = calibrated
    graph = small_job(records=4000, rate=5000).get_job_graph("known")
    assert fit_profile(result, graph, cores=4).source_pacing == 0.0
    result = replace(result, executor="ray")  # the fixture is shared: a copy marked a Ray run
    assert fit_profile(result, graph, cores=4).source_pacing == graph.buffer_timeout == 0.005


def test_a_ray_runs_steps_are_sized_as_ray_sizes_them(calibrated: tuple) -> None:
    # Ray's tasks size their steps to ~2 ms of wall time (`StepPacer`): the profile of a Ray run
    # says so (`step_target`), the simulator's own run takes whole buffers; a saved profile fitted
    # again gets it from the executor its calibration ran on
    _, result = calibrated
    graph = small_job(records=4000, rate=5000).get_job_graph("known")
    sim = fit_profile(result, graph, cores=4, saturated=result)
    assert sim.step_target == 0.0 and refit_cpu(sim).step_target == 0.0
    result = replace(result, executor="ray")  # the fixture is shared: a copy marked a Ray run
    ray = fit_profile(result, graph, cores=4, calibrated={"executor": "ray"}, saturated=result)
    assert ray.step_target == STEP_TARGET and ray.cost_model().step_target == STEP_TARGET
    assert refit_cpu(replace(ray, step_target=0.0)).step_target == STEP_TARGET  # a profile saved without it
