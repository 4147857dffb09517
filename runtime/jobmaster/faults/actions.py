"""What a fault placed at a time or at the sources' progress does when it fires, on any executor.

`FaultSchedule` says *when* such a fault strikes (`timed`, `due`); `fire_fault` says *what* it does,
once for both executors, by calling the executor's `FaultActions` (which know how to crash, stall or
slow something down in virtual time or on actors). The failure a crash reads as is made here too
(`injected_crash`, `coordinator_crash`), so the simulator's and Ray's failure lists agree word for word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from vocabulary.fault_plan import (
    ChannelDelay,
    ChannelStall,
    CoordinatorCrash,
    ProcessKill,
    SlowStorage,
    TaskCrash,
    TaskStall,
)
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from runtime.jobmaster.faults.schedule import FaultSchedule


class FaultActions(Protocol):
    """How an executor breaks things (`fire_fault` picks which and where)."""

    def crash_task(self, task_id: TaskId, what: str) -> None:
        """`task_id` fails now (`what`: the fault, for `injected_crash`)."""
        ...

    def crash_coordinator(self) -> None:
        """The checkpoint coordinator's process dies now."""
        ...

    def stall_channels(self, task_id: TaskId, duration: float) -> None:
        """Messages to every input channel of `task_id` are held back for `duration` seconds."""
        ...

    def stall_task(self, task_id: TaskId, duration: float) -> None:
        """`task_id` hangs for `duration` seconds (`TaskStall`)."""
        ...

    def delay_channel(self, receiver: TaskId, channel: int, fault: ChannelDelay) -> None:
        """A `ChannelDelay` window opens on input `channel` of `receiver`."""
        ...

    def slow_storage(self, fault: SlowStorage) -> None:
        """A `SlowStorage` window opens on every task's writes."""
        ...

    def kill_process(self, process: str, task_id: TaskId) -> None:
        """`ProcessKill`: the operating system kills `process` ("worker": the one hosting
        `task_id`) now. Only an executor that implements `ProcessKill` is asked."""
        ...


def fire_fault(schedule: FaultSchedule, index: int, graph: Any, actions: FaultActions) -> None:
    """The fault at `index` of the schedule's plan, placed at a time or at the sources' progress,
    fires now (marked fired in `schedule`): `actions` carries it out on its target."""
    schedule.fire(index)
    fault = schedule.plan.faults[index]
    if isinstance(fault, TaskCrash):
        actions.crash_task(schedule.target(index), "TaskCrash")
    elif isinstance(fault, CoordinatorCrash):
        actions.crash_coordinator()
    elif isinstance(fault, ChannelStall):
        actions.stall_channels(schedule.target(index), fault.duration)
    elif isinstance(fault, TaskStall):
        actions.stall_task(schedule.target(index), stall_duration(fault, graph))
    elif isinstance(fault, ChannelDelay):
        actions.delay_channel(schedule.target(index), schedule.channel(index), fault)
    elif isinstance(fault, SlowStorage):
        actions.slow_storage(fault)
    elif isinstance(fault, ProcessKill):
        actions.kill_process(fault.process, schedule.target(index))


def stall_duration(fault: TaskStall, graph: Any) -> float:
    """How long a `TaskStall` lasts: its `duration`, else 1.5 x the checkpoint timeout (so a
    checkpoint the task takes part in times out), 1 s without checkpointing."""
    if fault.duration is not None:
        return fault.duration
    return 1.5 * graph.checkpoint_config.timeout if graph.checkpointing_enabled else 1.0


def crash_after_records(after: int, records: int | None = None) -> str:
    """What a `TaskCrash` after `after` records is called in its failure (`records`: the task
    handled only that many when its input ended, which bounds a crash placed `at_fraction`)."""
    if records is not None and records < after:
        return f"TaskCrash at the end of its input, after {records} of {after} records"
    return f"TaskCrash after {after} records"


def injected_crash(task_id: TaskId, what: str) -> RuntimeError:
    """The error an injected crash of `task_id` fails the job over with (both executors)."""
    return RuntimeError(f"injected fault: {what} of task {task_id}")


def coordinator_crash(standby: bool) -> str:
    """Why the job failed over after an injected coordinator crash (`CoordinatorCrash`,
    `CoordinatorCrashBeforeNotify`), as both executors list it in `failures` (`standby`: a
    standby took over, with high availability)."""
    return "coordinator crash (standby took over)" if standby else "coordinator crash"
