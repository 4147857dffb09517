"""`runtime.jobmaster.faults.actions`: what a fault placed at a time or at the sources' progress does
when it fires, the same on every executor (each supplies only the `FaultActions`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from runtime import FaultPlan
from runtime.jobmaster.faults.actions import fire_fault, injected_crash, stall_duration
from runtime.jobmaster.faults.schedule import FaultSchedule
from runtime.workloads.scenarios import relay_job
from vocabulary.fault_plan import (
    ChannelDelay,
    ChannelStall,
    CoordinatorCrash,
    SlowStorage,
    TaskCrash,
    TaskStall,
)
from vocabulary.handles import TaskId


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def crash_task(self, task_id: TaskId, what: str) -> None:
        self.calls.append(("crash_task", task_id, what))

    def crash_coordinator(self) -> None:
        self.calls.append(("crash_coordinator",))

    def stall_channels(self, task_id: TaskId, duration: float) -> None:
        self.calls.append(("stall_channels", task_id, duration))

    def stall_task(self, task_id: TaskId, duration: float) -> None:
        self.calls.append(("stall_task", task_id, duration))

    def delay_channel(self, receiver: TaskId, channel: int, fault: ChannelDelay) -> None:
        self.calls.append(("delay_channel", receiver, channel, fault.delay))

    def slow_storage(self, fault: SlowStorage) -> None:
        self.calls.append(("slow_storage", fault.factor))


def test_each_timed_fault_reaches_its_action_with_its_resolved_target() -> None:
    graph = relay_job(timeout=0.4).get_job_graph("job")
    plan = FaultPlan.of(
        TaskCrash(task="relay[1]", at=0.1), CoordinatorCrash(at=0.1), ChannelStall(task="count[0]", at=0.1, duration=0.3),
        TaskStall(task="relay[0]", at=0.1), TaskStall(task="relay[0]", at=0.1, duration=0.05),
        ChannelDelay(task="count[1]", channel=1, at=0.1, duration=1.0, delay=0.2),
        SlowStorage(at=0.1, duration=1.0, factor=4.0),
    )
    schedule = FaultSchedule.for_graph(plan, graph)
    actions = Recorder()
    for index in range(len(plan.faults)):
        fire_fault(schedule, index, graph, actions)
    assert actions.calls == [
        ("crash_task", TaskId("relay", 1), "TaskCrash"),
        ("crash_coordinator",),
        ("stall_channels", TaskId("count", 0), 0.3),
        ("stall_task", TaskId("relay", 0), 1.5 * 0.4),  # no duration: a checkpoint it is in times out
        ("stall_task", TaskId("relay", 0), 0.05),
        ("delay_channel", TaskId("count", 1), 1, 0.2),
        ("slow_storage", 4.0),
    ]
    assert schedule.fired == list(range(len(plan.faults)))


def test_a_stall_without_duration_lasts_a_second_without_checkpointing() -> None:
    graph = SimpleNamespace(checkpointing_enabled=False, checkpoint_config=None)
    assert stall_duration(TaskStall(task="relay[0]", at=0.1), graph) == 1.0


def test_an_injected_crash_reads_the_same_on_every_executor() -> None:
    assert str(injected_crash(TaskId("relay", 1), "TaskCrash after 7 records")) == \
        "injected fault: TaskCrash after 7 records of task relay[1]"
