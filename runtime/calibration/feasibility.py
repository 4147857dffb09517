"""Whether a profile's costs let the job keep up: the terms that cannot, with their figures.

A profile measured on a busy machine can hold costs the job could never sustain (seen: 0.125 s of
control-path CPU per checkpoint against a 5 ms interval on one core); a prediction with it then
runs until the simulator's time limit. `cannot_keep_up` checks the demand each cost puts on its
resource per second against the resource's capacity, from the profile and the job's settings
alone (pure arithmetic):

* the control path: `checkpoint_cpu` per checkpoint, one checkpoint per `interval`, on the
  profile's `cores` (without cores it has a core of its own in the simulator and takes nothing
  from the job);
* each task: its CPU and off-CPU time per record and per step at the records per second it handles
  at the configured source rate (and per record its window firings emit), against its one thread;
* the shared cores: every task's CPU plus the control path's, against `cores` (less what the
  work outside the steps takes of them: `CostModel.steps_capacity`).

Records and steps per second per task come from the calibration run (`task_rates`): the share of
the source records each task handled there, scaled to the configured rate. A job whose sources
read as fast as they can has no configured rate: only the control path is checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.calibration.profile import CostProfile


@dataclass(frozen=True)
class TaskRate:
    """What one task handles per second at the configured source rate."""

    records: float
    steps: float
    #: records emitted by steps that handled none (window firings)
    emitted: float = 0.0


def task_rates(result: Any, graph: Any) -> dict[str, TaskRate]:
    """Records and steps per second of each task at the configured rate of the job's rate-limited
    sources (the calibration run's share of the source records each task handled); empty when a
    source reads as fast as it can (no configured rate)."""
    sources = [v for v in graph.vertices if v.source is not None]
    if not sources or not all(v.is_rate_limited for v in sources):
        return {}
    rate = sum(float(v.source.rate) for v in sources)
    read = result.metrics.records_in
    if read <= 0:
        return {}
    return {name: TaskRate(times.records / read * rate, times.steps / read * rate, times.emitted / read * rate)
            for name, times in result.metrics.tasks.items()}


def cannot_keep_up(profile: CostProfile, *, interval: float | None,
                   rates: Mapping[str, TaskRate] = {}) -> list[str]:  # noqa: B006 - read only
    """One sentence per cost term the job cannot sustain (empty: none), naming the term (its
    profile field) and the figures."""
    out = []
    cores = profile.cost_model().steps_capacity(paced=bool(rates))
    has = "" if cores is None else f"the profile has {cores:.3g} core(s)" + \
        (" (what the work outside the steps leaves)" if cores < (profile.cores or 0) else "")
    control = profile.checkpoint_cpu / interval if interval and cores is not None else 0.0
    if cores is not None and control >= cores:
        out.append(f"control.checkpoint_cpu: {profile.checkpoint_cpu:.4g} s of CPU per checkpoint, one every "
                   f"{interval:g} s, is {control:.3g} cores' worth; {has}: the control path alone cannot keep up")
    tasks_cpu = 0.0
    for name, rate in sorted(rates.items()):
        cost = profile.step_cost(name)
        fired = cost.per_emitted * rate.emitted
        cpu = cost.per_step * rate.steps + cost.per_record * rate.records + fired
        busy = cpu + cost.wait_per_record * rate.records
        tasks_cpu += cpu
        if busy >= 1.0:
            wait = f" + {cost.wait_per_record * 1e6:.3g} us off-CPU" if cost.wait_per_record else ""
            out.append(f"steps.{profile.step_entry(name)} ({name}): {cost.per_record * 1e6:.3g} us of CPU{wait} per "
                       f"record x {rate.records:,.0f} records/s + {cost.per_step * 1e6:.3g} us per step x "
                       f"{rate.steps:,.0f} steps/s{_firings(cost.per_emitted, rate.emitted)} = {busy:.3g} s of "
                       "work per second at the configured rate: the task cannot keep up")
    if cores is not None and rates and tasks_cpu + control >= cores:
        out.append(f"cores: the tasks need {tasks_cpu:.3g} cores' worth of CPU at the configured rate and the "
                   f"control path {control:.3g}; {has}: the job cannot keep up")
    return out


def _firings(per_emitted: float, emitted: float) -> str:
    return f" + {per_emitted * 1e6:.3g} us per fired record x {emitted:,.0f} fired/s" if per_emitted and emitted else ""
