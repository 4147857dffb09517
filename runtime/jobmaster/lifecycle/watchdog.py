"""`ProgressWatchdog`: a job that stops making progress fails with a message, a long one does not.

A wall-clock cap on the whole job cannot tell a hang from a job that is simply long (an
unbounded source, a big input): it kills the second and takes its full length to notice the
first. The watchdog instead says a job is stuck once nothing has moved for `stall_timeout` seconds,
where "moved" is what only a live job does: a record processed, a task finished, a checkpoint
completed, or a new execution attempt. Checkpoints triggered or aborted do not count: a job
whose tasks are stuck keeps triggering (and expiring) checkpoints forever.

A step in progress is progress too — a record in a slow function (a model call, a lookup), a
snapshot, a `close` — until that one step has run `stall_timeout`: a job of one record a minute
moves, and its tasks answer their heartbeats meanwhile (on Ray they answer whatever the work
thread does). Past that, the task is *hung* (a function that never returns): the verdict names
it, and the executor replaces it and fails over. Stuck with no task in a step (a deadlock, input
held back) names none: the job fails.

Pure: the executor passes its time and what it observed; no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.core.graph import JobGraphError

#: default seconds without progress before a job is failed as stuck: far above any pause a
#: healthy job takes (a restart delay, the final checkpoint, a `TaskStall` fault of a few seconds)
DEFAULT_STALL_TIMEOUT = 120.0


def check_timeout(name: str, value: float | None) -> float | None:
    """`value` if it is None or a number of seconds > 0; else JobGraphError naming the option."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isinf(value):
        raise JobGraphError(f"invalid executor option {name}={value!r}: must be a number of seconds > 0, "
                            "or None for no limit")
    return float(value)


@dataclass(frozen=True)
class Progress:
    """What a job has done so far, as an executor sees it (each only grows while the job lives).

    Attributes:
        attempt: the execution attempt (a failover starts a new one).
        records: records the tasks processed in this attempt.
        finished: tasks finished.
        checkpoints: checkpoints completed.
    """

    attempt: int
    records: int
    finished: int
    checkpoints: int


@dataclass(frozen=True)
class Stall:
    """The watchdog's verdict: nothing moved for `seconds`; `hung`: the tasks in one step for at
    least `stall_timeout` (sorted; empty: no task is working, the job as a whole is stuck)."""

    seconds: float
    hung: tuple[str, ...]


class ProgressWatchdog:
    """Says when a job has made no progress for `stall_timeout` seconds (None: never)."""

    def __init__(self, stall_timeout: float | None = DEFAULT_STALL_TIMEOUT) -> None:
        self.stall_timeout = check_timeout("stall_timeout", stall_timeout)
        self._last: Progress | None = None
        self._since: float | None = None

    def observe(self, now: float, progress: Progress, busy: Mapping[str, float] | None = None) -> Stall | None:
        """Record what the job has done at `now`; a `Stall` if it has been stuck `stall_timeout`.

        Args:
            busy: task -> seconds its current step has run, for the tasks in a step now: a step
                younger than `stall_timeout` counts as progress.
        """
        if progress != self._last or self._since is None:
            self._last, self._since = progress, now
            return None
        stuck = now - self._since
        limit = self.stall_timeout
        if limit is None or stuck < limit:
            return None
        busy = busy or {}
        if any(seconds < limit for seconds in busy.values()):
            return None  # a record (or snapshot) in progress: moving, for now
        return Stall(stuck, hung=tuple(sorted(busy)))


def hung_message(stall: Stall, busy: Mapping[str, float], stall_timeout: float, unit: str = "s") -> str:
    """What the failover of a hung task (`stall.hung`, in one step `busy[task]` seconds) says."""
    named = ", ".join(f"{task} for {busy[task]:.3g} {unit}" for task in stall.hung)
    return (f"task {stall.hung[0]} is hung: in one step (a record in its function, a snapshot) with nothing else "
            f"moving ({named}; stall_timeout={stall_timeout}: a record that takes longer needs a larger one)")


def no_progress_message(stall: Stall, stall_timeout: float, unit: str = "s") -> str:
    """What a job that made no progress (no task hung) fails with, on either executor; `unit`:
    the seconds the executor counts ("s" on Ray, "virtual s" on the simulator)."""
    return (f"job made no progress for {stall.seconds:.3g} {unit} (stall_timeout={stall_timeout}: no record "
            "processed, no task finished, no checkpoint completed)")
