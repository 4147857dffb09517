"""`RayControlTransport`: the coordinator actor's side of the job master's `ControlPlane`.

The plane decides what becomes of each trigger, commit and notification; this carries it out
with the actor's means: a message is queued for its task's worker (sent as one `control` call
per worker when the actor's entry point returns, `CoordinatorActor._flush`), a delayed one after
a timer of the actor's timer thread (dropped if its attempt ended meanwhile, as the simulator's
epoch-bound events are), a commit is a call to the committer service, a crash stops the
coordinator (the driver kills the actor once `status()` says it is doomed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from runtime.jobmaster.coordination.control_plane import (
    ControlMessage,
    Delivery,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    TriggerCheckpoint,
)
from vocabulary.fault_plan import Fault
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from runtime.ray.coordinator_actor import CoordinatorActor

log = logging.getLogger("barrierflow.ray")


class RayControlTransport:
    """`ControlTransport` of one `CoordinatorActor` (called under its lock)."""

    def __init__(self, actor: CoordinatorActor) -> None:
        self.actor = actor

    def leads(self) -> bool:
        return self.actor.is_leader()

    def deliver(self, task_id: TaskId, epoch: int, message: ControlMessage, delivery: Delivery) -> None:
        actor = self.actor
        handle = actor._handles.get(task_id)
        if handle is None or delivery.copies == 0:
            return
        method, args = _call(epoch, message)

        def send() -> None:
            if actor.plane.epoch != epoch:  # a late copy of a failed-over attempt
                return
            for _ in range(delivery.copies):
                actor._queue(handle, method, *args)

        if delivery.delay > 0:
            actor._timers.schedule(delivery.delay, send)
        else:
            send()

    def struck(self, message: ControlMessage, task_id: TaskId, faults: Sequence[Fault]) -> None:
        for fault in faults:
            log.info("barrierflow ray: %s on %s %d to %s", type(fault).__name__, message.kind,
                     message.checkpoint_id, task_id)

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        self.actor._timers.schedule(delay, callback)

    def commit(self, checkpoint_id: int) -> None:
        self.actor._commit(checkpoint_id)

    def crash(self, checkpoint_id: int) -> None:
        self.actor.coordinator.stop()
        log.info("barrierflow ray: CoordinatorCrashBeforeNotify after checkpoint %d", checkpoint_id)

    def fail(self, error: Exception) -> None:
        actor = self.actor
        if actor._fail_request is None:
            actor._fail_request = f"checkpoint failures: {error}"

    def completed(self, completed: Any) -> None:
        self.actor._capture_completed(completed)


def _call(epoch: int, message: ControlMessage) -> tuple[str, tuple[Any, ...]]:
    """The task actor's method and arguments for `message` of attempt `epoch`."""
    if isinstance(message, TriggerCheckpoint):
        return "trigger_source", (epoch, message.checkpoint_id, message.timestamp, message.unaligned,
                                  message.alignment_timeout, message.completed, message.forced_aligned)
    if isinstance(message, NotifyCheckpointComplete):
        return "notify_complete", (epoch, message.checkpoint_id, message.final)
    assert isinstance(message, NotifyCheckpointAborted)
    return "notify_aborted", (epoch, message.checkpoint_id, message.reason)
