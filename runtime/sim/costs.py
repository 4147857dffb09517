"""The simulator's cost model: virtual CPU time per step and record (`CostModel`, the terms
`runtime.calibration` fits), and CPU contention when tasks share `cores` cores.

A task's step occupies one core for its virtual cost, longer when work outside the steps (on Ray:
the tasks' call handling) takes part of each core (`CostModel.shared_cores`). A task ready to step
while every core is busy waits in a FIFO queue and takes the next core that frees, in the order
the tasks became ready (deterministic: the event order decides, no randomness). Without a core
count every task has a core of its own.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from vocabulary.handles import TaskId


@dataclass(frozen=True)
class StepCost:
    """One task's (or vertex's) step cost in seconds: CPU per step (per buffer) and per record,
    and off-CPU time per record (a sleeping or I/O-bound function: busy, but no core); and how
    late its timers fire."""

    per_step: float
    per_record: float
    wait_per_record: float = 0.0
    #: CPU per record a step that handled none emitted (a window firing; `StepTimes.fit_emitted`)
    per_emitted: float = 0.0
    #: seconds each timer of the task (a buffer timeout, a paced source's wake-up, an operator's
    #: timer) fires after it is due: on Ray the timer thread, the hand-over to the work thread
    #: and the lock of a process sharing the machine's cores (`StepTimes.mean_timer_lateness`)
    timer_lateness: float = 0.0


def times_of(rates: tuple[float, float, float, float, float], records: int, emitted: int = 0) -> tuple[float, float]:
    """(CPU seconds, off-CPU seconds) of a step that handled `records` and emitted `emitted`, from
    a task's `CostModel.step_rates` (what a step emitted costs only when it handled no record)."""
    per_step, per_record, wait, per_emitted, factor = rates
    cpu = per_step + (records * per_record if records else emitted * per_emitted)
    return cpu * factor, records * wait * factor


@dataclass(frozen=True)
class CostModel:
    """Virtual CPU time a task spends per step (the terms `runtime.calibration` fits)."""

    per_record: float = 2e-6
    per_step: float = 2e-5
    #: at most this many records of an input buffer per step (`Task.records_per_step`; None =
    #: whole buffers): a buffer processed in parts, which an unaligned barrier can overtake
    records_per_step: int | None = None
    #: task name ("vertex[i]") or vertex name -> slowdown factor (backpressure scenarios)
    slow_tasks: dict[str, float] = field(default_factory=dict)
    #: task or vertex name -> slowdown of the per-record cost only: an expensive user function,
    #: while the per-step (per-buffer) overhead stays that of any task
    slow_records: dict[str, float] = field(default_factory=dict)
    #: task or vertex name -> its own step cost (the task's entry wins over its vertex's), in
    #: place of `per_step`/`per_record`
    task_costs: dict[str, StepCost] = field(default_factory=dict)
    #: cores the tasks share (`CpuCores`); None: a core per task
    cores: int | None = None
    #: CPU a task spends on a synchronous snapshot: fixed plus per byte of the snapshot
    sync_latency: float = 0.0
    sync_per_byte: float = 0.0
    #: CPU the write of a snapshot spends (serialising and writing it: fixed plus per byte),
    #: charged to its task as a synchronous snapshot's is: a Ray writer thread takes the GIL from
    #: the task's work thread; the write's duration is `NetworkOptions`'
    write_cpu: float = 0.0
    write_cpu_per_byte: float = 0.0
    #: CPU seconds the control path (on Ray: the coordinator and committer processes) spends per
    #: completed checkpoint, on the shared `cores` (without them it has a core of its own: no
    #: effect): charged when the checkpoint completes, so the tasks wait for it as on a real
    #: machine where it takes a core from the job
    checkpoint_cpu: float = 0.0
    #: seconds: > 0, each task's steps are sized as the Ray executor sizes them
    #: (`runtime.core.pacing.StepPacer` with this target), from each step's elapsed time: its CPU
    #: stretched by the work sharing the machine's cores when it starts (`CpuCores.sharing`: a
    #: machine time-slices its cores among the runnable processes, so a Ray step at full speed
    #: lasts 2-7 times its CPU, and its pacer takes that many times fewer records) plus its
    #: off-CPU time; 0: a step takes a whole input buffer (or `records_per_step` of it)
    step_target: float = 0.0
    #: the machine's cores, which time-slice the steps and the work outside them (`CpuCores.sharing`;
    #: None: `cores`). On Ray the steps get fewer cores than the machine has (`cores`), because the
    #: tasks' call handling takes the rest, but every runnable process shares all of them.
    machine_cores: float | None = None
    #: cores' worth of work outside the steps on the same machine (on Ray: the tasks' call handling
    #: and serialisation), which wants the cores too when a step's elapsed time is reckoned
    background_cores: float = 0.0
    #: the same work when the job runs at full speed (no source reads at a rate), which differs
    #: from a rate-limited run's (other buffer sizes, other call rates) and takes its share of the
    #: saturated machine from the steps (`shared_cores`); None: `background_cores`
    saturated_background_cores: float | None = None
    #: seconds: a rate-limited source wakes at most once per this long (from the step that armed
    #: the wake-up), reading every record due by then; returned credits still run it at once (the
    #: Ray executor's sources wake at most once per buffer timeout: a record waits for the next
    #: wake-up, ~half of it on average); 0: it steps whenever a record is due
    source_pacing: float = 0.0
    #: seconds a task's timers fire after they are due when its `task_costs` entry has no
    #: `timer_lateness` of its own (0: when due)
    timer_lateness: float = 0.0

    def lateness(self, task: TaskId) -> float:
        """Seconds `task`'s timers fire after they are due (`StepCost.timer_lateness`)."""
        own = self.task_costs.get(str(task)) or self.task_costs.get(task.vertex)
        return own.timer_lateness if own is not None and own.timer_lateness else self.timer_lateness

    def factor(self, task: TaskId) -> float:
        return self.slow_tasks.get(str(task), self.slow_tasks.get(task.vertex, 1.0))

    def step_rates(self, task: TaskId) -> tuple[float, float, float, float, float]:
        """(seconds per step, CPU seconds per record, off-CPU seconds per record, CPU seconds per
        record an emitting step emitted, slowdown factor) of `task`'s steps (`times_of` turns
        them into a step's times)."""
        own = self.task_costs.get(str(task)) or self.task_costs.get(task.vertex)
        per_step, per_record, wait, per_emitted = \
            (own.per_step, own.per_record, own.wait_per_record, own.per_emitted) if own is not None \
            else (self.per_step, self.per_record, 0.0, 0.0)
        per_record *= self.slow_records.get(str(task), self.slow_records.get(task.vertex, 1.0))
        return per_step, per_record, wait, per_emitted, self.factor(task)

    def step_times(self, task: TaskId, records: int, emitted: int = 0) -> tuple[float, float]:
        """(CPU seconds, off-CPU seconds) of a step of `task` that handled `records` (and
        `emitted`): the CPU occupies a core, the rest (sleeps, I/O) keeps only the task busy."""
        return times_of(self.step_rates(task), records, emitted)

    def step_cost(self, task: TaskId, records: int) -> float:
        """Virtual seconds of a step of `task` that handled `records`."""
        return sum(self.step_times(task, records))

    def sync_cost(self, size: int) -> float:
        """CPU seconds of a synchronous snapshot of `size` bytes."""
        return self.sync_latency + size * self.sync_per_byte

    def write_cost(self, size: int) -> float:
        """CPU seconds of writing a snapshot of `size` bytes."""
        return self.write_cpu + size * self.write_cpu_per_byte

    def shared_cores(self, paced: bool) -> CpuCores | None:
        """The cores the steps of a job share (None: a core per task). `paced`: some source reads
        at a rate: `cores` whole cores, which the work outside the steps (`background_cores`) only
        makes a step's time longer (`CpuCores.sharing`): the machine has room for both. Else the job
        runs at full speed, the machine is saturated, and with `machine_cores` the steps' capacity
        is what the work outside them (`saturated_background_cores`) leaves (at least
        `MIN_CAPACITY`): `cores` cores, each as fast as the capacity allows, at most a whole core
        (a capacity above `cores` is not rounded up: a calibration's full-speed run can last under
        a second, and its background with it). That work comes with the steps' own (it is their
        calls), so other work displaces only the steps' share of the machine (`CpuCores.displaced`)."""
        if self.cores is None:
            return None
        if paced or self.machine_cores is None:
            return CpuCores(self.cores, self.machine_cores, self.background_cores)
        left = self._left_for_steps(paced)
        return CpuCores(self.cores, self.machine_cores, self._background(paced), speed=min(1.0, left / self.cores),
                        share=min(1.0, left / self.machine_cores))

    def steps_capacity(self, paced: bool) -> float | None:
        """Cores' worth of CPU the steps have (None: a core per task): `cores`, or less when the work
        outside the steps of the regime (`paced`: some source reads at a rate) leaves less of the
        machine (at least `MIN_CAPACITY`)."""
        if self.cores is None:
            return None
        if self.machine_cores is None:
            return float(self.cores)
        return min(float(self.cores), self._left_for_steps(paced))

    def _background(self, paced: bool) -> float:
        if paced or self.saturated_background_cores is None:
            return self.background_cores
        return self.saturated_background_cores

    def _left_for_steps(self, paced: bool) -> float:
        """What the regime's work outside the steps leaves of the machine (`machine_cores` set)."""
        assert self.machine_cores is not None
        return max(MIN_CAPACITY, self.machine_cores - self._background(paced))


#: the least capacity, in cores, `CostModel.shared_cores` leaves the steps (a background measured
#: at or above the machine's cores is a contended measurement, not a machine without room for steps)
MIN_CAPACITY = 0.1


class CpuCores:
    """The shared cores: when each frees, and who waits for one. `speed`: the share of a core a
    step gets while the work outside the steps takes the rest (its CPU holds the core CPU / speed).
    `share`: the steps' share of the machine's CPU, what other work displaces of them (`displaced`)."""

    def __init__(self, cores: int, machine: float | None = None, background: float = 0.0,
                 speed: float = 1.0, share: float = 1.0) -> None:
        if cores < 1:
            raise ValueError(f"CostModel.cores must be >= 1, got {cores!r}")
        if machine is not None and machine < 1:
            raise ValueError(f"CostModel.machine_cores must be >= 1 or None, got {machine!r}")
        if background < 0:
            raise ValueError(f"CostModel.background_cores must be >= 0, got {background!r}")
        if not 0 < speed <= 1:
            raise ValueError(f"CpuCores: speed must be in (0, 1], got {speed!r}")
        if not 0 < share <= 1:
            raise ValueError(f"CpuCores: share must be in (0, 1], got {share!r}")
        self.cores = cores
        #: the cores that time-slice the runnable work (`sharing`), and the work outside steps
        self.machine = machine if machine is not None else cores
        self.background = background
        self.speed = speed
        self.share = share
        self._free_at: list[float] = [0.0] * cores
        self._waiting: dict[Hashable, None] = {}  # insertion-ordered: FIFO

    def reset(self) -> None:
        """A new deployment: nothing runs, nobody waits."""
        self._free_at = [0.0] * self.cores
        self._waiting.clear()

    def free(self, now: float) -> bool:
        """Whether a core is free at `now`."""
        return self._free_at[0] <= now

    def displaced(self, cpu: float) -> float:
        """The steps' CPU that `cpu` seconds of other work on the machine (the control path, a
        snapshot's write) displace: their share of it. The work outside the steps (call handling)
        comes with the steps' work, so on a busy machine other work slows it as much as the steps,
        and takes from the steps only their share of the machine, not all of it."""
        return cpu * self.share

    def held(self, cpu: float) -> float:
        """Seconds `cpu` seconds of CPU hold a core (longer than the CPU on a core slowed by the
        work outside the steps)."""
        return cpu / self.speed

    def occupy(self, now: float, cpu: float) -> float:
        """Take the earliest free core from `now` for `cpu` seconds of CPU (`held`); returns when
        it frees."""
        start = max(now, self._free_at[0])
        until = start + self.held(cpu)
        heapq.heapreplace(self._free_at, until)
        return until

    def sharing(self, now: float) -> float:
        """How many times its CPU a step that takes a free core at `now` lasts when the machine's
        cores are time-sliced among the work that wants them (the busy cores', the queue's, its
        own and the work outside the steps), as an operating system does: at least 1."""
        wanting = 1 + sum(1 for free_at in self._free_at if free_at > now) + len(self._waiting) + self.background
        return max(1.0, wanting / self.machine)

    def wait(self, task: Hashable) -> None:
        """`task` is ready but no core is free: it queues (once)."""
        self._waiting.setdefault(task, None)

    def next_waiting(self) -> Hashable | None:
        """The task that waited longest (removed from the queue), or None."""
        if not self._waiting:
            return None
        task = next(iter(self._waiting))
        del self._waiting[task]
        return task

    def is_waiting(self, task: Hashable) -> bool:
        return task in self._waiting

    def queued(self) -> tuple[Hashable, ...]:
        """Who waits for a core, longest first."""
        return tuple(self._waiting)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The value at cumulative probability `q` (0..1) of ascending `sorted_values`, linear between
    points: how calibration reads a measured distribution and how the simulator draws from one."""
    position = q * (len(sorted_values) - 1)
    below = min(int(position), len(sorted_values) - 1)
    above = min(below + 1, len(sorted_values) - 1)
    return sorted_values[below] + (sorted_values[above] - sorted_values[below]) * (position - below)
