"""The simulator's cost/time model: shared cores (CPU contention), step costs per task, the
synchronous snapshot's CPU and the acknowledgement delay."""

from __future__ import annotations

import statistics

import pytest

from runtime.sim.costs import MIN_CAPACITY, CostModel, CpuCores, StepCost
from runtime.sim.network import NetworkOptions
from tests.calibration.jobs import small_job


def run(costs: CostModel, network: NetworkOptions | None = None, **job: object) -> object:
    return small_job(**job).execute("costs", executor="sim", seed=3, costs=costs, network=network)


def test_cores_no_fewer_than_tasks_change_nothing() -> None:
    free = run(CostModel(), records=600)
    four = run(CostModel(cores=4), records=600)  # 4 tasks: a core each
    assert four.metrics.duration == free.metrics.duration
    assert four.output("out") == free.output("out")


def test_one_shared_core_serialises_the_steps() -> None:
    # max rate, expensive records: two cores' worth of work on one core takes about twice as long
    costs = dict(per_record=2e-4, per_step=1e-4)
    free = run(CostModel(**costs), records=2000, rate=None)
    shared = run(CostModel(cores=1, **costs), records=2000, rate=None)
    busy = sum(t.busy for t in shared.metrics.tasks.values())
    assert shared.metrics.duration >= busy * 0.99  # one core: the steps never overlap
    assert shared.metrics.duration > 1.6 * free.metrics.duration
    assert sorted(r["n"] for r in shared.output("out")) == sorted(r["n"] for r in free.output("out"))


def test_waiting_tasks_take_the_core_in_turn() -> None:
    # FIFO: both sources progress together on one core (neither starves the other)
    result = run(CostModel(cores=1, per_record=2e-4), records=2000, rate=None)
    steps = [result.metrics.tasks[f"Source: generator[{i}]"].steps for i in (0, 1)]
    assert abs(steps[0] - steps[1]) <= 0.1 * max(steps)


def test_off_cpu_time_keeps_the_task_busy_without_a_core() -> None:
    sleepy = {"count": StepCost(1e-5, 1e-6, wait_per_record=5e-4)}
    one_core = run(CostModel(cores=1, task_costs=sleepy), records=1000, rate=None)
    many = run(CostModel(task_costs=sleepy), records=1000, rate=None)
    # the count tasks mostly sleep: one core is hardly slower than one core per task
    assert one_core.metrics.duration < 1.15 * many.metrics.duration
    times = one_core.metrics.tasks["count[0]"]
    assert times.wall > 10 * times.busy


def test_task_costs_win_over_their_vertex_and_the_default() -> None:
    model = CostModel(per_step=1.0, per_record=1.0, task_costs={"count": StepCost(0.1, 0.01),
                                                                "count[1]": StepCost(0.2, 0.02, 0.5)})
    from vocabulary.handles import TaskId

    assert model.step_times(TaskId("count", 0), 10) == pytest.approx((0.2, 0.0))
    assert model.step_times(TaskId("count", 1), 10) == pytest.approx((0.4, 5.0))
    assert model.step_times(TaskId("map", 0), 10) == pytest.approx((11.0, 0.0))


@pytest.mark.slow
def test_a_step_that_handled_no_record_pays_for_what_it_emitted() -> None:
    from vocabulary.handles import TaskId

    model = CostModel(task_costs={"win": StepCost(1e-5, 2e-6, per_emitted=1e-4)})
    assert model.step_times(TaskId("win", 0), 10, emitted=10) == pytest.approx((3e-5, 0.0))
    assert model.step_times(TaskId("win", 0), 0, emitted=300) == pytest.approx((1e-5 + 0.03, 0.0))


def test_a_window_firing_on_the_simulator_is_charged_per_result_it_emits() -> None:
    from runtime import StreamEnvironment
    from runtime.workloads.windows import build_windows_job, window_rows

    def windows(costs: CostModel) -> object:
        env = StreamEnvironment(parallelism=2)
        env.enable_checkpointing(interval=0.02)
        build_windows_job(env, window_rows(600), splits=3)
        return env.execute("windows", executor="sim", seed=3, costs=costs)

    plain = windows(CostModel())
    firing = windows(CostModel(task_costs={"tumbling": StepCost(2e-5, 2e-6, per_emitted=1e-3)}))
    for i in (0, 1):
        before, after = plain.metrics.tasks[f"tumbling[{i}]"], firing.metrics.tasks[f"tumbling[{i}]"]
        assert after.emitting_steps >= 1 and after.emitted > 0
        assert after.emitted == before.emitted
        # an emitting step costs its results; the other steps their records
        assert after.emitting_busy == pytest.approx(after.emitting_steps * 2e-5 + after.emitted * 1e-3)
        assert after.busy - after.emitting_busy == pytest.approx(
            (after.steps - after.emitting_steps) * 2e-5 + after.records * 2e-6)
    assert sorted(map(str, firing.output("tumbling"))) == sorted(map(str, plain.output("tumbling")))


def test_the_control_paths_checkpoint_cpu_takes_a_shared_core() -> None:
    # max rate on one core: each completed checkpoint's 20 ms of coordinator CPU delays the job (the
    # job checkpoints every 20 ms: a control path that needs its whole core must not starve the tasks)
    costs = dict(per_record=2e-5, per_step=1e-4, cores=1)
    base = run(CostModel(**costs), records=6000, rate=None)
    charged = run(CostModel(checkpoint_cpu=0.02, **costs), records=6000, rate=None)
    completed = len(charged.completed_checkpoints)
    assert completed >= 3 and charged.metrics.service_cpu == {"control": pytest.approx(0.02 * completed)}
    assert charged.metrics.duration > base.metrics.duration + 0.015 * completed
    assert sorted(r["n"] for r in charged.output("out")) == sorted(r["n"] for r in base.output("out"))
    own_core = run(CostModel(checkpoint_cpu=0.02, per_record=2e-5, per_step=1e-4), records=6000, rate=None)
    assert own_core.metrics.duration == run(CostModel(per_record=2e-5, per_step=1e-4), records=6000,
                                            rate=None).metrics.duration  # no shared cores: its own


@pytest.mark.slow
def test_a_paced_source_reads_what_fell_due_once_per_pacing_interval() -> None:
    # 5,000 rec/s over 2 sources: a record due every 0.4 ms per source. Paced every 5 ms (Ray's rule
    # at its buffer timeout), a wake-up reads what fell due meanwhile, ~2.5 ms late on average (on Ray
    # 2.5-3 ms between due and read), less where a returned credit or a trigger runs the source
    # sooner; unpaced, each record is read when due (a step that reads it, one that finds nothing)
    free = run(CostModel(), records=3000, stamp="due")
    paced = run(CostModel(source_pacing=0.005), records=3000, stamp="due")
    for i in (0, 1):
        times, free_times = paced.metrics.tasks[f"Source: generator[{i}]"], free.metrics.tasks[f"Source: generator[{i}]"]
        assert free_times.steps >= 2 * free_times.records
        assert times.steps < free_times.steps / 4
    late = paced.metrics.latencies.mean - free.metrics.latencies.mean
    assert 0.001 < late < 0.0035
    assert sorted(r["n"] for r in paced.output("out")) == sorted(r["n"] for r in free.output("out"))


@pytest.mark.slow
def test_late_timers_hold_a_paced_sources_records_longer_and_persist_more() -> None:
    # on Ray a loaded process runs its timers late (measured on NexMark q8: its sources' 5.4-6 ms,
    # its other tasks' 3.3-4 ms): a paced source wakes and flushes that much later, so each buffer
    # holds more records, each record waits longer, and an unaligned barrier finds more output
    # queued at the source (on Ray q8's sources persisted ~2x what the simulator's did without it)
    on_time = run(CostModel(source_pacing=0.005), records=3000, stamp="due")
    late = run(CostModel(source_pacing=0.005, timer_lateness=0.006), records=3000, stamp="due")
    sources = [f"Source: generator[{i}]" for i in (0, 1)]
    assert all(late.metrics.tasks[s].steps < 0.75 * on_time.metrics.tasks[s].steps for s in sources)
    assert 0.004 < late.metrics.latencies.mean - on_time.metrics.latencies.mean < 0.012
    persisted = [statistics.median(c.persisted_bytes for c in r.completed_checkpoints) for r in (on_time, late)]
    assert persisted[1] > 1.3 * persisted[0]
    assert sorted(r["n"] for r in late.output("out")) == sorted(r["n"] for r in on_time.output("out"))


def test_a_tasks_own_timer_lateness_wins_over_the_default() -> None:
    from vocabulary.handles import TaskId

    model = CostModel(timer_lateness=0.002, task_costs={"count": StepCost(0.1, 0.01, timer_lateness=0.005),
                                                        "count[1]": StepCost(0.2, 0.02)})
    assert model.lateness(TaskId("count", 0)) == 0.005
    assert model.lateness(TaskId("count", 1)) == 0.002  # its own entry measured none: the default
    assert model.lateness(TaskId("parse", 0)) == 0.002
    assert CostModel().lateness(TaskId("parse", 0)) == 0.0


def test_a_paced_source_still_reads_at_once_when_a_credit_returns() -> None:
    # count[1] takes ~1 ms per record: the job runs backpressured, aligned checkpoints wait for the
    # barrier to get through its queue. A paced source whose credits come back reads at once (on Ray
    # returned credits are mail, which drives a task whatever its wake-up timer); held to its next
    # wake-up instead, it leaves that channel's window part empty and part late (measured: the
    # checkpoint median 28 % longer than unpaced, 6 % with the credits served at once)
    slow = {"count[1]": 500.0}
    free = run(CostModel(slow_records=slow), records=3000, rate=20000.0, unaligned=False, interval=0.05)
    paced = run(CostModel(slow_records=slow, source_pacing=0.005), records=3000, rate=20000.0, unaligned=False,
                interval=0.05)
    median = statistics.median(c.duration for c in free.completed_checkpoints)
    assert statistics.median(c.duration for c in paced.completed_checkpoints) < 1.15 * median
    assert paced.metrics.duration == pytest.approx(free.metrics.duration, rel=0.02)


def test_sync_snapshot_cpu_and_ack_delay_lengthen_checkpoints() -> None:
    base = run(CostModel(), records=600)
    slower = run(CostModel(sync_latency=0.003), NetworkOptions(ack_delay=0.004), records=600)
    durations = sorted(c.duration for c in base.completed_checkpoints)
    slower_durations = sorted(c.duration for c in slower.completed_checkpoints)
    median = durations[len(durations) // 2]
    assert slower_durations[len(slower_durations) // 2] > median + 0.005  # 3 ms sync + 3.5 ms more ack


def test_a_writes_cpu_is_reported_and_taken_from_its_task() -> None:
    # Ray: the writer thread serialises and writes while the task's work thread waits for the
    # GIL, so an unaligned checkpoint's channel state slows the task that persists it
    costs = CostModel(write_cpu=0.004, write_cpu_per_byte=1e-7)
    base = run(CostModel(), records=600)
    writing = run(costs, records=600)
    subtasks = [s for c in writing.completed_checkpoints for s in c.subtasks.values()]
    assert subtasks and all(s.async_cpu == pytest.approx(costs.write_cost(s.checkpointed_size)) for s in subtasks)
    assert all(s.async_cpu == 0.0 for c in base.completed_checkpoints for s in c.subtasks.values())
    # the tasks' steps wait for their writes' CPU (4.25 ms each): the records behind them arrive later
    assert writing.metrics.latency_percentile(100) > base.metrics.latency_percentile(100) + 0.003
    assert writing.metrics.latency_percentile(99) > base.metrics.latency_percentile(99) + 0.002


@pytest.mark.slow
def test_ack_delays_drawn_from_quantiles_give_checkpoints_a_tail() -> None:
    # 90 % of acknowledgements take 2-4 ms, the rest up to 40 ms (a control path's long tail)
    tail = NetworkOptions(ack_delay_quantiles=(0.002, 0.0025, 0.003, 0.0035, 0.004, 0.004, 0.004, 0.004, 0.004, 0.004,
                                               0.04))
    fixed = run(CostModel(), NetworkOptions(ack_delay=0.003), records=3000)
    drawn = run(CostModel(), tail, records=3000)
    fixed_durations = sorted(c.duration for c in fixed.completed_checkpoints)
    durations = sorted(c.duration for c in drawn.completed_checkpoints)
    assert len(durations) >= 20
    assert max(durations) > max(fixed_durations) + 0.02  # some checkpoint waited for a slow acknowledgement
    assert max(durations) < max(fixed_durations) + 0.045  # never beyond the distribution's top
    assert sorted(r["n"] for r in drawn.output("out")) == sorted(r["n"] for r in fixed.output("out"))


@pytest.mark.slow
def test_trigger_delays_drawn_from_quantiles_make_aligned_tasks_wait() -> None:
    # sources triggered up to 10 ms apart: their barriers arrive apart, the aligned count waits
    fixed = run(CostModel(), NetworkOptions(control_delay=0.001), records=3000, unaligned=False)
    apart = run(CostModel(), NetworkOptions(control_delay=0.001, trigger_delay_quantiles=(0.001, 0.011)),
                records=3000, unaligned=False)
    assert _median(c.alignment_time for c in apart.completed_checkpoints) > \
        _median(c.alignment_time for c in fixed.completed_checkpoints) + 0.002
    assert max(c.alignment_time for c in apart.completed_checkpoints) < 0.011 + 0.003  # the spread and a transport's


def test_write_latency_spread_draws_each_write_within_its_bounds() -> None:
    fixed = run(CostModel(), NetworkOptions(write_latency=0.004), records=600)
    spread = run(CostModel(), NetworkOptions(write_latency=0.004, write_latency_max=0.03), records=600)
    writes = [s.async_duration for c in spread.completed_checkpoints for s in c.subtasks.values()]
    assert all(0.004 <= w <= 0.0301 for w in writes) and max(writes) - min(writes) > 0.01
    fixed_writes = [s.async_duration for c in fixed.completed_checkpoints for s in c.subtasks.values()]
    assert max(fixed_writes) - min(fixed_writes) < 1e-4  # the latency plus a few bytes' worth: no spread
    # a checkpoint waits for its slowest write: the spread lengthens the median checkpoint
    assert _median(c.duration for c in spread.completed_checkpoints) > \
        _median(c.duration for c in fixed.completed_checkpoints) + 0.008


def _median(values: object) -> float:
    ordered = sorted(values)  # type: ignore[call-overload]
    return ordered[len(ordered) // 2]


def test_cores_must_be_positive() -> None:
    with pytest.raises(ValueError, match="CostModel.cores"):
        CpuCores(0)


def test_shared_cores_stretch_a_step_by_the_work_that_wants_them() -> None:
    cores = CpuCores(2)
    assert cores.sharing(0.0) == 1.0  # a free machine: a step lasts its CPU
    cores.occupy(0.0, 1.0)
    assert cores.sharing(0.5) == 1.0  # two wanting two cores
    cores.occupy(0.0, 1.0)
    cores.wait("a")
    cores.wait("b")
    assert cores.sharing(0.5) == pytest.approx(2.5)  # 2 busy, 2 waiting, and the step itself
    assert cores.sharing(1.0) == pytest.approx(1.5)  # both cores freed, the queue still wants them


def test_the_work_outside_the_steps_shares_the_machines_cores_too() -> None:
    # on Ray the steps get one of two cores (the tasks' call handling takes ~1 core's worth), but
    # every runnable process shares both: a step's time is reckoned on the machine's 2 cores with
    # the background among the work that wants them, not on the steps' one core
    cores = CpuCores(1, machine=2, background=1.0)
    assert cores.sharing(0.0) == 1.0  # the step and the background: one core each
    cores.occupy(0.0, 1.0)
    cores.wait("a")
    cores.wait("b")
    assert cores.sharing(0.5) == pytest.approx(2.5)  # (1 busy + 2 waiting + itself + 1 background) / 2
    assert CpuCores(1).sharing(0.0) == CpuCores(1, machine=None, background=0.0).sharing(0.0) == 1.0
    for bad, field in (({"machine": 0.5}, "machine_cores"), ({"background": -0.1}, "background_cores")):
        with pytest.raises(ValueError, match=f"CostModel.{field}"):
            CpuCores(1, **bad)


def test_the_work_outside_the_steps_takes_its_share_of_each_core_in_the_regime_the_job_runs_in() -> None:
    # q8 on Ray, 2 cores: 1.43 cores of call handling in the rate-limited run, 1.28 at full speed.
    # At full speed the machine is saturated: the steps' one core gets what is left, 0.72 of it.
    # A rate-limited job leaves the machine room: whole cores, the background only stretches a
    # step's time (`sharing`)
    model = CostModel(cores=1, machine_cores=2.0, background_cores=1.43, saturated_background_cores=1.28)
    paced, full = model.shared_cores(paced=True), model.shared_cores(paced=False)
    assert (paced.cores, paced.background, paced.speed, paced.share) == (1, 1.43, 1.0, 1.0)
    assert (full.cores, full.background, full.speed) == (1, 1.28, pytest.approx(0.72))
    assert full.occupy(0.0, 0.72) == pytest.approx(1.0) and full.held(0.36) == pytest.approx(0.5)
    # the call handling comes with the steps' work: other work (the control path, a snapshot's write)
    # slows both, so it displaces only the steps' share of the machine (0.72 of 2 cores)
    assert full.share == pytest.approx(0.36) and full.displaced(0.1) == pytest.approx(0.036)
    assert CpuCores(2).displaced(0.1) == 0.1  # no work outside the steps: all of it
    # more capacity than cores is not rounded up into another core (a full-speed calibration run can
    # last under a second, and the background it measured with it), and a core is never faster
    wide = CostModel(cores=1, machine_cores=4.0, background_cores=2.6, saturated_background_cores=1.5)
    for paced in (True, False):
        assert (wide.shared_cores(paced=paced).cores, wide.shared_cores(paced=paced).speed) == (1, 1.0)
    # unmeasured at full speed: the rate-limited run's work
    same = CostModel(cores=1, machine_cores=2.0, background_cores=1.43)
    assert same.shared_cores(paced=False).speed == pytest.approx(0.57)
    # a background at or over the machine (a contended measurement) still leaves the steps a sliver
    crowded = CostModel(cores=1, machine_cores=2.0, background_cores=2.5).shared_cores(paced=False)
    assert crowded.speed == pytest.approx(MIN_CAPACITY)
    # without the machine's cores nothing is slowed; without cores there is a core per task
    assert CostModel(cores=2, background_cores=1.0).shared_cores(paced=True).speed == 1.0
    assert CostModel().shared_cores(paced=False) is None
    for bad in ({"speed": 0.0}, {"speed": 1.5}, {"share": 0.0}, {"share": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CpuCores(1, **bad)


def test_a_job_at_full_speed_runs_on_what_the_full_speed_background_leaves() -> None:
    costs = dict(per_record=1e-4, per_step=2e-5, cores=1, machine_cores=2.0)
    whole = run(CostModel(background_cores=1.0, saturated_background_cores=1.0, **costs), records=3000, rate=None)
    half = run(CostModel(background_cores=1.0, saturated_background_cores=1.5, **costs), records=3000, rate=None)
    # one core at 0.5 of its speed: the same CPU holds it twice as long
    assert half.metrics.duration == pytest.approx(2 * whole.metrics.duration, rel=0.1)
    assert sorted(r["n"] for r in half.output("out")) == sorted(r["n"] for r in whole.output("out"))
    # a completed checkpoint's control-path CPU takes from the steps only their share of the machine
    control = dict(checkpoint_cpu=0.02, per_record=1e-4, per_step=2e-5, cores=1, machine_cores=2.0,
                   background_cores=1.0)
    alone = run(CostModel(**control), records=3000, rate=None)
    with_work = run(CostModel(**{**control, "machine_cores": 4.0, "background_cores": 3.0}), records=3000, rate=None)
    completed = len(alone.completed_checkpoints)
    assert completed >= 3 and len(with_work.completed_checkpoints) >= 3
    free = run(CostModel(**{**control, "checkpoint_cpu": 0.0}), records=3000, rate=None)
    # half the machine is the steps': 10 ms of each 20 ms; a quarter: 5 ms (each on a full-speed core)
    assert alone.metrics.duration - free.metrics.duration == pytest.approx(0.01 * completed, rel=0.35)
    assert with_work.metrics.duration < alone.metrics.duration
    limited = [run(CostModel(background_cores=0.5, saturated_background_cores=s, **costs), records=2000,
                   rate=2000) for s in (0.5, 1.9)]
    assert limited[0].metrics.tasks == limited[1].metrics.tasks


def test_paced_steps_last_about_the_target_and_shared_cores_make_them_smaller() -> None:
    # 100 us a record at full speed: a 2 ms target takes ~17 records a step (with the per-step
    # cost) on a core of its own, Ray's pacer fed the step's time, where whole buffers take up to
    # 64; on one core shared by 4 tasks each step's time is stretched by the work waiting for the
    # core, so the pacer takes fewer records, as on Ray (q5's counts at full speed: 3.0x, 32
    # records a step against ~90 by their CPU alone)
    costs = dict(per_record=1e-4, per_step=2e-5)
    whole = run(CostModel(**costs), records=6000, rate=None)
    paced = run(CostModel(step_target=0.002, **costs), records=6000, rate=None)
    shared = run(CostModel(step_target=0.002, cores=1, **costs), records=6000, rate=None)
    capped = run(CostModel(step_target=0.002, records_per_step=3, **costs), records=6000, rate=None)

    def records_per_step(result: object, task: str) -> float:
        times = result.metrics.tasks[task]
        return times.records / times.steps

    for task in ("Source: generator[0]", "count[0]"):
        assert records_per_step(whole, task) > 30, task
        assert 10 <= records_per_step(paced, task) <= 18, task
        assert records_per_step(shared, task) < 0.6 * records_per_step(paced, task), task
    assert records_per_step(capped, "count[0]") <= 3  # the fixed cap still holds (input buffers)
    assert 10 <= records_per_step(capped, "Source: generator[0]") <= 18
    for result in (paced, shared, capped):
        assert sorted(r["n"] for r in result.output("out")) == sorted(r["n"] for r in whole.output("out"))
