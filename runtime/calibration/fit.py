"""Fit a `CostProfile` to a finished run (`JobResult`): pure arithmetic over what the executor
measured, the same on the simulator and on Ray.

* Steps: per task, least squares of CPU seconds per step against records per step
  (`StepTimes.fit`), over the calibration run's steps and, when there is one, those of a short run
  of the job at full speed (`saturated`): a rate-limited run's steps hold a few records each, which
  cannot split a step's cost into per step and per record (Ray, slow-channel at 5,000 rec/s: 8
  records a step, 4.0-4.3 us per record fitted against 1.3-2.0 us measured at full speed, where
  steps hold ~1,000 records); off-CPU time (sleeps, I/O) per record is the same fit's per-record slope
  of elapsed time (`StepTimes.fit_wall`) beyond the CPU's, once the machine's contention (the
  median elapsed/CPU ratio) is taken out. Elapsed time per *step* beyond the CPU (waiting for
  the GIL or a core, most of a low-rate source's) is contention, not the task's cost; so is
  elapsed time per record up to `OFF_CPU_OUTLIER` times the tasks' median stretch of it (a busy
  process's steps are stretched per record too: on Ray up to 3.9x, which read as off-CPU time
  capped a source's max-rate prediction). A vertex
  gets the (lower) median of its tasks; a task more than `OUTLIER` away from it keeps its own.
* Cores: the CPU the task processes spent outside their steps (Ray: calls, serialisation,
  thread hand-offs and the runtime's own threads; measured as process CPU) comes mostly with
  time, not with steps (a sink task that sends nothing spends as much): per second of the run
  it is taken from the cores the steps share. It is measured per regime: over the rate-limited
  calibration run (`background_cores`) and over the full-speed run (`saturated_background_cores`),
  whose bigger steps and buffers make other calls (q8 on Ray: 1.36-1.40 and 1.22-1.26 cores of 2). The
  per-task tallies both fits read are kept in the profile (`calibrated["task_steps"]`), so
  `refit_cpu` can fit a saved profile again.
* Transport: from the barrier trace, each barrier's time from its sender's snapshot to its
  arrival at the receiver (`barrier-in`): the uniform distribution with their median and 5th
  percentile. The calibration run takes unaligned checkpoints, whose barriers
  overtake queued data, so this is the transport and hand-off time, not the queueing. A slow
  link the job declares (`link_delays`, an executor option the prediction applies again) is
  taken out of its barriers' transits: it is the link's, not the transport's.
* Control: the sources' start delay (trigger), the acknowledgement's time after the write
  (`end_to_end_duration` less the task's phases), and the coordinator's finalize time (a
  checkpoint's duration after its last acknowledgement); medians; and the trigger and
  acknowledgement delays' distributions in 5 % steps (a prediction draws from them: on Ray the
  acknowledgement's tail is long, 8 ms median, up to 60 ms, and a checkpoint waits for its
  slowest; sources triggered apart make an aligned task wait). The control path's CPU per
  checkpoint: the CPU of its processes (`JobMetrics.service_cpu`: coordinator and committer on
  Ray) over the run's completed checkpoints. It includes what they spend per second (status
  polls) and per staged record, so it is an upper bound at the calibration's rate.
* Sources: a Ray run's rate-limited sources read at most once per buffer timeout
  (`source_pacing`: Ray's rule, not a fit; measured 2.5-3 ms between a record's due time and its
  read at a 5 ms buffer timeout, which the paced simulator reproduces).
* Timers: a Ray run's tasks count their timer callbacks and how long after their due time they
  ran (`StepTimes.timer_lateness`); each task's mean is its `StepCost.timer_lateness` (a vertex's
  lower median, the default the median over every task), so the simulator's wake-ups, flushes and
  timers are as late as Ray's in that run (a loaded process's: NexMark q8's sources 5.4-6 ms).
* Step sizes: a Ray run's tasks size their steps to last about `STEP_TARGET` of wall time
  (`step_target`: Ray's rule, not a fit). On a loaded machine a step's wall time is several times
  its CPU (full speed on 2 cores: q5's counts 3.0x, 32 records a step where the CPU alone would
  allow ~90), which the simulator reproduces by stretching each step's time by the work sharing
  the machine's cores: the steps running and waiting, and the CPU outside the steps
  (`machine_cores`, `background_cores`). Whole buffers instead make the simulated steps cheaper per record than Ray's and
  overestimated NexMark's throughput by 1.2-1.4x (q5) and 1.6-2.7x (q8).
* Snapshots: least squares of `sync_duration`, of `async_duration` and of `async_cpu` (the
  write's CPU: on Ray the writer thread's, which takes the GIL from the task) against the
  snapshot's size, over every subtask of every completed checkpoint.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from runtime.calibration.profile import STEP_FIELDS, CostProfile
from runtime.core.pacing import STEP_TARGET
from runtime.sim.costs import StepCost, quantile
from vocabulary.links import resolve_link_delays
from vocabulary.task_metrics import StepTimes

#: steps of the trigger and acknowledgement delays' distributions (5 %: 21 points)
QUANTILE_STEPS = 20
#: relative distance from its vertex's median at which a task keeps its own step costs
OUTLIER = 0.25
#: a task has off-CPU time per record (sleeps, I/O) only when its elapsed time per record is
#: more than this many times its CPU's as much as the tasks' median ratio: below it the GIL and
#: the cores stretch it (Ray, 2 cores: 1.0-3.9x, at most 1.6x the median; a sleeping task 27x)
OFF_CPU_OUTLIER = 3.0
#: a snapshot cost per byte is fitted only from sizes whose largest is this many times the
#: smallest: Ray calibration runs with sizes of 0.9-6 KB gave the write 160 ns of CPU and 2 us
#: of time per byte (the counts' keyed state costs more to write than the sources' state, not
#: per byte), which a prediction's 60 KB of channel state turned into 10 ms and 120 ms per
#: write; 0.9-76 KB (backpressure) gave 8 ns
SIZE_SPAN = 8.0
#: `CostProfile.calibrated` key of the per-task step tallies the CPU terms are fitted from
TASK_STEPS = "task_steps"


class CalibrationError(ValueError):
    """The run does not hold what a fit needs (no steps, no checkpoints, no barrier trace)."""


def fit_profile(result: Any, graph: Any, *, cores: int | None, calibrated: dict[str, Any] | None = None,
                since: float = float("-inf"), link_delays: Mapping[str, float] | None = None,
                saturated: Any = None) -> CostProfile:
    """The profile of `result`, a run of `graph` with `trace_barriers=True` and checkpoints
    (checkpoints triggered before `since` are left out: start-up; `link_delays`: the run's;
    `saturated`: a run of the same job at full speed, whose steps are fitted with `result`'s)."""
    tasks = result.metrics.tasks
    if not tasks:
        raise CalibrationError(f"job {result.job_name!r}: the run recorded no task steps (metrics.tasks is empty)")
    completed = [c for c in result.checkpoints if c.completed and c.trigger_time >= since]
    if not completed:
        raise CalibrationError(f"job {result.job_name!r}: no checkpoint completed after the warm-up; calibration "
                               "needs checkpoints (a longer run or a shorter interval)")
    info = dict(calibrated or {})
    # what the CPU terms are fitted from, kept so a saved profile can be fitted again (`refit_cpu`)
    info[TASK_STEPS] = {"duration": result.metrics.duration,
                        "saturated_duration": None if saturated is None else saturated.metrics.duration,
                        "tasks": {name: t.to_json() for name, t in tasks.items()},
                        "saturated": None if saturated is None else
                        {name: t.to_json() for name, t in saturated.metrics.tasks.items()}}
    if cores is not None:
        info["cores_measured"] = cores
    terms, background = fit_cpu(tasks, result.metrics.duration, cores,
                                None if saturated is None else saturated.metrics.tasks,
                                None if saturated is None else saturated.metrics.duration)
    info["background_cpu"] = round(background, 3)  # cores' worth of CPU spent outside steps
    profile = CostProfile(calibrated=info, **terms)
    profile.latency_min, profile.latency_max = fit_transport(result.trace, graph, since, link_delays)
    profile.trigger_delay, profile.ack_delay, profile.finalize = fit_control(completed, graph)
    profile.trigger_delay_quantiles, profile.ack_delay_quantiles = fit_control_quantiles(completed, graph)
    profile.checkpoint_cpu = fit_checkpoint_cpu(result)
    # a rule of the executor, not a measurement: Ray wakes a rate-limited source at most once per
    # buffer timeout (a record waits ~half of it to be read); the simulator's own read when due
    profile.source_pacing = graph.buffer_timeout if result.executor == "ray" else 0.0
    profile.step_target = step_target(result.executor)
    subtasks = [s for c in completed for s in c.subtasks.values()]
    sizes = [s.checkpointed_size for s in subtasks]
    profile.sync_latency, profile.sync_per_byte = fit_size_line(sizes, [s.sync_duration for s in subtasks])
    profile.write_latency, profile.write_per_byte = fit_size_line(sizes, [s.async_duration for s in subtasks])
    profile.write_cpu, profile.write_cpu_per_byte = fit_size_line(sizes, [s.async_cpu for s in subtasks])
    return profile


def fit_cpu(tasks: Mapping[str, StepTimes], duration: float, cores: int | None,
            saturated: Mapping[str, StepTimes] | None = None,
            saturated_duration: float | None = None) -> tuple[dict[str, Any], float]:
    """(the profile's CPU terms: `steps`, the `cores` the steps share, `machine_cores`,
    `background_cores` and `saturated_background_cores`; and the cores' worth of CPU outside steps)
    from the calibration run's per-task tallies over its `duration` (`cores`: the machine's; None:
    a core per task, no machine to share) and, when there is one, the full-speed run's
    (`saturated`, over `saturated_duration`), whose steps are pooled with the calibration run's
    and whose CPU outside the steps is the full-speed regime's."""
    background = _outside_steps(tasks, duration)
    saturated_background = _outside_steps(saturated, saturated_duration) if saturated is not None else 0.0
    if saturated is not None:
        tasks = {name: times.pooled(saturated[name]) if name in saturated else times for name, times in tasks.items()}
    terms: dict[str, Any] = {"steps": fit_steps(dict(tasks)), "cores": None, "machine_cores": 0.0,
                             "background_cores": 0.0, "saturated_background_cores": 0.0}
    if cores is not None:
        terms.update(cores=max(1, round(cores - background)), machine_cores=float(cores),
                     background_cores=round(background, 3), saturated_background_cores=round(saturated_background, 3))
    return terms, background


def _outside_steps(tasks: Mapping[str, StepTimes], duration: float | None) -> float:
    """Cores' worth of the tasks' CPU outside their steps over a run of `duration` seconds."""
    return sum(t.overhead for t in tasks.values()) / duration if duration else 0.0


def refit_cpu(profile: CostProfile) -> CostProfile:
    """`profile` with its steps, cores and step sizes fitted again, by this module's rules, from the
    per-task tallies its calibration kept (`calibrated["task_steps"]`) and the executor it ran on;
    the other terms as they are.
    Raises CalibrationError when the profile has no tallies (a hand-written or older profile)."""
    kept = profile.calibrated.get(TASK_STEPS)
    if not isinstance(kept, dict) or not kept.get("tasks"):
        raise CalibrationError(f"profile of {profile.calibrated.get('job', 'a job')!r} keeps no per-task step "
                               f"tallies ('calibrated.{TASK_STEPS}'): calibrate it again to fit it again")
    tasks = {name: StepTimes.from_json(t) for name, t in kept["tasks"].items()}
    saturated = {name: StepTimes.from_json(t) for name, t in kept["saturated"].items()} \
        if kept.get("saturated") else None
    saturated_duration = kept.get("saturated_duration")
    terms, background = fit_cpu(tasks, float(kept["duration"]), profile.calibrated.get("cores_measured"), saturated,
                                None if saturated_duration is None else float(saturated_duration))
    info = {**profile.calibrated, "background_cpu": round(background, 3)}
    return replace(profile, calibrated=info, step_target=step_target(profile.calibrated.get("executor")), **terms)


def step_target(executor: str | None) -> float:
    """How long the steps of a run on `executor` are sized to last (0: whole buffers)."""
    return STEP_TARGET if executor == "ray" else 0.0


def fit_steps(tasks: dict[str, StepTimes]) -> dict[str, StepCost]:
    """Step costs per vertex (median of its tasks) and per outlying task; "default": the median
    over every task."""
    ratios = [t.wall / t.busy for t in tasks.values() if t.busy > 0]
    contention = max(1.0, statistics.median(ratios)) if ratios else 1.0
    fits: dict[str, tuple[float, float, float, float, float]] = {}
    for name, times in tasks.items():
        per_step, per_record = times.fit()
        if per_step < 0 or per_record < 0:  # noise: keep the total, drop the split
            per_step, per_record = max(0.0, per_step), max(0.0, per_record)
            if times.records:
                per_record = max(0.0, (times.fitted_busy - per_step * times.fitted_steps) / times.records)
        fits[name] = (per_step, per_record, times.fit_wall()[1], times.fit_emitted(per_step),
                      times.mean_timer_lateness)
    stretches = [wall / cpu for _, cpu, wall, _, _ in fits.values() if cpu > 0]
    stretch = max(1.0, statistics.median(stretches)) if stretches else 1.0
    own: dict[str, StepCost] = {}
    for name, (per_step, per_record, wall, per_emitted, lateness) in fits.items():
        sleeps = wall > OFF_CPU_OUTLIER * stretch * per_record
        own[name] = StepCost(per_step, per_record, max(0.0, wall - per_record * contention) if sleeps else 0.0,
                             per_emitted, lateness)
    vertices: dict[str, list[str]] = {}
    for name in own:
        vertices.setdefault(name.rpartition("[")[0] or name, []).append(name)
    steps = {"default": StepCost(_median(c.per_step for c in own.values()), _median(c.per_record for c in own.values()),
                                 timer_lateness=_median(c.timer_lateness for c in own.values()))}
    for vertex, names in vertices.items():
        typical = StepCost(*(_median_low(getattr(own[n], f) for n in names) for f in STEP_FIELDS))
        steps[vertex] = typical
        for name in names:
            if _far(own[name], typical):
                steps[name] = own[name]
    return steps


def fit_transport(trace: Sequence[tuple], graph: Any, since: float = float("-inf"),
                  link_delays: Mapping[str, float] | None = None) -> tuple[float, float]:
    """(latency_min, latency_max) of a data call from the barrier trace (see the module doc)."""
    slow = {str(task): delay for task, delay in resolve_link_delays(link_delays, graph.task_ids()).items()}
    snapshots: dict[tuple[int, str], float] = {}
    arrivals: list[tuple[float, int, str, int]] = []
    for event in trace:
        if len(event) >= 4 and event[1] == "snapshot":
            snapshots.setdefault((event[2], event[3]), event[0])
        elif len(event) >= 5 and event[1] == "barrier-in":
            arrivals.append((event[0], event[2], event[3], event[4]))
    senders = {(str(r.receiver), r.input_channel): str(r.sender) for r in graph.channel_routes()}
    transits = []
    for at, checkpoint_id, receiver, channel in arrivals:
        sender = senders.get((receiver, channel))
        sent = snapshots.get((checkpoint_id, sender)) if sender is not None else None
        if sent is not None and sent >= since and at >= sent:
            transits.append(max(0.0, at - sent - slow.get(sender, 0.0)))
    if len(transits) < 5:
        raise CalibrationError(f"the barrier trace holds {len(transits)} barrier transits; calibration needs "
                               "a run with trace_barriers=True and a few checkpoints")
    transits.sort()
    low, median = quantile(transits, 0.05), quantile(transits, 0.5)
    # the uniform distribution with this median whose 5th percentile is `low`: a real
    # transport's tail is longer than a uniform's, so its median, not its spread, sets the width
    # (measured on Ray: 5th-95th percentiles of 0-124 ms around a median of ~20 ms)
    half = max(0.0, (median - low) / 0.9)  # a uniform: median - 5th percentile = 0.45 x width
    return max(0.0, median - half), median + half


def fit_control(completed: Sequence[Any], graph: Any) -> tuple[float, float, float]:
    """(trigger delay, acknowledgement delay, coordinator finalize time), medians."""
    triggers, acks, finals = control_delays(completed, graph)
    return _median(triggers), _median(acks), _median(finals)


def fit_control_quantiles(completed: Sequence[Any], graph: Any) -> tuple[list[float], list[float]]:
    """The trigger and acknowledgement delays' 0th..100th percentiles in `QUANTILE_STEPS` steps;
    a list is empty with fewer delays than steps (too few for a tail)."""
    triggers, acks, _ = control_delays(completed, graph)
    return _quantiles(triggers), _quantiles(acks)


def control_delays(completed: Sequence[Any], graph: Any) -> tuple[list[float], list[float], list[float]]:
    """Every source's trigger delay (its start delay), every subtask's acknowledgement delay
    (`end_to_end_duration` less its phases) and every checkpoint's finalize time (its duration
    after the last acknowledgement), in seconds."""
    sources = {str(t) for v in graph.vertices if v.source is not None for t in v.task_ids()}
    triggers: list[float] = []
    acks: list[float] = []
    finals: list[float] = []
    for checkpoint in completed:
        latest = 0.0
        for name, sub in checkpoint.subtasks.items():
            if name in sources:
                triggers.append(sub.start_delay)
            phases = sub.start_delay + sub.alignment_duration + sub.sync_duration + sub.async_duration
            acks.append(max(0.0, sub.end_to_end_duration - phases))
            latest = max(latest, sub.end_to_end_duration)
        finals.append(max(0.0, checkpoint.duration - latest))
    return triggers, acks, finals


def _quantiles(values: list[float]) -> list[float]:
    if len(values) < QUANTILE_STEPS:
        return []
    values = sorted(values)
    return [quantile(values, i / QUANTILE_STEPS) for i in range(QUANTILE_STEPS + 1)]


def fit_checkpoint_cpu(result: Any) -> float:
    """CPU seconds of the control path per completed checkpoint (see the module doc)."""
    completed = sum(1 for c in result.checkpoints if c.completed)
    return sum(result.metrics.service_cpu.values()) / completed if completed else 0.0


def fit_size_line(sizes: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(per snapshot, per byte) of `ys` against snapshot sizes: `fit_line`, or the mean per
    snapshot when the sizes span less than `SIZE_SPAN` (their differences then come from what
    else differs between tasks, and a slope would be extrapolated far beyond them)."""
    if not sizes or max(sizes) < SIZE_SPAN * max(1.0, min(sizes)):
        return (max(0.0, sum(ys) / len(ys)) if ys else 0.0), 0.0
    return fit_line(sizes, ys)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) >= 0 of a least-squares line; a flat line when x does not vary."""
    n = len(xs)
    if n == 0:
        return 0.0, 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var <= 1e-12 * max(1.0, mx * mx * n):
        return max(0.0, my), 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    if slope < 0:
        return max(0.0, my), 0.0
    intercept = my - slope * mx
    if intercept < 0:  # through the origin instead
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / max(1e-30, sum(x * x for x in xs))
    return intercept, slope


def _median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def _far(cost: StepCost, typical: StepCost) -> bool:
    def apart(a: float, b: float) -> bool:
        return abs(a - b) > OUTLIER * max(abs(b), 1e-12) and abs(a - b) > 1e-7

    return apart(cost.per_record, typical.per_record) or apart(cost.wait_per_record, typical.wait_per_record) \
        or apart(cost.per_step, typical.per_step) or apart(cost.per_emitted, typical.per_emitted)


def _median_low(values: Iterable[float]) -> float:
    """The lower median: with two tasks, one slow, the typical task is the other one."""
    values = list(values)
    return statistics.median_low(values) if values else 0.0
