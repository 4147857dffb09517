"""`ControlPlane`: what becomes of the checkpoint coordinator's messages to the tasks, decided once.

The coordinator speaks to the tasks through its `CoordinatorGateway`: triggers to the sources,
the global commit of a completed checkpoint, completion and abort notifications. Every decision
about those messages is made here, for every executor; an executor supplies only a
`ControlTransport` that carries a message to a task of an execution attempt (in its own time,
with its own latency), schedules a callback, commits, kills the coordinator and fails the job.

Theory of operation, in the order a message meets the rules:

1. **Only to a running attempt.** Messages go to the attempt deployed last
   (`attempt_deployed`); from the start of a failover (`attempt_cancelled`) to the next
   deployment nothing is sent, and nothing counts as an occurrence of a control-message fault
   (the aborts of the failing attempt's checkpoints go nowhere). Only the leading contender
   triggers (`ControlTransport.leads`).
2. **Doomed.** A coordinator whose completion is announced (`FaultSchedule.completion_announced`:
   `CoordinatorCrashBeforeNotify`) dies instead of committing it: it is *doomed*, and nothing more
   leaves it — no commit, no notification, no trigger, no completed checkpoint for the
   listeners. A coordinator that crashes otherwise (`coordinator_lost`) sends nothing either.
   What left it earlier is in flight and arrives while its attempt runs.
3. **Commit before notify.** A completed checkpoint is committed globally (Flink's global
   committer) before any task is notified of it (the coordinator calls in that order).
4. **Routing** (`CompletionNotices`). A trigger carries the newest completion its source was
   owed. A completion goes by a message of its own to a task with a completion listener, and to
   every task for the final checkpoint (`final`: the coordinator's final checkpoint is complete
   and it is this one); to any other task it is *owed*: a source takes it with its next
   trigger, a task that is no source from the barriers it receives. The routing is decided when
   the coordinator notifies, whatever the message's faults.
5. **Faults** (`FaultSchedule.control`, one occurrence per message the coordinator decides to
   send, owed completions included). A sent message is delivered `copies` times (0: lost),
   `delay` seconds late (`Delivery`). An owed completion is kept only if its message would have
   arrived: lost, it is not kept; delayed, it is kept `delay` seconds later, if its attempt and
   its coordinator's notices still stand; duplicated, it is kept once (keeping the newest is
   idempotent).

Pure: no clock, timers or I/O of its own; the transport does what takes time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from runtime.jobmaster.coordination.completions import CompletionNotices
from runtime.jobmaster.faults.schedule import DELIVER, ControlEffect, FaultSchedule
from vocabulary.fault_plan import Fault
from vocabulary.handles import TaskId
from vocabulary.reasons import CheckpointFailureReason


@dataclass(frozen=True)
class TriggerCheckpoint:
    """Inject barrier `checkpoint_id` at a source; `completed`: the newest completion it was owed."""

    kind: ClassVar[str] = "trigger"
    checkpoint_id: int
    timestamp: float
    unaligned: bool = False
    alignment_timeout: float | None = None
    forced_aligned: bool = False
    completed: int | None = None


@dataclass(frozen=True)
class NotifyCheckpointComplete:
    """Checkpoint `checkpoint_id` completed (`final`: the job's final checkpoint)."""

    kind: ClassVar[str] = "complete"
    checkpoint_id: int
    final: bool = False


@dataclass(frozen=True)
class NotifyCheckpointAborted:
    """Checkpoint `checkpoint_id` was aborted for `reason`."""

    kind: ClassVar[str] = "abort"
    checkpoint_id: int
    reason: CheckpointFailureReason


ControlMessage = TriggerCheckpoint | NotifyCheckpointComplete | NotifyCheckpointAborted


@dataclass(frozen=True)
class Delivery:
    """How a sent message reaches its task: `copies` times (0: the network loses it), each
    `delay` seconds later than the transport's own latency."""

    copies: int = 1
    delay: float = 0.0

    @classmethod
    def of(cls, effect: ControlEffect) -> Delivery:
        return cls(copies=0 if effect.lost else effect.copies, delay=effect.delay)


class ControlTransport(Protocol):
    """What an executor does for the `ControlPlane`: carry, schedule, commit, kill, fail."""

    def leads(self) -> bool:
        """Whether this coordinator leads (always, without high availability)."""
        ...

    def deliver(self, task_id: TaskId, epoch: int, message: ControlMessage, delivery: Delivery) -> None:
        """Carry `message` to the task `task_id` of attempt `epoch` as `delivery` says (0 copies: it
        is lost on the way). A copy arriving after attempt `epoch` ended is dropped."""
        ...

    def struck(self, message: ControlMessage, task_id: TaskId, faults: Sequence[Fault]) -> None:
        """`faults` struck `message` to `task_id` (for the executor's trace or log)."""
        ...

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        """Call `callback` after `delay` seconds, on the coordinator's side."""
        ...

    def commit(self, checkpoint_id: int) -> None:
        """Commit `checkpoint_id` for every sink (the global committer); a failure fails the job over."""
        ...

    def crash(self, checkpoint_id: int) -> None:
        """The coordinator dies now, with `checkpoint_id` durable and announced to nobody."""
        ...

    def fail(self, error: Exception) -> None:
        """Too many checkpoint failures: fail the job over."""
        ...

    def completed(self, completed: Any) -> None:
        """Checkpoint `completed` is durable, committed and notified: the job's listeners."""
        ...


class ControlPlane:
    """The `CoordinatorGateway` of a job's coordinator: every decision about its control messages
    (see the module docstring), carried out through `transport`.

    Args:
        graph: the `JobGraph` (who listens for completions, which tasks are sources).
        transport: the executor's side.
        first_epoch: the epoch of the job's first attempt (later ones are higher; on Ray, epochs
            are numbered for the whole driver process).
    """

    def __init__(self, graph: Any, transport: ControlTransport, first_epoch: int = 0) -> None:
        self.graph = graph
        self.transport = transport
        self.first_epoch = first_epoch
        #: the plan's control-message faults (None: none)
        self.faults: FaultSchedule | None = None
        #: the attempt messages go to (None: none runs — a failover is under way)
        self.epoch: int | None = None
        #: the coordinator sending through this plane (`attach`)
        self.coordinator: Any = None
        #: what the coordinator tells tasks by a message of their own, what it keeps for triggers
        self.notices = CompletionNotices(graph)
        #: the coordinator dies (or died): nothing more leaves it
        self.doomed = False

    def __repr__(self) -> str:
        return f"ControlPlane(epoch={self.epoch}, doomed={self.doomed})"

    # ------------------------------------------------------------------ attempt boundaries

    def attach(self, coordinator: Any) -> None:
        """`coordinator` (a new one: the first, or a replacement) sends through this plane; it
        owes no task a completion."""
        self.coordinator = coordinator
        self.notices = CompletionNotices(self.graph)
        self.doomed = False

    def coordinator_lost(self) -> None:
        """The coordinator's process dies: nothing more leaves it (until `attach`)."""
        self.doomed = True

    def attempt_cancelled(self) -> None:
        """A failover begins: no message goes to the failing attempt from now on."""
        self.epoch = None

    def cancel_attempt(self, reason: CheckpointFailureReason) -> None:
        """A failover begins: no message goes to the failing attempt from now on (not even the
        aborts: it could not take them), the coordinator stops triggering and aborts what is
        pending for `reason`."""
        self.attempt_cancelled()
        self.coordinator.stop()
        self.coordinator.abort_all_pending(reason)

    def attempt_deployed(self, epoch: int) -> None:
        """Attempt `epoch` is deployed: messages go to its tasks; nothing of an earlier one is owed;
        for every attempt after the first, the coordinator starts over (`restart`: what is
        pending aborts, finished sources are forgotten, the checkpoint ids keep increasing)."""
        if epoch > self.first_epoch:  # (before the attempt is routed to: an abort of the old one goes nowhere)
            self.coordinator.restart(self.graph.source_task_ids(), self.graph.task_ids())
        self.epoch = epoch
        self.notices.clear()

    # ------------------------------------------------------------------ `CoordinatorGateway`

    def trigger_source(self, task_id: TaskId, checkpoint_id: int, timestamp: float,
                       unaligned: bool = False, alignment_timeout: float | None = None,
                       forced_aligned: bool = False) -> None:
        if not self._sending() or not self.transport.leads():
            return
        self._send(task_id, TriggerCheckpoint(checkpoint_id, timestamp, unaligned, alignment_timeout,
                                              forced_aligned, self.notices.take(task_id)))

    def commit_checkpoint(self, checkpoint_id: int) -> None:
        if not self._sending():
            return
        if self.faults is not None and self.faults.completion_announced(checkpoint_id):
            self.doomed = True
            self.transport.crash(checkpoint_id)
            return
        self.transport.commit(checkpoint_id)

    def notify_complete(self, task_id: TaskId, checkpoint_id: int) -> None:
        if not self._sending():
            return
        coordinator = self.coordinator
        final = coordinator.is_final_checkpoint_complete and coordinator.final_checkpoint_id == checkpoint_id
        message = NotifyCheckpointComplete(checkpoint_id, final)
        if self.notices.is_direct(task_id, final):
            self._send(task_id, message)
        else:
            self._owe(task_id, message)

    def notify_aborted(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        if self._sending():
            self._send(task_id, NotifyCheckpointAborted(checkpoint_id, reason))

    def fail_job(self, error: Exception) -> None:
        self.transport.fail(error)

    def on_checkpoint_completed(self, completed: Any) -> None:
        if not self.doomed:
            self.transport.completed(completed)

    # ------------------------------------------------------------------ rules

    def _sending(self) -> bool:
        return self.epoch is not None and not self.doomed

    def _effect(self, message: ControlMessage, task_id: TaskId) -> ControlEffect:
        return self.faults.control(message.kind, task_id) if self.faults is not None else DELIVER

    def _send(self, task_id: TaskId, message: ControlMessage) -> None:
        assert self.epoch is not None
        effect = self._effect(message, task_id)
        self.transport.deliver(task_id, self.epoch, message, Delivery.of(effect))
        if effect.faults:
            self.transport.struck(message, task_id, effect.faults)

    def _owe(self, task_id: TaskId, message: NotifyCheckpointComplete) -> None:
        """Keep a completion `task_id` gets no message for, as its message's faults let it."""
        effect = self._effect(message, task_id)
        if effect.faults:
            self.transport.struck(message, task_id, effect.faults)
        if effect.lost:
            return
        if effect.delay <= 0:
            self.notices.owe(task_id, message.checkpoint_id)
            return
        epoch, notices = self.epoch, self.notices

        def owe_late() -> None:  # only if its attempt and its coordinator's notices still stand
            if self.epoch == epoch and self.notices is notices:
                notices.owe(task_id, message.checkpoint_id)

        self.transport.schedule(effect.delay, owe_late)
