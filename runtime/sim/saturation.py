"""Saturation: a simulated run that cannot keep up, recognised from its own figures, and the
resource that holds it back.

Theory of operation
-------------------
A prediction whose costs exceed what a resource can give (the control path's CPU per checkpoint
above the interval on the cores the job shares, a task slower per record than its rate allows, a
link slower than its traffic) does not fail: its backlog grows until the simulator's time limit,
an hour of virtual time later. `SaturationMonitor` watches the run in windows of virtual time
instead. At every tenth of a window the simulator hands it a `Sample` of cumulative figures (the
virtual clock, each task's busy and CPU seconds, the control path's CPU, the sources' lag, which
tasks are out of credit, how much control-path CPU waits for a core); at each window's end it
compares the last `windows` windows:

* **the sources fall behind**: every source that reads at a rate is overdue (`SplitReader.lag`),
  the largest lag grew in each of those windows and is longer than a window: the job does not
  keep up with its rate;
* **it cannot finish in time**: the sources read as fast as they can, and at the pace of those
  windows the records still to read need more virtual time than the run has left.

Either way the run stops with a `SaturationError` naming the resource that was saturated over
those windows, checked in this order: the shared cores (`CostModel.cores`) busy at least
`BUSY` of the time, said to be the control path's when it took the largest share; a task busy at
least `BUSY` of the time (its CPU and its off-CPU time); a task out of credit at least `BUSY` of
the samples while the tasks it sends to were not busy (the links it sends on); otherwise none
(the figures say so). Everything is virtual time and counts: a seed replays the same verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: share of a window a resource must be busy to count as saturated
BUSY = 0.95
#: samples per window (the backpressure figure is the share of samples a task was out of credit)
SAMPLES_PER_WINDOW = 10


@dataclass(frozen=True)
class Sample:
    """Cumulative figures of a run at virtual time `now` (seconds)."""

    now: float
    #: task -> busy seconds so far (CPU and off-CPU), and CPU seconds so far
    busy: Mapping[str, float]
    cpu: Mapping[str, float]
    #: the control path's CPU seconds so far (`CostModel.checkpoint_cpu` per completed checkpoint)
    control_cpu: float
    #: rate-limited source task -> seconds its next record is overdue (empty: none reads at a rate)
    lags: Mapping[str, float]
    #: tasks out of output credit now
    backpressured: frozenset[str]
    #: records the sources read so far and still have to read (None: unbounded)
    records_read: int
    records_left: int | None
    #: control-path CPU slices waiting for a shared core now
    control_waiting: int = 0
    #: task -> the tasks it sends to
    downstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class SaturationError(RuntimeError):
    """A simulated run stopped because it cannot keep up; `resource` names what held it back."""

    def __init__(self, message: str, resource: str) -> None:
        super().__init__(message)
        self.resource = resource


class SaturationMonitor:
    """Judges `Sample`s window by window (see the module docstring).

    Args:
        window: virtual seconds per window.
        windows: consecutive windows the verdict needs.
        cores: the shared cores (None: every task has its own).
        max_time: the run's virtual time limit (for "cannot finish in time").
    """

    def __init__(self, window: float, *, windows: int = 4, cores: int | None = None,
                 max_time: float = float("inf")) -> None:
        if not window > 0 or windows < 2:
            raise ValueError(f"SaturationMonitor: window must be > 0 and windows >= 2, got {window!r}, {windows!r}")
        self.window, self.windows, self.cores, self.max_time = window, windows, cores, max_time
        #: virtual time of the next sample the simulator should take
        self.next_at = window / SAMPLES_PER_WINDOW
        self._ends: list[Sample] = []  # the sample at each window's end (the run's start first)
        self._out_of_credit: list[dict[str, int]] = [{}]  # per window: task -> samples out of credit
        self._samples: list[int] = [0]

    def observe(self, sample: Sample) -> SaturationError | None:
        """Take a sample; at a window's end, the verdict (None: keeps up, or too early to say)."""
        self.next_at = sample.now + self.window / SAMPLES_PER_WINDOW
        if not self._ends:
            self._ends.append(sample)
            return None
        counts = self._out_of_credit[-1]
        for task in sample.backpressured:
            counts[task] = counts.get(task, 0) + 1
        self._samples[-1] += 1
        if sample.now - self._ends[-1].now < self.window:
            return None
        self._ends.append(sample)
        self._out_of_credit.append({})
        self._samples.append(0)
        keep = self.windows + 1
        del self._ends[:-keep], self._out_of_credit[:-keep], self._samples[:-keep]
        return self._verdict()

    def _verdict(self) -> SaturationError | None:
        if len(self._ends) <= self.windows:
            return None
        first, last = self._ends[0], self._ends[-1]
        behind = self._behind() or self._too_slow()
        if behind is None:
            return None
        found = self._bottleneck()
        saturated = f"saturated: {found[0]} ({found[1]})" if found is not None else \
            f"no core, task or link was busy {BUSY:.0%} of the time"
        return SaturationError(f"cannot keep up: {behind}; {saturated}; stopped at virtual {last.now:.3g} s "
                               f"(judged over virtual {first.now:.3g}-{last.now:.3g} s)",
                               found[0] if found is not None else "none")

    def _behind(self) -> str | None:
        lags = [max(s.lags.values()) if s.lags else None for s in self._ends]
        if any(lag is None for lag in lags) or not all(min(s.lags.values()) > 0 for s in self._ends[1:]):
            return None
        grew = all(b > a for a, b in zip(lags, lags[1:]))  # type: ignore[operator]
        if not grew or lags[-1] <= self.window:  # type: ignore[operator]
            return None
        shown = ", ".join(f"{lag:.3g}" for lag in lags[1:])  # type: ignore[union-attr]
        return f"the sources fell behind their rate, further in each of the last {self.windows} windows ({shown} s)"

    def _too_slow(self) -> str | None:
        first, last = self._ends[0], self._ends[-1]
        if last.lags or last.records_left is None or last.records_left <= 0:
            return None
        rate = (last.records_read - first.records_read) / (last.now - first.now)
        needed = last.records_left / rate if rate > 0 else float("inf")
        if last.now + needed <= self.max_time:
            return None
        return (f"at {rate:,.0f} records per virtual second the {last.records_left:,} records left need "
                f"{needed:,.0f} more virtual seconds, beyond the run's {self.max_time:g}")

    def _bottleneck(self) -> tuple[str, str] | None:
        """(the saturated resource, the figures that say so), or None."""
        first, last = self._ends[0], self._ends[-1]
        span = last.now - first.now
        cpu = {t: last.cpu.get(t, 0.0) - first.cpu.get(t, 0.0) for t in last.cpu}
        busy = {t: last.busy.get(t, 0.0) - first.busy.get(t, 0.0) for t in last.busy}
        control = last.control_cpu - first.control_cpu
        if self.cores is not None:
            used = (sum(cpu.values()) + control) / (span * self.cores)
            if used >= BUSY:
                consumers = {"the control path": control, **{f"task {t}": c for t, c in cpu.items()}}
                top = max(consumers, key=lambda name: (consumers[name], name))
                rest = ", ".join(f"{name} {consumers[name] / span:.3g}" for name in sorted(consumers, key=lambda n: (
                    -consumers[n], n))[1:4])
                waiting = f"; {last.control_waiting} control-path CPU slice(s) waiting for a core" \
                    if last.control_waiting else ""
                evidence = (f"the {self.cores} shared core(s) were {used:.0%} busy: {top} took "
                            f"{consumers[top] / span:.3g} cores' worth per virtual second, {rest}{waiting}")
                if consumers[top] >= 0.5 * used * span * self.cores:
                    return f"{top}'s CPU", evidence
                return f"the {self.cores} shared core(s)", evidence
        if busy:
            top = max(busy, key=lambda t: (busy[t], t))
            if busy[top] / span >= BUSY:
                off = busy[top] - cpu.get(top, 0.0)
                split = f"{cpu.get(top, 0.0) / span:.0%} CPU, {off / span:.0%} off-CPU" if off > 1e-12 else "all CPU"
                return f"task {top}'s time", f"busy {busy[top] / span:.0%} of virtual time ({split})"
        samples = sum(self._samples[1:]) or 1
        credit = {t: sum(w.get(t, 0) for w in self._out_of_credit[1:]) / samples for t in busy}
        for task in sorted(credit, key=lambda t: (-credit[t], t)):
            receivers = last.downstream.get(task, ())
            if credit[task] >= BUSY and receivers and all(busy.get(r, 0.0) / span < BUSY for r in receivers):
                return (f"the links out of {task}",
                        f"out of credit in {credit[task]:.0%} of the samples while {', '.join(receivers)} were "
                        f"busy at most {max(busy.get(r, 0.0) for r in receivers) / span:.0%} of the time")
        return None


def sample_of(sim: Any) -> Sample:
    """The `Sample` of a running `runtime.sim.executor.SimExecutor` now."""
    tasks = sim.metrics.tasks
    lags: dict[str, float] = {}
    read, left = 0, 0
    bounded = True
    for task_id in sim.source_ids:
        task = sim.tasks.get(task_id)
        if task is None:
            continue
        lag = task.source_lag()
        if lag is not None:
            lags[str(task_id)] = lag
        for reader in task.readers:
            read += reader.position
            end = getattr(reader.split, "end", None)
            if end is None:
                bounded = False
            else:
                left += max(0, end - reader.split.start - reader.position)
    return Sample(now=sim.now, busy={name: t.wall for name, t in tasks.items()},
                  cpu={name: t.busy for name, t in tasks.items()},
                  control_cpu=sim.metrics.service_cpu.get("control", 0.0), lags=lags,
                  backpressured=frozenset(str(t) for t, task in sim.tasks.items() if task.is_backpressured),
                  records_read=read, records_left=left if bounded else None,
                  control_waiting=sim.runner.control_waiting(), downstream=sim.downstream)
