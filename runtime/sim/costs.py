"""Step costs and CPU contention on the simulator: tasks share `cores` cores.

A task's step occupies one core for its virtual cost. A task ready to step while every core is
busy waits in a FIFO queue and takes the next core that frees, in the order the tasks became
ready (deterministic: the event order decides, no randomness). Without a core count every task
has a core of its own, as before.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCost:
    """One task's (or vertex's) step cost in seconds: CPU per step (per buffer) and per record,
    and off-CPU time per record (a sleeping or I/O-bound function: busy, but no core)."""

    per_step: float
    per_record: float
    wait_per_record: float = 0.0


class CpuCores:
    """The shared cores: when each frees, and who waits for one."""

    def __init__(self, cores: int) -> None:
        if cores < 1:
            raise ValueError(f"CostModel.cores must be >= 1, got {cores!r}")
        self.cores = cores
        self._free_at: list[float] = [0.0] * cores
        self._waiting: dict[Hashable, None] = {}  # insertion-ordered: FIFO

    def reset(self) -> None:
        """A new deployment: nothing runs, nobody waits."""
        self._free_at = [0.0] * self.cores
        self._waiting.clear()

    def free(self, now: float) -> bool:
        """Whether a core is free at `now`."""
        return self._free_at[0] <= now

    def occupy(self, now: float, duration: float) -> float:
        """Take the earliest free core from `now` for `duration`; returns when it frees."""
        start = max(now, self._free_at[0])
        until = start + duration
        heapq.heapreplace(self._free_at, until)
        return until

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
