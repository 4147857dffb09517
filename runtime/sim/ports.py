"""What the simulator hands the pure core (`vocabulary.ports`): virtual time, timers that are
events on the executor's heap, and each task's `TaskPorts`.

A task's timers and ports belong to one execution epoch: after a failover their events are
dropped with the epoch, and while the task is stalled (`TaskStall`) what they deliver waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from runtime.core.subtask_checkpoint import TaskSnapshot
from vocabulary.handles import TaskAcknowledgement, TaskId
from vocabulary.reasons import CheckpointFailureReason

if TYPE_CHECKING:
    from runtime.sim.executor import SimExecutor


class SimClock:
    """The executor's virtual time."""

    def __init__(self, sim: SimExecutor) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.now


class SimTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimTimers:
    """Timers of the coordinator (`task_id` None: survive failover) or of one task (bound to the
    epoch; they wait while the task is stalled, and fire `CostModel.lateness` after they are due)."""

    def __init__(self, sim: SimExecutor, epoch_bound: bool, task_id: TaskId | None = None,
                 kind: str = "timer") -> None:
        self.sim, self.epoch_bound, self.task_id, self.kind = sim, epoch_bound, task_id, kind

    def schedule(self, delay: float, callback: Callable[[], None]) -> SimTimer:
        timer = SimTimer()
        sim = self.sim
        epoch = sim.epoch if self.epoch_bound else None
        task_id = self.task_id

        def fire() -> None:
            if timer.cancelled or (task_id is not None and sim.fault_actions.held(task_id, fire)):
                return
            callback()

        late = sim.costs.lateness(task_id) if task_id is not None else 0.0
        sim.at(sim.now + max(0.0, delay) + late, fire, epoch, self.kind)
        return timer


class SimTaskPorts:
    """`TaskPorts` of one task in one epoch: what the task reports goes toward the coordinator
    (acknowledgements, declines, finished sources, snapshot writes), consumed buffers' credits back
    to their senders."""

    def __init__(self, sim: SimExecutor, task_id: TaskId, epoch: int) -> None:
        self.sim, self.task_id, self.epoch = sim, task_id, epoch

    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        self.sim.coordinator_link.acknowledge(self.epoch, ack)

    def decline(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        sim = self.sim
        sim.channels.control(self.epoch, lambda: sim.coordinator.receive_decline(task_id, checkpoint_id, reason))

    def source_finished(self, task_id: TaskId) -> None:
        sim = self.sim
        sim.channels.control(self.epoch, lambda: sim.coordinator.source_finished(task_id))

    def write_snapshot(self, snapshot: TaskSnapshot) -> None:
        self.sim.coordinator_link.write_snapshot(self.epoch, snapshot)

    def buffer_consumed(self, task_id: TaskId, input_channel: int) -> None:
        self.sim.channels.return_credit(self.epoch, task_id, input_channel)

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        self.sim.coordinator_link.completion_learned(task_id, checkpoint_id)

    def wake(self, task_id: TaskId) -> None:
        if self.epoch == self.sim.epoch:
            self.sim.runner.wake(task_id)
