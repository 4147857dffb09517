"""The final checkpoint of an execution: what the coordinator does once every source finished.

* **Final checkpoint.** Once every source has finished, periodic triggering stops and a
  checkpoint is triggered as soon as `max_concurrent` allows (interval and min pause ignored);
  it is the only *candidate* in flight (a checkpoint triggered after the final one would stage
  sink transactions that nothing ever commits), an aborted candidate is retried after
  `final_retry_delay`, until one completes (`is_final_checkpoint_complete`). Candidates carry
  `properties["final"] = True` into their completed checkpoint. A candidate is *forced aligned*
  (`trigger_source`'s `forced_aligned`), whatever the mode: no barrier of it overtakes a
  record, so it holds no in-flight records, and what the sinks commit at end of input never
  includes a record a restore of it replays (at another parallelism such a record would reach
  another sink subtask and be committed twice). Its completion is repeated to
  every task each `final_retry_delay` until the executor stops the coordinator (the job ended):
  a lost notification would leave a source waiting forever, with no later checkpoint to stand in.
* **Restored final checkpoint.** An execution restored from a final checkpoint F
  (`restored_from(F)`) has nothing left to read: it takes no new checkpoint, and once its sources
  report finished F is the final checkpoint again (every task is notified of F, `final=True`). A
  new checkpoint would stage the replayed in-flight records under a new transaction, although
  the sinks that ended before the failure already committed them under F's end-of-input one.

`FinalCheckpoint` holds this state and its one timer (the next candidate, or the next repeat of
the completion); it reaches its coordinator only through the narrow `FinalCheckpointController`
(Flink's barrier handler states reach their owner the same way).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from vocabulary.handles import TaskId
from vocabulary.reasons import CheckpointFailureReason

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.coordinator_gateway import CoordinatorGateway
    from vocabulary.ports import Cancellable, Timers


class FinalCheckpointController(Protocol):
    """What `FinalCheckpoint` asks of its coordinator."""

    @property
    def is_suspended(self) -> bool: ...

    @property
    def is_shut_down(self) -> bool: ...

    def pending_ids(self) -> Iterable[int]: ...

    def all_tasks(self) -> Iterable[TaskId]: ...

    def trigger_final(self) -> int | CheckpointFailureReason:
        """Trigger a candidate now (`max_concurrent` applies; interval and min pause do not)."""
        ...

    def subsume_pending(self) -> None:
        """Abort every pending checkpoint as SUBSUMED."""
        ...

    def stop_ticking(self) -> None:
        """No more periodic triggers."""
        ...


class FinalCheckpoint:
    """Where an execution's final checkpoint stands, and the timer that drives it.

    Args:
        controller: its coordinator.
        gateway: the coordinator's gateway (commits and completion notifications).
        timers: the coordinator's timers.
        retry_delay: seconds before retrying an aborted candidate, and between repeats of the
            completion.
    """

    def __init__(self, controller: FinalCheckpointController, gateway: CoordinatorGateway, timers: Timers,
                 retry_delay: float) -> None:
        self._controller = controller
        self._gateway = gateway
        self._timers = timers
        self.retry_delay = retry_delay
        self._finished_sources: set[TaskId] = set()
        #: ids above it were triggered after all sources finished (None: some source still reads)
        self.floor: int | None = None
        #: the completed final checkpoint, else the latest candidate triggered
        self.checkpoint_id: int | None = None
        self.complete = False
        #: the final checkpoint this execution restored (None: it restored none)
        self.restored: int | None = None
        self._timer: Cancellable | None = None
        self._candidate_aborted = False
        #: how many times the completion was repeated to every task
        self.notifications_repeated = 0

    @property
    def all_sources_finished(self) -> bool:
        return self.floor is not None

    @property
    def in_progress(self) -> bool:
        """Every source finished and no final checkpoint completed yet: a trigger is a candidate."""
        return self.floor is not None and not self.complete

    def candidate_pending(self) -> bool:
        floor = self.floor
        return floor is not None and not self.complete and any(i > floor for i in self._controller.pending_ids())

    # -- events from the coordinator -----------------------------------------------------------

    def source_finished(self, task_id: TaskId, num_sources: int, last_trigger_id: int) -> None:
        """Source `task_id` (one of `num_sources`) finished; after the last one, drive the final
        checkpoint (candidates are the ids above `last_trigger_id`)."""
        if task_id in self._finished_sources:
            return
        self._finished_sources.add(task_id)
        if len(self._finished_sources) == num_sources and self.floor is None:
            self.floor = last_trigger_id
            self._controller.stop_ticking()  # from now on only final candidates, one at a time
            if self.restored is not None:
                self._complete_restored()
            elif not self._controller.is_suspended:
                self._schedule_trigger(0.0)

    def restored_from(self, checkpoint: CompletedCheckpoint | None) -> None:
        """The execution was deployed from `checkpoint` (None: from scratch)."""
        final = checkpoint is not None and bool(checkpoint.properties.get("final"))
        self.restored = checkpoint.checkpoint_id if final else None
        if final:
            self._controller.stop_ticking()

    def candidate_triggered(self, checkpoint_id: int) -> None:
        self.checkpoint_id = checkpoint_id

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is durable: if it is the first candidate to complete, it is
        the final checkpoint; its completion is repeated from now on."""
        if self.floor is None or checkpoint_id <= self.floor or self.complete:
            return
        self.complete = True
        self.checkpoint_id = checkpoint_id
        self._controller.stop_ticking()
        self._schedule_renotify()

    def checkpoint_aborted(self, checkpoint_id: int) -> None:
        if self.floor is not None and checkpoint_id > self.floor:
            self._candidate_aborted = True

    def pending_ended(self) -> None:
        """A pending checkpoint completed or aborted: trigger the next candidate (after
        `retry_delay` if a candidate was aborted)."""
        if self.in_progress and not self._controller.is_suspended and self.restored is None:
            delay = self.retry_delay if self._candidate_aborted else 0.0
            self._candidate_aborted = False
            self._schedule_trigger(delay)

    def resumed(self) -> None:
        """The coordinator was started again after `stop()`."""
        if self.in_progress:
            self._schedule_trigger(0.0)

    def restart(self) -> None:
        """A new execution attempt: its sources have not finished (what it restored stays)."""
        self._finished_sources.clear()
        self.floor = None
        self.checkpoint_id = None
        self.complete = False
        self._candidate_aborted = False
        self.cancel_timer()

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- the timer -----------------------------------------------------------------------------

    def _complete_restored(self) -> None:
        checkpoint_id = self.restored
        assert checkpoint_id is not None
        self.complete = True
        self.checkpoint_id = checkpoint_id
        self._schedule_renotify()
        self._controller.subsume_pending()  # none is expected: no trigger was allowed
        self._gateway.commit_checkpoint(checkpoint_id)  # idempotent if its run committed it already
        for task in self._controller.all_tasks():
            self._gateway.notify_complete(task, checkpoint_id)

    def _schedule_renotify(self) -> None:
        self.cancel_timer()
        if not self._controller.is_suspended:
            self._timer = self._timers.schedule(self.retry_delay, self._on_renotify)

    def _on_renotify(self) -> None:
        """Repeat the final checkpoint's completion to every task (idempotent for a task that
        heard it): a lost notification would leave a source waiting for it forever, and after
        the final checkpoint no later completion comes to stand in for it."""
        self._timer = None
        controller = self._controller
        if not self.complete or controller.is_shut_down or controller.is_suspended:
            return
        checkpoint_id = self.checkpoint_id
        assert checkpoint_id is not None
        self.notifications_repeated += 1
        for task in controller.all_tasks():
            self._gateway.notify_complete(task, checkpoint_id)
        self._schedule_renotify()

    def _schedule_trigger(self, delay: float) -> None:
        self.cancel_timer()
        self._timer = self._timers.schedule(delay, self._on_trigger)

    def _on_trigger(self) -> None:
        self._timer = None
        controller = self._controller
        if self.floor is None or self.complete or controller.is_shut_down or controller.is_suspended:
            return
        if self.candidate_pending():
            return  # a candidate is in flight; its end re-evaluates
        # TOO_MANY_CHECKPOINTS: a pending checkpoint ending re-evaluates (`pending_ended`)
        result = controller.trigger_final()
        if result is CheckpointFailureReason.STORAGE_FAILURE and not controller.is_suspended \
                and not controller.is_shut_down:
            self._schedule_trigger(self.retry_delay)  # nothing else would ever retry it
