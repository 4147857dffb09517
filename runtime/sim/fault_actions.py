"""How the simulator breaks things: its `runtime.jobmaster.faults.actions.FaultActions`.

The run's `FaultSchedule` (the Ray executor's too, so a plan means the same on both) answers
where and when a fault strikes; `fire_fault` says what a fault at a time or progress point does;
this module applies it. Faults at a virtual time are events (scheduled by `SimExecutor`); those
at a fraction of the sources' records fire after the source step that reached it; a `TaskCrash`
after records fires after the task's step. SlowStorage and ChannelDelay windows are open in the
schedule, which every write and send asks. A stalled task's input, control messages and timers
wait in `held` until it resumes, then apply in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from runtime.jobmaster.faults.actions import crash_after_records, fire_fault, injected_crash
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from runtime.sim.executor import SimExecutor


class _Stall(NamedTuple):
    """A stalled task (`TaskStall`): when its stall began, and what reached it meanwhile."""

    since: float
    held: list[Callable[[], None]]


class SimFaultActions:
    """The faults of one `SimExecutor`'s run, carried out in virtual time."""

    def __init__(self, sim: SimExecutor) -> None:
        self.sim = sim
        #: stalled tasks; what reached them is applied in order when they resume
        self._held_for: dict[TaskId, _Stall] = {}

    @property
    def any_held(self) -> bool:
        """Whether some task is stalled now."""
        return bool(self._held_for)

    def held(self, task_id: TaskId, fn: Callable[[], None]) -> bool:
        """True (and `fn` kept for later) while `task_id` is stalled."""
        stall = self._held_for.get(task_id)
        if stall is None:
            return False
        stall.held.append(fn)
        return True

    def stalled_for(self) -> dict[TaskId, float]:
        """Each stalled task's virtual seconds in its stall so far (a step that has not returned)."""
        return {task_id: self.sim.now - stall.since for task_id, stall in self._held_for.items()}

    def reset(self) -> None:
        """A new deployment: a stalled task of the failed attempt is gone with it."""
        self._held_for.clear()

    def fire(self, index: int) -> None:
        """A fault placed at a time or at the sources' progress starts now."""
        sim = self.sim
        fire_fault(sim.master.schedule, index, sim.graph, self)

    def check_progress(self) -> None:
        """After a source step: fire the faults placed at this point of the sources' progress (not
        within the step: at the same virtual instant, as an event)."""
        sim = self.sim
        schedule = sim.schedule
        if schedule is None:
            return
        for index, _ in schedule.due(sim.metrics.records_in, sim.now):
            sim.at(sim.now, lambda i=index: self.fire(i), None, "fault")

    def check_crash(self, task_id: TaskId, records: int, input_ended: bool = False) -> bool:
        """`TaskCrash` after records: the task has handled its crash point's `records` over the
        run (or, placed `at_fraction`, its input ended first). Whether it crashed."""
        schedule = self.sim.schedule
        after = schedule.crash_due(task_id, records, input_ended) if schedule else None
        if after is None:
            return False
        self.crash_task(task_id, crash_after_records(after, records))
        return True

    # ------------------------------------------------------------------ `FaultActions`

    def crash_task(self, task_id: TaskId, what: str) -> None:
        self.sim.master.task_failed(task_id, injected_crash(task_id, what))

    def crash_coordinator(self) -> None:
        self.sim.crash_coordinator()

    def stall_channels(self, task_id: TaskId, duration: float) -> None:
        sim = self.sim
        sim.channels.stall_input(task_id, duration)
        sim.trace_event("stall", str(task_id), duration)

    def stall_task(self, task_id: TaskId, duration: float) -> None:
        """`TaskStall`: the task takes no step until `now + duration`; what reaches it meanwhile
        (input, control messages, its timers, its finished writes) waits and is applied in order."""
        sim = self.sim
        if sim.done or task_id not in sim.tasks or task_id in self._held_for:
            return
        until = sim.now + duration
        sim.trace_event("fault", "TaskStall", str(task_id), duration)
        self._held_for[task_id] = _Stall(sim.now, [])
        sim.runner.busy_until(task_id, until)

        def resume() -> None:
            stall = self._held_for.pop(task_id, None)
            for fn in stall.held if stall is not None else ():
                fn()
            sim.runner.schedule_run(task_id)

        sim.at(until, resume, sim.epoch, "fault")

    def delay_channel(self, receiver: TaskId, channel: int, fault: Any) -> None:
        pass

    def slow_storage(self, fault: Any) -> None:
        pass

    def crash_during_recovery(self, task_id: TaskId, at: float) -> None:
        """`TaskCrashDuringRecovery` (the restart delay included)."""
        sim = self.sim
        sim.trace_event("fault", "TaskCrashDuringRecovery", str(task_id), round(at - sim.now, 9))
        sim.at(at, lambda: self.crash_task(task_id, "TaskCrashDuringRecovery"), sim.epoch, "fault")
