"""`StepPacer`: how many records a task's next step may take (`Task.records_per_step`).

A step runs user code under the task's lock, and whatever waits for that lock — a checkpoint
trigger or barrier handed over as mail, a call of the driver — waits for the step. Steps are
therefore bounded in wall time, not in records: the pacer sizes each from what records have cost
so far, so a step lasts about `STEP_TARGET`, and one record when that is longer (a record cannot
be split). Before anything is measured a step takes one record: the first buffer of a 1 s/record
function is 256 steps of 1 s, not one step of 256 s. The cost per record is a decaying
record-weighted average over recent steps, not the last step's: a function whose cost comes in
lumps (one sleep or model call every few records) has cheap steps in between, and pacing by one
of those would let the next step take a whole buffer (measured: unaligned barriers waiting ~30 ms
at a slow subtask instead of ~2).

Pure: the executor measures, the pacer decides. The Ray executor feeds it each step's wall time;
the simulator, when its cost model asks for Ray's step sizes (`CostModel.step_target`), each
step's virtual time as the shared cores stretch it.
"""

from __future__ import annotations

#: how long one step should take at most (one record may take longer: it cannot be split)
STEP_TARGET = 0.002
#: weight of the older steps in the average cost per record
PACE_DECAY = 0.8


class StepPacer:
    """Records per step for one task attempt (a new attempt starts a new pacer).

    Args:
        ceiling: the job's buffer size: a limit this high is no limit (whole buffers).
        target: seconds a step should last at most.
    """

    __slots__ = ("ceiling", "target", "_seconds", "_records")

    def __init__(self, ceiling: int, target: float = STEP_TARGET) -> None:
        assert ceiling >= 1, ceiling
        assert target > 0, target
        self.ceiling = ceiling
        self.target = target
        self._seconds = 0.0
        self._records = 0.0

    def measured(self, records: int, seconds: float) -> None:
        """A step took `records` records (0: events only, which price nothing) in `seconds`."""
        if records <= 0:
            return
        self._seconds = self._seconds * PACE_DECAY + max(0.0, seconds)
        self._records = self._records * PACE_DECAY + records

    def limit(self) -> int | None:
        """At most this many records in the next step (None: no limit)."""
        if self._records == 0:
            return 1  # nothing measured yet: a record may take minutes
        per_record = self._seconds / self._records
        if per_record <= 0:
            return None
        limit = round(self.target / per_record)
        return None if limit >= self.ceiling else max(1, limit)
