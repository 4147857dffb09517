"""The checkpoint coordinator: a pure state machine (Flink's `CheckpointCoordinator`;
`docs/semantics.md`, "The coordinator").

Theory of operation
-------------------
The coordinator decides *when* checkpoints start and *whether* they complete; everything it does
to the outside world goes through the injected `CoordinatorGateway` (trigger a source, tell tasks a
checkpoint completed or aborted, fail the job), the injected `CompletedCheckpointStore`, and an
injected clock and timer service. It reads no clock and does no I/O of its own, so the simulator
drives it in virtual time and the Ray executor drives it with wall-clock timers, unchanged.

Life of a checkpoint::

    trigger ──> pending ──(every task acknowledged)──> finalize ──store.add──> completed
                   │                                                  │
                   └── timeout / decline / subsumed / failover ───────┴─(StorageError)──> aborted

* **Triggering.** Periodic triggers come from a chain of one-shot timers (`interval` apart,
  `checkpoint.periodic_trigger`). A trigger is refused while `max_concurrent` checkpoints are
  pending or until `min_pause` has passed since the last *completion* (the periodic request then
  waits for that moment). `trigger_checkpoint(force=True)` ignores both.
* **Completion.** The newest completion subsumes every older pending checkpoint (aborted with
  SUBSUMED). A failing `store.add_checkpoint` aborts with STORAGE_FAILURE instead.
  Once it is durable, the gateway commits it (`commit_checkpoint`, once per checkpoint: Flink's
  global committer), then every task is notified (`notify_complete`), then
  `on_checkpoint_completed` runs: no task hears of a completion whose commit was not issued.
* **Failures.** Each abort whose reason `counts_as_failure` counts against `tolerable_failures`
  (`checkpoint.failure_manager`); one too many calls `gateway.fail_job` once.
* **Final checkpoint.** Once every source has finished, periodic triggering stops and final
  candidates are triggered, one at a time, until one completes; its completion is repeated to
  every task. An execution restored from a final checkpoint takes no checkpoint of its own
  (`checkpoint.final_checkpoint`).
* **Stop.** `stop()` pauses periodic and final triggering until `start()` or `restart()` (an
  executor's failover: stop, `abort_all_pending(TASK_FAILURE)`, `restart(...)`, start), so no
  timer triggers the old execution attempt's sources; manual triggers still work.
* **Ids** come from the `CheckpointIDCounter` and are checked to be above every id this
  coordinator or the store has seen, so they keep increasing across `restart()` and failover. A
  counter that cannot persist the id (`StorageError`) fails the trigger: refused with
  STORAGE_FAILURE, counted like an abort against `tolerable_failures`, and tried again — at the
  next interval, or after `final_retry_delay` for a final candidate (nothing else would retry it,
  and the sources would wait for their final checkpoint forever).

Invariants (asserted): ids strictly increase; at most `max_concurrent` checkpoints are pending
unless forced; a checkpoint completes only when every task it waited for acknowledged; every
abort carries a `CheckpointFailureReason`.

Reentrancy: gateway calls are made after the coordinator's own state is updated, and loops over
pending checkpoints iterate over a snapshot, so a gateway that calls back synchronously (a test
double, or an executor failing the job from `fail_job`) sees a consistent coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from checkpoint.failure_manager import CheckpointFailureManager
from checkpoint.final_checkpoint import FinalCheckpoint
from checkpoint.pending import AckResult, PendingCheckpoint
from checkpoint.periodic_trigger import PeriodicTrigger
from checkpoint.stats import DEFAULT_MAX_HISTORY, CheckpointStatsTracker
from checkpoint.storage.layout import StorageError
from vocabulary.handles import TaskAcknowledgement, TaskId, check_task_lists
from vocabulary.options import CheckpointConfig, CheckpointingMode
from vocabulary.reasons import CheckpointFailureReason

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.coordinator_gateway import CoordinatorGateway
    from checkpoint.ids import CheckpointIDCounter
    from checkpoint.storage.layout import CheckpointStorage
    from checkpoint.storage.store import CompletedCheckpointStore
    from vocabulary.ports import Cancellable, Clock, Timers

log = logging.getLogger(__name__)

#: retry delay for an aborted final checkpoint when periodic checkpointing is off
DEFAULT_FINAL_RETRY_DELAY = 1.0
#: slack when comparing clock times, so float rounding in `now + delay` cannot refuse a
#: trigger that a timer scheduled for exactly the earliest allowed moment
_TIME_EPSILON = 1e-9


class CheckpointCoordinator:
    """Triggers checkpoints, collects acknowledgements, completes or aborts them.

    Args:
        job_id: the job (names the storage directory).
        config: checkpointing options.
        clock: current time (seconds).
        timers: one-shot timers (periodic triggers, timeouts, final-checkpoint retries).
        gateway: how to reach tasks and the executor.
        store: where completed checkpoints go.
        id_counter: the source of checkpoint ids (started by its owner).
        source_tasks: tasks that inject barriers.
        all_tasks: every task that must acknowledge (sources included).
        storage: if given, the files of aborted checkpoints (`chk-<id>/`) are deleted through it.
        final_retry_delay: seconds before retrying an aborted final checkpoint (default: the
            interval, or `DEFAULT_FINAL_RETRY_DELAY` when periodic checkpointing is off).

    Raises:
        ValueError: the task lists are empty, repeat a task, or name a source outside `all_tasks`.
    """

    def __init__(
        self,
        job_id: str,
        config: CheckpointConfig,
        *,
        clock: Clock,
        timers: Timers,
        gateway: CoordinatorGateway,
        store: CompletedCheckpointStore,
        id_counter: CheckpointIDCounter,
        source_tasks: Iterable[TaskId],
        all_tasks: Iterable[TaskId],
        storage: CheckpointStorage | None = None,
        final_retry_delay: float | None = None,
    ) -> None:
        config.validate()
        self.job_id = job_id
        self.config = config
        self._clock = clock
        self._timers = timers
        self._gateway = gateway
        self._store = store
        self._id_counter = id_counter
        self._storage = storage
        if final_retry_delay is None:
            final_retry_delay = config.interval if config.interval is not None else DEFAULT_FINAL_RETRY_DELAY
        if final_retry_delay < 0:
            raise ValueError(f"final_retry_delay must be >= 0, got {final_retry_delay!r}")
        self._source_tasks, self._all_tasks = check_task_lists(source_tasks, all_tasks)

        self._pending: dict[int, PendingCheckpoint] = {}
        self._timeout_timers: dict[int, Cancellable] = {}
        self._stats = CheckpointStatsTracker(max_history=DEFAULT_MAX_HISTORY)
        self._last_trigger_id = 0
        self._last_completion_time: float | None = None
        self._failures = CheckpointFailureManager(config.tolerable_failures, lambda error: self._gateway.fail_job(error))
        self._shut_down = False
        self._started = False
        self._suspended = False  # stop() until start()/restart(): no periodic or final trigger
        controller = _Controller(self)
        self._periodic_trigger = PeriodicTrigger(controller, clock, timers, config)
        self._final = FinalCheckpoint(controller, gateway, timers, final_retry_delay)
        self._counters = {
            "acks_for_unknown_checkpoint": 0,
            "acks_duplicate": 0,
            "acks_unknown_task": 0,
            "declines_ignored": 0,
        }

    # -- queries -------------------------------------------------------------------------------

    @property
    def stats(self) -> CheckpointStatsTracker:
        return self._stats

    @property
    def pending_ids(self) -> list[int]:
        return sorted(self._pending)

    def get_pending(self, checkpoint_id: int) -> PendingCheckpoint | None:
        return self._pending.get(checkpoint_id)

    def latest_completed(self) -> CompletedCheckpoint | None:
        return self._store.get_latest_checkpoint()

    @property
    def store(self) -> CompletedCheckpointStore:
        return self._store

    @property
    def source_tasks(self) -> list[TaskId]:
        return list(self._source_tasks)

    @property
    def all_tasks(self) -> list[TaskId]:
        return list(self._all_tasks)

    @property
    def consecutive_failures(self) -> int:
        return self._failures.consecutive_failures

    @property
    def num_job_failures(self) -> int:
        """How many times `gateway.fail_job` was called."""
        return self._failures.num_job_failures

    @property
    def counters(self) -> dict[str, int]:
        """Debug counters of ignored acknowledgements and declines, and of repeated final
        notifications."""
        return {**self._counters, "final_notifications_repeated": self._final.notifications_repeated}

    @property
    def is_periodic_triggering(self) -> bool:
        return self._periodic_trigger.is_periodic

    @property
    def is_suspended(self) -> bool:
        """True between `stop()` and the next `start()`/`restart()`."""
        return self._suspended

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    @property
    def final_checkpoint_id(self) -> int | None:
        """The completed final checkpoint, else the latest one triggered after all sources
        finished (None before that)."""
        return self._final.checkpoint_id

    @property
    def is_final_checkpoint_complete(self) -> bool:
        return self._final.complete

    @property
    def all_sources_finished(self) -> bool:
        return self._final.all_sources_finished

    def __repr__(self) -> str:
        return (
            f"CheckpointCoordinator(job={self.job_id!r}, pending={self.pending_ids}, "
            f"completed={self._stats.num_completed}, aborted={self._stats.num_aborted}, "
            f"failures={self.consecutive_failures}, final={self._final.checkpoint_id}"
            f"{'(complete)' if self._final.complete else ''})"
        )

    # -- periodic triggering -------------------------------------------------------------------

    def start(self) -> None:
        """Start periodic triggering (first trigger one `interval` from now; no-op when
        `interval` is None or already started) and resume a final checkpoint paused by `stop()`.

        Raises:
            RuntimeError: the coordinator was shut down.
        """
        if self._shut_down:
            raise RuntimeError(f"checkpoint coordinator of job {self.job_id!r} was shut down")
        self._started = True
        final = self._final
        if self._suspended:
            self._suspended = False
            final.resumed()
        if (self.config.interval is None or self._periodic_trigger.is_periodic or final.complete
                or final.floor is not None or final.restored is not None):
            return
        self._periodic_trigger.begin()

    def stop(self) -> None:
        """Stop triggering, periodic and final (pending checkpoints carry on), until `start()`
        or `restart()`; an executor calls it when a failover begins."""
        self._started = False
        self._suspended = True
        self._periodic_trigger.stop()
        self._final.cancel_timer()

    # -- triggering ----------------------------------------------------------------------------

    def trigger_checkpoint(self, now: float | None = None, *, force: bool = False) -> int | CheckpointFailureReason:
        """Trigger a checkpoint now (manual trigger, tests, savepoint-like use).

        Args:
            now: the barrier timestamp (default: the clock).
            force: ignore `max_concurrent` and `min_pause`.

        Returns:
            The new checkpoint id, or why it was refused (TOO_MANY_CHECKPOINTS, MIN_PAUSE,
            JOB_FINISHED after the final checkpoint, COORDINATOR_SHUTDOWN).
        """
        return self._trigger(now, force=force, ignore_pause=False)

    def _refusal(self, now: float, *, force: bool, ignore_pause: bool) -> CheckpointFailureReason | None:
        if self._shut_down:
            return CheckpointFailureReason.COORDINATOR_SHUTDOWN
        if force:
            return None
        if self._final.complete:
            return CheckpointFailureReason.JOB_FINISHED
        if len(self._pending) >= self.config.max_concurrent or self._final.candidate_pending():
            return CheckpointFailureReason.TOO_MANY_CHECKPOINTS
        if self._final.restored is not None:
            return CheckpointFailureReason.JOB_FINISHED
        if (
            not ignore_pause
            and self._last_completion_time is not None
            and now < self._last_completion_time + self.config.min_pause - _TIME_EPSILON
        ):
            return CheckpointFailureReason.MIN_PAUSE
        return None

    def _trigger(self, now: float | None, *, force: bool, ignore_pause: bool) -> int | CheckpointFailureReason:
        now = self._clock.now() if now is None else now
        refusal = self._refusal(now, force=force, ignore_pause=ignore_pause)
        if refusal is not None:
            self._stats.report_refused(refusal)
            return refusal
        try:
            checkpoint_id = self._next_checkpoint_id()
        except StorageError as exc:  # the id counter could not persist: no checkpoint started
            log.warning("job %s: a checkpoint could not be triggered: %s", self.job_id, exc)
            self._stats.report_refused(CheckpointFailureReason.STORAGE_FAILURE)
            self._failures.checkpoint_failed(None, CheckpointFailureReason.STORAGE_FAILURE)
            return CheckpointFailureReason.STORAGE_FAILURE
        final = self._final.in_progress
        # The final checkpoint is taken aligned whatever the mode (no alignment timeout either):
        # every source read its input, so aligning only waits for the pipeline to drain, and no
        # in-flight record is left as channel state. Such a record would reach a sink after the
        # final checkpoint and be committed in the sink's end-of-input transaction; a restore at
        # another parallelism replays it to another sink subtask, which commits it again.
        unaligned = not final and self.config.unaligned and self.config.mode is CheckpointingMode.EXACTLY_ONCE
        alignment_timeout = None if final else self.config.alignment_timeout
        pending = PendingCheckpoint(
            checkpoint_id,
            now,
            self._all_tasks,
            job_id=self.job_id,
            properties={
                "mode": self.config.mode.name,
                "unaligned": unaligned,
                "alignment_timeout": alignment_timeout,
            },
        )
        self._pending[checkpoint_id] = pending
        self._timeout_timers[checkpoint_id] = self._timers.schedule(
            self.config.timeout, partial(self._on_timeout, checkpoint_id)
        )
        if final:
            self._final.candidate_triggered(checkpoint_id)
            pending.properties["final"] = True
        assert force or len(self._pending) <= self.config.max_concurrent
        log.debug("job %s: triggering checkpoint %d at %.6f", self.job_id, checkpoint_id, now)
        for source in self._source_tasks:
            if checkpoint_id not in self._pending:
                break  # declined synchronously by an earlier source
            self._gateway.trigger_source(source, checkpoint_id, now, unaligned, alignment_timeout, final)
        return checkpoint_id

    def _next_checkpoint_id(self) -> int:
        floor = max(self._last_trigger_id, self._store.highest_checkpoint_id_seen)
        checkpoint_id = self._id_counter.get_and_increment()
        if checkpoint_id <= floor:
            log.warning("job %s: checkpoint id counter at %d is behind id %d; advancing it",
                        self.job_id, checkpoint_id, floor)
            self._id_counter.set_count(floor + 1)
            checkpoint_id = self._id_counter.get_and_increment()
        if checkpoint_id <= floor:
            raise RuntimeError(f"checkpoint id counter returned {checkpoint_id}, not above {floor}")
        self._last_trigger_id = checkpoint_id
        return checkpoint_id

    # -- acknowledgements and declines ---------------------------------------------------------

    def receive_acknowledge(self, ack: TaskAcknowledgement) -> AckResult:
        """A task finished its part of a checkpoint.

        Returns:
            SUCCESS; DISCARDED for an unknown, completed or aborted checkpoint; DUPLICATE or
            UNKNOWN_TASK (all but SUCCESS are ignored and counted in `counters`).
        """
        pending = self._pending.get(ack.checkpoint_id)
        if pending is None:
            self._counters["acks_for_unknown_checkpoint"] += 1
            return AckResult.DISCARDED
        result = pending.acknowledge(ack, self._clock.now())
        if result is AckResult.DUPLICATE:
            self._counters["acks_duplicate"] += 1
        elif result is AckResult.UNKNOWN_TASK:
            self._counters["acks_unknown_task"] += 1
        elif result is AckResult.SUCCESS and pending.is_fully_acknowledged:
            self._complete(pending)
            self._after_pending_ended()
        return result

    def receive_decline(
        self,
        task_id: TaskId,
        checkpoint_id: int,
        reason: CheckpointFailureReason = CheckpointFailureReason.DECLINED,
    ) -> bool:
        """A task could not take part in a checkpoint: abort it with `reason`.

        Returns:
            True if a pending checkpoint was aborted, False if the decline was ignored.
        """
        if not isinstance(reason, CheckpointFailureReason):
            raise TypeError(f"decline reason from {task_id} must be a CheckpointFailureReason, got {reason!r}")
        pending = self._pending.get(checkpoint_id)
        if pending is None or task_id not in pending.tasks:
            self._counters["declines_ignored"] += 1
            return False
        log.debug("job %s: %s declined checkpoint %d (%s)", self.job_id, task_id, checkpoint_id, reason.value)
        self._abort(pending, reason)
        self._after_pending_ended()
        return True

    def _on_timeout(self, checkpoint_id: int) -> None:
        self._timeout_timers.pop(checkpoint_id, None)
        pending = self._pending.get(checkpoint_id)
        if pending is None:
            return
        log.debug("job %s: checkpoint %d timed out", self.job_id, checkpoint_id)
        self._abort(pending, CheckpointFailureReason.TIMEOUT)
        self._after_pending_ended()

    # -- completion and abort ------------------------------------------------------------------

    def _complete(self, pending: PendingCheckpoint) -> None:
        now = self._clock.now()
        checkpoint_id = pending.checkpoint_id
        assert pending.is_fully_acknowledged and list(pending.acks) == list(pending.tasks)
        completed = pending.finalize(now)
        self._forget(checkpoint_id)
        try:
            self._store.add_checkpoint(completed)
        except StorageError as exc:
            log.warning("job %s: storing checkpoint %d failed: %s", self.job_id, checkpoint_id, exc)
            self._abort(pending, CheckpointFailureReason.STORAGE_FAILURE)
            return
        self._last_completion_time = now
        self._failures.checkpoint_succeeded()
        self._stats.report_completed(pending, now)
        self._final.checkpoint_completed(checkpoint_id)
        for older_id in sorted(i for i in self._pending if i < checkpoint_id):
            older = self._pending.get(older_id)
            if older is not None:
                self._abort(older, CheckpointFailureReason.SUBSUMED)
        self._gateway.commit_checkpoint(checkpoint_id)  # commit-before-notify
        for task in pending.tasks:
            self._gateway.notify_complete(task, checkpoint_id)
        log.debug("job %s: completed checkpoint %d", self.job_id, checkpoint_id)
        self._gateway.on_checkpoint_completed(completed)

    def _forget(self, checkpoint_id: int) -> None:
        self._pending.pop(checkpoint_id, None)
        timer = self._timeout_timers.pop(checkpoint_id, None)
        if timer is not None:
            timer.cancel()

    def _abort(self, pending: PendingCheckpoint, reason: CheckpointFailureReason) -> None:
        assert isinstance(reason, CheckpointFailureReason)
        now = self._clock.now()
        checkpoint_id = pending.checkpoint_id
        self._forget(checkpoint_id)
        pending.abort(reason, now)
        self._stats.report_aborted(pending, reason, now)
        self._final.checkpoint_aborted(checkpoint_id)
        for task in pending.tasks:
            self._gateway.notify_aborted(task, checkpoint_id, reason)
        if self._storage is not None:
            try:
                self._storage.discard_checkpoint(self.job_id, checkpoint_id)
            except StorageError as exc:
                log.warning("job %s: could not delete files of aborted checkpoint %d: %s",
                            self.job_id, checkpoint_id, exc)
        if reason.counts_as_failure:
            self._failures.checkpoint_failed(checkpoint_id, reason)

    def _subsume_pending(self) -> None:
        for checkpoint_id in sorted(self._pending):
            pending = self._pending.get(checkpoint_id)
            if pending is not None:
                self._abort(pending, CheckpointFailureReason.SUBSUMED)

    def _after_pending_ended(self) -> None:
        """A pending checkpoint completed or aborted: run a waiting periodic trigger, and keep
        the final checkpoint going."""
        if self._shut_down:
            return
        self._periodic_trigger.slot_freed(len(self._pending))
        self._final.pending_ended()

    def abort_all_pending(self, reason: CheckpointFailureReason) -> list[int]:
        """Abort every pending checkpoint with `reason` (failover: TASK_FAILURE).

        Returns:
            The aborted ids, ascending.
        """
        if not isinstance(reason, CheckpointFailureReason):
            raise TypeError(f"abort reason must be a CheckpointFailureReason, got {reason!r}")
        aborted = []
        for checkpoint_id in sorted(self._pending):
            pending = self._pending.get(checkpoint_id)
            if pending is not None:
                self._abort(pending, reason)
                aborted.append(checkpoint_id)
        if aborted:
            self._after_pending_ended()
        return aborted

    # -- end of input --------------------------------------------------------------------------

    def source_finished(self, task_id: TaskId) -> None:
        """A source has emitted all its data; after the last one, drive the final checkpoint.

        Raises:
            ValueError: `task_id` is not a source of this job.
        """
        if task_id not in self._source_tasks:
            raise ValueError(f"{task_id} is not a source task of job {self.job_id!r}")
        self._final.source_finished(task_id, len(self._source_tasks), self._last_trigger_id)

    def restored_from(self, checkpoint: CompletedCheckpoint | None) -> None:
        """The executor deployed the current execution from `checkpoint` (None: from scratch).
        Call it on every deployment before `start()` (`restart()` keeps it). If it is a final
        checkpoint (`properties["final"]`), this execution takes no checkpoint of its own
        (`checkpoint.final_checkpoint`)."""
        self._final.restored_from(checkpoint)

    # -- failover and shutdown -----------------------------------------------------------------

    def restart(self, source_tasks: Iterable[TaskId], all_tasks: Iterable[TaskId]) -> None:
        """Start over for a new execution attempt: abort what is pending (TASK_FAILURE), take the
        new task lists, forget finished sources. Ids keep increasing; periodic triggering is
        left as it is (an executor usually `stop()`s during failover and `start()`s after); a final
        checkpoint paused by `stop()` may be triggered again once the new sources finish.
        """
        sources, tasks = check_task_lists(source_tasks, all_tasks)
        self.abort_all_pending(CheckpointFailureReason.TASK_FAILURE)
        self._source_tasks, self._all_tasks = sources, tasks
        self._final.restart()
        self._suspended = False
        if self._started and not self._periodic_trigger.is_periodic and not self._shut_down:
            self.start()

    def shutdown(self) -> None:
        """Stop triggering and abort everything pending (COORDINATOR_SHUTDOWN); idempotent."""
        if self._shut_down:
            return
        self.stop()
        self._final.cancel_timer()
        self._shut_down = True
        for checkpoint_id in sorted(self._pending):
            pending = self._pending.get(checkpoint_id)
            if pending is not None:
                self._abort(pending, CheckpointFailureReason.COORDINATOR_SHUTDOWN)


class _Controller:
    """The coordinator as its `PeriodicTrigger` and `FinalCheckpoint` see it
    (`PeriodicTriggerController`, `FinalCheckpointController`)."""

    __slots__ = ("_coordinator",)

    def __init__(self, coordinator: CheckpointCoordinator) -> None:
        self._coordinator = coordinator

    @property
    def last_completion_time(self) -> float | None:
        return self._coordinator._last_completion_time

    def trigger_periodic(self, now: float) -> int | CheckpointFailureReason:
        return self._coordinator._trigger(now, force=False, ignore_pause=False)

    @property
    def is_suspended(self) -> bool:
        return self._coordinator._suspended

    @property
    def is_shut_down(self) -> bool:
        return self._coordinator._shut_down

    def pending_ids(self) -> Iterable[int]:
        return self._coordinator._pending

    def all_tasks(self) -> Iterable[TaskId]:
        return self._coordinator._all_tasks

    def trigger_final(self) -> int | CheckpointFailureReason:
        return self._coordinator._trigger(None, force=False, ignore_pause=True)

    def subsume_pending(self) -> None:
        self._coordinator._subsume_pending()

    def stop_ticking(self) -> None:
        self._coordinator._periodic_trigger.stop()
