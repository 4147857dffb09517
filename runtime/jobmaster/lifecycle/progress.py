"""What a running job is doing, for progress reports (`execute(..., progress=fn)`).

Every progress dict an executor passes to `fn` has a `"phase"`, one of `Phase`'s values, so a
display can say why the numbers stopped moving: after the last record is read the job still
takes its final checkpoint (every source waits for it, Flink's FLIP-147), the sinks commit, and
a local Ray is shut down.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from runtime.core.task import TaskState

_DONE_READING = {TaskState.AWAITING_FINAL_CHECKPOINT.value, TaskState.FINISHED.value}


class Phase(enum.StrEnum):
    """A job's phase, in the order a run goes through them (RESTARTING may repeat)."""

    STARTING = "starting"  # starting Ray and deploying the tasks
    RUNNING = "running"  # sources are reading
    RESTARTING = "restarting"  # a failover: tasks cancelled, redeployed from the latest checkpoint
    FINAL_CHECKPOINT = "final checkpoint"  # every source read its input; waiting for the final checkpoint
    COMMITTING = "committing"  # every task finished; the sinks commit what the final checkpoint covers
    STOPPING = "stopping"  # actors (and a local Ray) shut down


def reading_phase(source_states: Iterable[str | None]) -> Phase:
    """RUNNING while any source task still reads (or has not reported), else FINAL_CHECKPOINT.

    Args:
        source_states: each source task's `TaskState` value (None: not reported yet).
    """
    states = list(source_states)
    if states and all(s in _DONE_READING for s in states):
        return Phase.FINAL_CHECKPOINT
    return Phase.RUNNING


def progress_figures(phase: Phase, *, clock: str, seconds: float, records_in: int, completed: int, aborted: int,
                     last_duration: float | None, last_alignment: float | None, restarts: int) -> dict[str, Any]:
    """The figures every executor reports, under the keys a display reads (`runtime.api.job_display`).

    Args:
        clock: what `seconds` are: "virtual time" (to 0.1 ms) or "wall time" (to 10 ms).
        last_duration, last_alignment: seconds, of the latest completed checkpoint (None: none yet).
    """
    digits = 4 if clock == "virtual time" else 2
    return {
        "phase": phase.value,
        clock: f"{seconds:.{digits}f} s",
        "records in": records_in,
        "checkpoints completed": completed,
        "checkpoints aborted": aborted,
        "last checkpoint duration": f"{last_duration * 1e3:.2f} ms" if last_duration is not None else "-",
        "last alignment time": f"{last_alignment * 1e3:.2f} ms" if last_alignment is not None else "-",
        "restarts": restarts,
    }
