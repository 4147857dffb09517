"""`StepTimes`: what a task's steps cost, measured the same way on every executor.

Each step adds (records handled, seconds it took); the sums kept are those of an ordinary least
squares fit of `seconds = per_step + per_record * records`, so calibration
(`runtime.calibration.fit`) recovers a task's cost per step (per buffer) and per record without
keeping every step. A step that handled no record but emitted some (a watermark or timer that
fired windows: tens of milliseconds for thousands of results, where a step of a buffer takes one)
is kept apart, out of that fit, with what it emitted: its cost per emitted record
(`fit_emitted`) is what makes a window firing a burst rather than a cost spread over every step. `cpu` is the task's whole CPU time where the executor can measure it (a Ray
actor's process time: the step work plus calls, serialisation and thread hand-offs), else the
step time itself (the simulator).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass
class StepTimes:
    """Running sums over one task's steps (seconds: virtual on sim, wall on Ray)."""

    steps: int = 0
    records: int = 0
    #: CPU seconds of the steps (Ray: the work thread's CPU time; sim: the virtual CPU cost)
    busy: float = 0.0
    #: elapsed seconds of the steps (more than `busy` when a step sleeps, waits on I/O or is
    #: preempted by other processes)
    wall: float = 0.0
    #: sum of records squared and of records x seconds (the least-squares fit)
    records_sq: float = 0.0
    records_busy: float = 0.0
    #: sum of records x elapsed seconds (the same fit of `wall`)
    records_wall: float = 0.0
    #: the task's CPU seconds over its life, when measured apart from the steps (None: `busy`)
    cpu: float | None = None
    #: data calls (pushes) the task sent
    calls: int = 0
    #: Ray: pushes to subtasks of the same worker actor (in-process, not Ray calls)
    local_calls: int = 0
    #: Ray: data buffers received as the sender's records, with no Arrow batch (in-process
    #: channels; a buffer from another process always carries its batch)
    buffers_as_records: int = 0
    #: Ray: the most data buffers one input channel held received but not yet consumed (the
    #: channel's credits bound it)
    max_unconsumed: int = 0
    #: of `steps`, `busy` and `wall`: the emitting steps' (no record handled, some emitted), and
    #: the records they emitted
    emitting_steps: int = 0
    emitting_busy: float = 0.0
    emitting_wall: float = 0.0
    emitted: int = 0
    #: Ray: the task's timer callbacks that ran (buffer timeouts, a paced source's wake-ups, its
    #: operators' timers) and the seconds they ran after their due times, summed
    timers: int = 0
    timer_lateness: float = 0.0

    def add(self, records: int, seconds: float, wall: float | None = None, emitted: int = 0) -> None:
        """One step: `records` handled in `seconds` of CPU (`wall` elapsed; default the same),
        `emitted` records sent on (counted only for a step that handled none)."""
        wall = seconds if wall is None else wall
        self.steps += 1
        self.records += records
        self.busy += seconds
        self.wall += wall
        if records == 0 and emitted > 0:
            self.emitting_steps += 1
            self.emitting_busy += seconds
            self.emitting_wall += wall
            self.emitted += emitted
            return
        self.records_sq += records * records
        self.records_busy += records * seconds
        self.records_wall += records * wall

    def pooled(self, other: StepTimes) -> StepTimes:
        """The steps of both, for one fit (the least-squares sums add; the rest is this one's)."""
        sums = ("steps", "records", "busy", "wall", "records_sq", "records_busy", "records_wall",
                "emitting_steps", "emitting_busy", "emitting_wall", "emitted")
        return replace(self, **{name: getattr(self, name) + getattr(other, name) for name in sums})

    @property
    def fitted_steps(self) -> int:
        """The steps in the least-squares line: every step but the emitting ones."""
        return self.steps - self.emitting_steps

    @property
    def fitted_busy(self) -> float:
        """CPU seconds of the `fitted_steps`."""
        return self.busy - self.emitting_busy

    @property
    def mean_timer_lateness(self) -> float:
        """Seconds a timer callback ran after it was due, on average (0: none ran)."""
        return self.timer_lateness / self.timers if self.timers else 0.0

    def fit(self) -> tuple[float, float]:
        """(CPU seconds per step, per record) by least squares over the `fitted_steps`; when every
        step handled the same number of records the split is unknowable and it all goes to the
        records."""
        return self._fit(self.fitted_busy, self.records_busy)

    def fit_wall(self) -> tuple[float, float]:
        """(elapsed seconds per step, per record), the same fit of `wall`."""
        return self._fit(self.wall - self.emitting_wall, self.records_wall)

    def fit_emitted(self, per_step: float) -> float:
        """CPU seconds per record an emitting step emitted, beyond `per_step` (0: none emitted)."""
        if not self.emitted:
            return 0.0
        return max(0.0, (self.emitting_busy - self.emitting_steps * per_step) / self.emitted)

    def _fit(self, total: float, records_total: float) -> tuple[float, float]:
        n = self.fitted_steps
        if n == 0:
            return 0.0, 0.0
        var = n * self.records_sq - self.records * self.records
        if var <= 1e-9 * max(1.0, n * self.records_sq):
            return 0.0, (total / self.records if self.records else 0.0)
        per_record = (n * records_total - self.records * total) / var
        per_step = (total - per_record * self.records) / n
        return per_step, per_record

    @property
    def overhead(self) -> float:
        """CPU seconds outside the steps (calls, serialisation, hand-offs); 0 when not measured."""
        return max(0.0, self.cpu - self.busy) if self.cpu is not None else 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepTimes:
        return cls(**data)
