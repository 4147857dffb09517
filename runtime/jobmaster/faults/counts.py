"""`RunCounts`: a run's fault counts when every attempt's processes count for themselves.

The `FaultSchedule` counts records, acknowledgements, writes and control messages over the whole
run, across attempts. The simulator sees each occurrence and asks the schedule there; an executor
whose processes count for themselves (Ray's task actors start from zero in every attempt, a new
coordinator actor from what it is armed with) instead:

* gives each task of the attempt being deployed its faults as offsets from the attempt's start
  (`task_faults`: the run's point minus what earlier attempts counted), with the `SlowStorage` /
  `ChannelDelay` windows still open (`open_slow_storage`, `open_channel_delay`);
* hands the schedule what an attempt counted when it ended (`attempt_ended`), and what a
  coordinator sent (`coordinator_counted`), so `schedule.fired` lists what struck and the next
  attempt continues the count.

Pure: times are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runtime.jobmaster.faults.schedule import DELIVER, ControlEffect
from vocabulary.fault_plan import ChannelDelay, SlowStorage, StorageWriteFailure, TornWrite
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from runtime.jobmaster.faults.schedule import FaultSchedule

#: a `SlowStorage` window: (start, end, factor)
SlowWindow = tuple[float, float, float]
#: a `ChannelDelay` window, at its sender: (output channel, start, end, extra seconds)
DelayWindow = tuple[int, float, float, float]


class RunCounts:
    """What the attempts of one run counted, for its `FaultSchedule` (see the module docstring)."""

    def __init__(self, schedule: FaultSchedule, task_ids: Sequence[TaskId]) -> None:
        self.schedule = schedule
        #: records each task handled in earlier (ended) attempts
        self.done_records: dict[TaskId, int] = dict.fromkeys(task_ids, 0)
        #: records the sources read in earlier attempts
        self.done_source_records = 0
        #: `SlowStorage` windows opened so far
        self.slow_windows: list[SlowWindow] = []
        #: `ChannelDelay` windows opened so far: sender -> its windows
        self.delay_windows: dict[TaskId, list[DelayWindow]] = {}
        #: paths of the files `TornWrite` faults tore, and how many writes `SlowStorage` slowed
        self.torn_files: list[str] = []
        self.slowed_writes = 0

    def records(self, task_id: TaskId, in_attempt: int) -> int:
        """The records `task_id` handled over the run, `in_attempt` of them in the running attempt."""
        return self.done_records[task_id] + in_attempt

    def source_records(self, in_attempt: Iterable[int]) -> int:
        """The records the sources read over the run, `in_attempt` (per task) in the running attempt."""
        return self.done_source_records + sum(in_attempt)

    def task_faults(self, task_id: TaskId, now: float) -> dict[str, Any]:
        """What `task_id` applies itself in the attempt being deployed, as offsets from the
        attempt's start: `crash_after` (records; `crash_at_end_of_input`: or once the task's
        input ended, if sooner), `acks` (nth -> (lost, copies, delay)),
        `failed_writes` (nths), `torn_writes` ((nth, keep, garble)), and the windows open at `now`."""
        schedule = self.schedule
        out: dict[str, Any] = {}
        after = schedule.next_crash(task_id)
        if after is not None:
            out["crash_after"] = max(1, after - self.done_records[task_id])
            out["crash_at_end_of_input"] = schedule.crash_at_end_of_input(task_id)
        out["acks"] = {n: (e.lost, e.copies, e.delay) for n, e in schedule.upcoming_control("ack", task_id).items()}
        writes = schedule.upcoming("write", task_id)
        out["failed_writes"] = [n for n, f in writes if isinstance(f, StorageWriteFailure)]
        out["torn_writes"] = [(n, f.keep, f.garble) for n, f in writes if isinstance(f, TornWrite)]
        out["slow_writes"] = [w for w in self.slow_windows if w[1] > now]
        out["channel_delays"] = [w for w in self.delay_windows.get(task_id, ()) if w[2] > now]
        return out

    def open_slow_storage(self, fault: SlowStorage, now: float) -> SlowWindow:
        """A `SlowStorage` window opens at `now` (for every task: the storage is shared)."""
        window = (now, now + fault.duration, fault.factor)
        self.slow_windows.append(window)
        return window

    def open_channel_delay(self, sender: TaskId, output_channel: int, fault: ChannelDelay, now: float) -> DelayWindow:
        """A `ChannelDelay` window opens at `now`, applied by `sender` on `output_channel`."""
        window = (output_channel, now, now + fault.duration, fault.delay)
        self.delay_windows.setdefault(sender, []).append(window)
        return window

    def attempt_ended(self, task_id: TaskId, counts: Mapping[str, Any], records: bool = True) -> None:
        """`task_id` counted `counts` in an attempt that ended (`records`: also its records, False
        when the caller counts those itself)."""
        if records:
            self.done_records[task_id] += counts.get("records", 0)
            self.done_source_records += counts.get("source_records", 0)
        self.schedule.advance("ack", task_id, counts.get("acks", 0))
        self.schedule.advance("write", task_id, counts.get("writes", 0))
        self.torn_files.extend(counts.get("torn", ()))
        self.slowed_writes += counts.get("slowed", 0)

    def coordinator_counted(self, counts: Mapping[tuple[str, TaskId], int]) -> None:
        """The control messages the run's coordinators sent so far (trigger, complete, abort; a
        coordinator counts on from what it was armed with), into the schedule."""
        for (kind, task_id), n in counts.items():
            self.schedule.advance(kind, task_id, max(0, n - self.schedule.count(kind, task_id)))


class AttemptFaults:
    """The other end of `RunCounts.task_faults`: the faults one task applies itself in one attempt,
    counting its acknowledgements and writes from zero (Ray's task actor holds one per deployment).

    Args:
        faults: `RunCounts.task_faults` of the task.
    """

    def __init__(self, faults: Mapping[str, Any]) -> None:
        #: the task crashes once it handled this many records in the attempt (None: never)
        self.crash_after: int | None = faults.get("crash_after")
        #: ... or once its input ended, if that comes first (a crash placed `at_fraction`)
        self.crash_at_end_of_input: bool = faults.get("crash_at_end_of_input", False)
        self._acks: dict[int, tuple[bool, int, float]] = dict(faults.get("acks", {}))
        self._failed_writes = set(faults.get("failed_writes", ()))
        self._torn_writes = {n: (keep, garble) for n, keep, garble in faults.get("torn_writes", ())}
        #: `SlowStorage` windows, more open while the attempt runs (`RunCounts.open_slow_storage`)
        self.slow_windows: list[SlowWindow] = list(faults.get("slow_writes", ()))
        #: `ChannelDelay` windows of the task's output channels
        self.delay_windows: list[DelayWindow] = list(faults.get("channel_delays", ()))
        self.acks = 0
        self.writes = 0
        #: what the attempt's `TornWrite`s tore, and how many writes `SlowStorage` slowed
        self.torn_files: list[str] = []
        self.slowed = 0

    def ack(self) -> ControlEffect:
        """The task sends its next acknowledgement: what the plan does to it (the faults that
        struck it are counted by the driver, `RunCounts.attempt_ended`)."""
        n, self.acks = self.acks, self.acks + 1
        if n not in self._acks:
            return DELIVER
        lost, copies, delay = self._acks[n]
        return ControlEffect(lost=lost, copies=copies, delay=delay)

    def crash_due(self, records: int, input_ended: bool) -> bool:
        """The task handled `records` in the attempt (`input_ended`: and its input ended): crash now?"""
        if self.crash_after is None:
            return False
        return records >= self.crash_after or (input_ended and self.crash_at_end_of_input)

    def write(self) -> tuple[bool, tuple[float, bool] | None]:
        """The task starts its next state write: (fails, `TornWrite`'s (keep, garble) or None)."""
        n, self.writes = self.writes, self.writes + 1
        return n in self._failed_writes, self._torn_writes.get(n)

    def write_slowdown(self, started: float) -> float:
        """How many times longer a write started at `started` takes (1.0: normal)."""
        return max((f for s, e, f in list(self.slow_windows) if s <= started < e), default=1.0)

    def counts(self) -> dict[str, Any]:
        """What the attempt counted, for `RunCounts.attempt_ended` (with the task's records)."""
        return {"acks": self.acks, "writes": self.writes, "torn": list(self.torn_files), "slowed": self.slowed}
