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

* **Triggering.** Periodic triggers come from a chain of one-shot timers (`interval` apart). A
  trigger is refused while `max_concurrent` checkpoints are pending (the periodic request then
  waits and runs as soon as a pending checkpoint ends, like Flink's queued request) or until
  `min_pause` has passed since the last *completion* (the next tick is moved to that moment).
  `trigger_checkpoint(force=True)` ignores both.
* **Completion.** The newest completion subsumes every older pending checkpoint (aborted with
  SUBSUMED). A failing `store.add_checkpoint` aborts with STORAGE_FAILURE instead.
  Once it is durable, the gateway commits it (`commit_checkpoint`, once per checkpoint: Flink's
  global committer), then every task is notified (`notify_complete`), then
  `on_checkpoint_completed` runs: no task hears of a completion whose commit was not issued.
* **Failures.** Each abort whose reason `counts_as_failure` increments a consecutive-failure
  counter; a completion resets it; exceeding `tolerable_failures` calls `gateway.fail_job` once
  and resets the counter (Flink's `CheckpointFailureManager`).
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
from typing import TYPE_CHECKING, Protocol

from checkpoint.handles import TaskAcknowledgement, TaskId
from checkpoint.io.storage import StorageError
from checkpoint.options import CheckpointConfig, CheckpointingMode
from checkpoint.pending import AckResult, PendingCheckpoint
from checkpoint.reasons import CheckpointFailureReason
from checkpoint.stats import DEFAULT_MAX_HISTORY, CheckpointStatsTracker

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.ids import CheckpointIDCounter
    from checkpoint.io.storage import CheckpointStorage
    from checkpoint.io.store import CompletedCheckpointStore
    from runtime.core.ports import Cancellable, Clock, Timers

log = logging.getLogger(__name__)

#: retry delay for an aborted final checkpoint when periodic checkpointing is off
DEFAULT_FINAL_RETRY_DELAY = 1.0
#: slack when comparing clock times, so float rounding in `now + delay` cannot refuse a
#: trigger that a timer scheduled for exactly the earliest allowed moment
_TIME_EPSILON = 1e-9


class CoordinatorGateway(Protocol):
    """Everything the coordinator does to the rest of the job (the executor implements it)."""

    def trigger_source(
        self,
        task_id: TaskId,
        checkpoint_id: int,
        timestamp: float,
        unaligned: bool,
        alignment_timeout: float | None,
        forced_aligned: bool = False,
    ) -> None:
        """Ask a source task to inject barrier `checkpoint_id` (created at `timestamp`);
        `forced_aligned`: every task aligns it, whatever its mode (the final checkpoint)."""
        ...

    def commit_checkpoint(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is durable: commit what every sink staged up to it (Flink's
        global committer). Called once per completed checkpoint (and once for a restored final
        one), before any task is notified of it; a gateway whose process dies here
        (`CoordinatorCrashBeforeNotify`) commits nothing and notifies no task of it."""
        ...

    def notify_complete(self, task_id: TaskId, checkpoint_id: int) -> None: ...

    def notify_aborted(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None: ...

    def fail_job(self, error: Exception) -> None:
        """Too many consecutive checkpoint failures: fail (and maybe restart) the job."""
        ...

    def on_checkpoint_completed(self, completed: CompletedCheckpoint) -> None:
        """Hook after a checkpoint is durable, committed and tasks were notified (landing, executors)."""
        ...


class CheckpointFailureLimitError(RuntimeError):
    """More consecutive checkpoint failures than `tolerable_failures` allows."""

    def __init__(
        self, failures: int, tolerable: int, checkpoint_id: int | None, reason: CheckpointFailureReason
    ) -> None:
        last = (f"checkpoint {checkpoint_id} aborted" if checkpoint_id is not None
                else "a checkpoint could not be triggered")
        super().__init__(
            f"exceeded checkpoint tolerable failure threshold: {failures} consecutive failures "
            f"(tolerable_failures={tolerable}); last: {last} ({reason.value})"
        )
        self.failures = failures
        self.tolerable = tolerable
        self.checkpoint_id = checkpoint_id
        self.reason = reason

    def __reduce__(self):  # picklable with its fields (Ray ships exceptions)
        return (type(self), (self.failures, self.tolerable, self.checkpoint_id, self.reason))


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
        self._final_retry_delay = final_retry_delay
        self._source_tasks, self._all_tasks = _check_tasks(source_tasks, all_tasks)

        self._pending: dict[int, PendingCheckpoint] = {}
        self._timeout_timers: dict[int, Cancellable] = {}
        self._stats = CheckpointStatsTracker(max_history=DEFAULT_MAX_HISTORY)
        self._last_trigger_id = 0
        self._last_completion_time: float | None = None
        self._consecutive_failures = 0
        self._num_job_failures = 0
        self._shut_down = False
        # periodic triggering
        self._started = False
        self._suspended = False  # stop() until start()/restart(): no periodic or final trigger
        self._periodic = False
        self._tick_timer: Cancellable | None = None
        self._waiting_for_slot = False
        # final checkpoint
        self._finished_sources: set[TaskId] = set()
        self._final_floor: int | None = None  # ids above it were triggered after all sources finished
        self._final_checkpoint_id: int | None = None
        self._final_complete = False
        self._final_timer: Cancellable | None = None
        self._final_candidate_aborted = False
        self._restored_final: int | None = None  # the final checkpoint this execution restored
        self._counters = {
            "acks_for_unknown_checkpoint": 0,
            "acks_duplicate": 0,
            "acks_unknown_task": 0,
            "declines_ignored": 0,
            "final_notifications_repeated": 0,
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
        return self._consecutive_failures

    @property
    def num_job_failures(self) -> int:
        """How many times `gateway.fail_job` was called."""
        return self._num_job_failures

    @property
    def counters(self) -> dict[str, int]:
        """Debug counters of ignored acknowledgements and declines."""
        return dict(self._counters)

    @property
    def is_periodic_triggering(self) -> bool:
        return self._periodic

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
        return self._final_checkpoint_id

    @property
    def is_final_checkpoint_complete(self) -> bool:
        return self._final_complete

    def __repr__(self) -> str:
        return (
            f"CheckpointCoordinator(job={self.job_id!r}, pending={self.pending_ids}, "
            f"completed={self._stats.num_completed}, aborted={self._stats.num_aborted}, "
            f"failures={self._consecutive_failures}, final={self._final_checkpoint_id}"
            f"{'(complete)' if self._final_complete else ''})"
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
        if self._suspended:
            self._suspended = False
            if self._final_floor is not None and not self._final_complete:
                self._schedule_final(0.0)
        if (self.config.interval is None or self._periodic or self._final_complete
                or self._final_floor is not None or self._restored_final is not None):
            return
        self._periodic = True
        self._schedule_tick(self.config.interval)

    def stop(self) -> None:
        """Stop triggering, periodic and final (pending checkpoints carry on), until `start()`
        or `restart()`; an executor calls it when a failover begins."""
        self._started = False
        self._suspended = True
        self._stop_ticking()
        self._cancel_final_timer()

    def _stop_ticking(self) -> None:
        self._periodic = False
        self._waiting_for_slot = False
        if self._tick_timer is not None:
            self._tick_timer.cancel()
            self._tick_timer = None

    def _schedule_tick(self, delay: float) -> None:
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        self._tick_timer = self._timers.schedule(max(0.0, delay), self._on_tick)

    def _on_tick(self) -> None:
        self._tick_timer = None
        if not self._periodic:
            return
        now = self._clock.now()
        result = self._trigger(now, force=False, ignore_pause=False)
        if result is CheckpointFailureReason.TOO_MANY_CHECKPOINTS:
            self._waiting_for_slot = True  # resumed by _after_pending_ended
        elif result is CheckpointFailureReason.MIN_PAUSE:
            assert self._last_completion_time is not None
            self._schedule_tick(self._last_completion_time + self.config.min_pause - now)
        elif result is CheckpointFailureReason.STORAGE_FAILURE and self._periodic:
            assert self.config.interval is not None
            self._schedule_tick(self.config.interval)  # the trigger failed: try at the next interval
        elif isinstance(result, CheckpointFailureReason):
            self._stop_ticking()  # job finished or coordinator shut down
        elif self._periodic:  # (a synchronous final completion may have stopped ticking)
            assert self.config.interval is not None
            self._schedule_tick(self.config.interval)

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
        if self._final_complete:
            return CheckpointFailureReason.JOB_FINISHED
        if len(self._pending) >= self.config.max_concurrent or self._final_candidate_pending():
            return CheckpointFailureReason.TOO_MANY_CHECKPOINTS
        if self._restored_final is not None:
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
            self._count_failure(None, CheckpointFailureReason.STORAGE_FAILURE)
            return CheckpointFailureReason.STORAGE_FAILURE
        final = self._final_floor is not None and not self._final_complete
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
            self._final_checkpoint_id = checkpoint_id
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
        self._consecutive_failures = 0
        self._stats.report_completed(pending, now)
        is_final = self._final_floor is not None and checkpoint_id > self._final_floor and not self._final_complete
        if is_final:
            self._final_complete = True
            self._final_checkpoint_id = checkpoint_id
            self._stop_ticking()
            self._schedule_final_renotify()
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
        if self._final_floor is not None and checkpoint_id > self._final_floor:
            self._final_candidate_aborted = True
        for task in pending.tasks:
            self._gateway.notify_aborted(task, checkpoint_id, reason)
        if self._storage is not None:
            try:
                self._storage.discard_checkpoint(self.job_id, checkpoint_id)
            except StorageError as exc:
                log.warning("job %s: could not delete files of aborted checkpoint %d: %s",
                            self.job_id, checkpoint_id, exc)
        if reason.counts_as_failure:
            self._count_failure(checkpoint_id, reason)

    def _count_failure(self, checkpoint_id: int | None, reason: CheckpointFailureReason) -> None:
        """A checkpoint failed (None: its trigger failed): fail the job past `tolerable_failures`."""
        self._consecutive_failures += 1
        if self._consecutive_failures > self.config.tolerable_failures:
            error = CheckpointFailureLimitError(
                self._consecutive_failures, self.config.tolerable_failures, checkpoint_id, reason
            )
            self._consecutive_failures = 0
            self._num_job_failures += 1
            self._gateway.fail_job(error)

    def _after_pending_ended(self) -> None:
        """A pending checkpoint completed or aborted: run a waiting periodic trigger, and keep
        the final checkpoint going."""
        if self._shut_down:
            return
        if self._waiting_for_slot and self._periodic and len(self._pending) < self.config.max_concurrent:
            self._waiting_for_slot = False
            self._schedule_tick(0.0)
        if (self._final_floor is not None and not self._final_complete and not self._suspended
                and self._restored_final is None):
            delay = self._final_retry_delay if self._final_candidate_aborted else 0.0
            self._final_candidate_aborted = False
            self._schedule_final(delay)

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
        if task_id in self._finished_sources:
            return
        self._finished_sources.add(task_id)
        if len(self._finished_sources) == len(self._source_tasks) and self._final_floor is None:
            self._final_floor = self._last_trigger_id
            self._stop_ticking()  # from now on only final candidates, one at a time
            if self._restored_final is not None:
                self._complete_restored_final()
            elif not self._suspended:
                self._schedule_final(0.0)

    def restored_from(self, checkpoint: CompletedCheckpoint | None) -> None:
        """The executor deployed the current execution from `checkpoint` (None: from scratch).
        Call it on every deployment before `start()` (`restart()` keeps it). If it is a final
        checkpoint (`properties["final"]`), this execution takes no checkpoint of its own: see
        "Restored final checkpoint" in the module docstring."""
        final = checkpoint is not None and bool(checkpoint.properties.get("final"))
        self._restored_final = checkpoint.checkpoint_id if final else None
        if final:
            self._stop_ticking()

    def _complete_restored_final(self) -> None:
        checkpoint_id = self._restored_final
        assert checkpoint_id is not None
        self._final_complete = True
        self._final_checkpoint_id = checkpoint_id
        self._schedule_final_renotify()
        for pending_id in sorted(self._pending):  # none is expected: no trigger was allowed
            pending = self._pending.get(pending_id)
            if pending is not None:
                self._abort(pending, CheckpointFailureReason.SUBSUMED)
        self._gateway.commit_checkpoint(checkpoint_id)  # idempotent if its run committed it already
        for task in self._all_tasks:
            self._gateway.notify_complete(task, checkpoint_id)

    def _schedule_final_renotify(self) -> None:
        self._cancel_final_timer()
        if not self._suspended:
            self._final_timer = self._timers.schedule(self._final_retry_delay, self._on_final_renotify)

    def _on_final_renotify(self) -> None:
        """Repeat the final checkpoint's completion to every task (idempotent for a task that
        heard it): a lost notification would leave a source waiting for it forever, and after
        the final checkpoint no later completion comes to stand in for it."""
        self._final_timer = None
        if not self._final_complete or self._shut_down or self._suspended:
            return
        checkpoint_id = self._final_checkpoint_id
        assert checkpoint_id is not None
        self._counters["final_notifications_repeated"] += 1
        for task in self._all_tasks:
            self._gateway.notify_complete(task, checkpoint_id)
        self._schedule_final_renotify()

    def _final_candidate_pending(self) -> bool:
        floor = self._final_floor
        return floor is not None and not self._final_complete and any(i > floor for i in self._pending)

    @property
    def all_sources_finished(self) -> bool:
        return self._final_floor is not None

    def _schedule_final(self, delay: float) -> None:
        self._cancel_final_timer()
        self._final_timer = self._timers.schedule(delay, self._on_final_tick)

    def _cancel_final_timer(self) -> None:
        if self._final_timer is not None:
            self._final_timer.cancel()
            self._final_timer = None

    def _on_final_tick(self) -> None:
        self._final_timer = None
        if self._final_floor is None or self._final_complete or self._shut_down or self._suspended:
            return
        if self._final_candidate_pending():
            return  # a candidate is in flight; its end re-evaluates
        # TOO_MANY_CHECKPOINTS: a pending checkpoint ending re-evaluates (_after_pending_ended)
        result = self._trigger(None, force=False, ignore_pause=True)
        if result is CheckpointFailureReason.STORAGE_FAILURE and not self._suspended and not self._shut_down:
            self._schedule_final(self._final_retry_delay)  # nothing else would ever retry it

    # -- failover and shutdown -----------------------------------------------------------------

    def restart(self, source_tasks: Iterable[TaskId], all_tasks: Iterable[TaskId]) -> None:
        """Start over for a new execution attempt: abort what is pending (TASK_FAILURE), take the
        new task lists, forget finished sources. Ids keep increasing; periodic triggering is
        left as it is (an executor usually `stop()`s during failover and `start()`s after); a final
        checkpoint paused by `stop()` may be triggered again once the new sources finish.
        """
        sources, tasks = _check_tasks(source_tasks, all_tasks)
        self.abort_all_pending(CheckpointFailureReason.TASK_FAILURE)
        self._source_tasks, self._all_tasks = sources, tasks
        self._finished_sources.clear()
        self._final_floor = None
        self._final_checkpoint_id = None
        self._final_complete = False
        self._final_candidate_aborted = False
        self._cancel_final_timer()
        self._suspended = False
        if self._started and not self._periodic and not self._shut_down:
            self.start()

    def shutdown(self) -> None:
        """Stop triggering and abort everything pending (COORDINATOR_SHUTDOWN); idempotent."""
        if self._shut_down:
            return
        self.stop()
        self._cancel_final_timer()
        self._shut_down = True
        for checkpoint_id in sorted(self._pending):
            pending = self._pending.get(checkpoint_id)
            if pending is not None:
                self._abort(pending, CheckpointFailureReason.COORDINATOR_SHUTDOWN)


def _check_tasks(
    source_tasks: Iterable[TaskId], all_tasks: Iterable[TaskId]
) -> tuple[tuple[TaskId, ...], tuple[TaskId, ...]]:
    sources = list(source_tasks)
    tasks = list(all_tasks)
    for name, items in (("source_tasks", sources), ("all_tasks", tasks)):
        if not items:
            raise ValueError(f"checkpoint coordinator needs at least one task in {name}")
        bad = [t for t in items if not isinstance(t, TaskId)]
        if bad:
            raise ValueError(f"{name} must hold TaskIds, got {bad[0]!r}")
        if len(set(items)) != len(items):
            dupes = sorted({t for t in items if items.count(t) > 1})
            raise ValueError(f"{name} repeats {', '.join(map(str, dupes))}")
    outside = sorted(set(sources) - set(tasks))
    if outside:
        raise ValueError(f"source tasks {', '.join(map(str, outside))} are not in all_tasks")
    return tuple(sorted(sources)), tuple(sorted(tasks))
