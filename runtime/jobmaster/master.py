"""`JobMaster`: the executor-neutral part of running a job (Flink's JobMaster and scheduler in spirit).

Theory of operation
-------------------
An executor (`runtime.sim`, `runtime.ray`) supplies transport, time, and starting, killing and
stalling processes; the job master decides what happens to the job, the same way on every one:

* Restore. `restore_from` (a checkpoint the user gave, `env.restore_from`) is checked against the
  job before anything runs (`runtime.jobmaster.restore.state_assignment.plan_restore`: a mismatch raises from `execute`);
  the job to run is the plan's graph (defaulted split counts follow the checkpoint's), any
  parallelism: `build_restores` redistributes key groups and source splits.
* Attempts. Attempt 0 is the first deployment; every global failover cancels the running
  attempt through the gateway and, after the restart strategy's delay, deploys the next.
  `plan_attempt` says what an attempt starts from: the newest retained checkpoint of this run
  that verifies, else the given one, never one behind the sinks' committed output; and which
  transactions a failed attempt staged that can never commit.
* Restart strategy. `failover` consults `runtime.jobmaster.lifecycle.restart.RestartBackoff`; an error no restart can
  fix (`SuppressRestartsError`) or an exhausted strategy fails the job for good: `error` is set,
  and the executor stops and raises it. Only a failover that restarts is a recovery for the
  fault plan (`TaskCrashDuringRecovery`'s `nth`), on every executor.
* Faults. The plan is resolved once per run (`schedule`, `runtime.jobmaster.faults.schedule`).
* Completed checkpoints go to the listeners (`checkpoint_completed`, e.g. Spark landing).
* Coordinators. A crashed coordinator's statistics, its crash and a standby's promotion are
  recorded in `coordinators` (`runtime.jobmaster.coordination.coordinators`), so the result lists every
  checkpoint of the run.
* Result. `result` builds the `JobResult` from what each task reports at the end (`TaskFinal`).

Pure: time comes from the injected clock, delays from the injected timers, everything else is
the gateway's (`runtime.jobmaster.gateway`).
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.core.graph import JobGraph
from runtime.core.task import Task
from runtime.jobmaster.committer.collect import CommittedOutput
from runtime.jobmaster.coordination.coordinators import CoordinatorSuccession
from runtime.jobmaster.faults.schedule import FaultSchedule
from runtime.jobmaster.gateway import JobMasterGateway
from runtime.jobmaster.lifecycle.restart import RestartBackoff
from runtime.jobmaster.restore.match import RestorePlan
from runtime.jobmaster.restore.state_assignment import (
    RestoreError,
    build_restores,
    check_not_behind_committed_output,
    plan_restore,
)
from runtime.jobmaster.result import JobFailedError, JobMetrics, JobResult, RestoredFrom, suppresses_restarts
from vocabulary.fault_plan import FaultPlan
from vocabulary.histogram import LatencyHistogram
from vocabulary.options import RestartStrategy
from vocabulary.ports import Clock, Timers
from vocabulary.reasons import CheckpointFailureReason

#: `(latest, restores)` of the newest retained checkpoint that verifies (`restore_latest_valid`)
LatestValid = Callable[[], tuple[Any, dict[Any, Any]]]


@dataclass(frozen=True)
class AttemptPlan:
    """What one execution attempt starts from."""

    attempt: int
    #: the restored checkpoint (None: from scratch)
    checkpoint: Any
    #: task -> its `TaskRestore` (empty: from scratch)
    restores: dict[Any, Any]
    #: `CollectCommitter.abort_lingering(after, before)`: what a failed attempt staged past the
    #: restored checkpoint can never commit
    abort_after: int
    abort_before: int

    @property
    def checkpoint_id(self) -> int | None:
        return self.checkpoint.checkpoint_id if self.checkpoint is not None else None


@dataclass
class TaskFinal:
    """What one task reports when the job finished."""

    task_id: Any
    keyed_state: dict[str, dict[Any, Any]]
    latencies: LatencyHistogram | None = None
    first_created_at: float | None = None
    last_arrival_at: float | None = None
    buffer_size: int | None = None
    #: the task's control calls by kind (`Task.control_calls`)
    control_calls: dict[str, int] | None = None
    #: stamped records its latency warm-up left out (`SinkLatency.warmup_records`)
    latency_warmup_records: int = 0
    #: the smallest buffer size it asked for (debloating)
    smallest_buffer_size: int | None = None

    @classmethod
    def of(cls, task_id: Any, task: Task) -> TaskFinal:
        """What `task` reports (wherever it runs: in the simulator, in a task actor)."""
        latency = task.sink_latency
        return cls(task_id, task.keyed_state(), latency.latencies, latency.first_created_at, latency.last_arrival_at,
                   task.announced_buffer_size, dict(task.control_calls), latency.warmup_records,
                   task.smallest_announced_buffer_size)


class JobMaster:
    """Runs one job's attempts, restarts and result (see the module docstring).

    Args:
        graph: the job.
        executor: the executor's registered name (the result's `executor`, the replay line).
        gateway: starts and cancels attempts.
        clock: the executor's time (virtual or wall seconds).
        timers: delays the restart by the restart strategy's backoff.
        seed: the run's seed (the restart jitter is seeded from it).
        faults: the `FaultPlan` (resolved into `schedule`; named in replay lines).
        restore_from: `(CompletedCheckpoint, CheckpointStorage)` the first attempt starts from.
        allow_non_restored_state: drop the checkpoint's state the job does not use.
        checkpoint_listeners: called with `(completed, storage)` for every completed checkpoint.
        run_id: this run's identity in the checkpoint storage (`checkpoint.io.storage.new_run_id()`:
            the executor draws it, a name from the clock and dice is not the master's to make).
        replay_hint: how to replay a failure, appended to the failure messages.

    Raises:
        runtime.StateMismatchError: `restore_from` does not fit the job.
        ValueError: a fault of the plan names a task it cannot strike (the message names both).
    """

    def __init__(self, graph: JobGraph, *, executor: str, gateway: JobMasterGateway, clock: Clock, timers: Timers,
                 seed: int | None = 0, faults: Any = None, restore_from: tuple[Any, Any] | None = None,
                 allow_non_restored_state: bool = False,
                 checkpoint_listeners: Sequence[Callable[[Any, Any], None]] = (), run_id: str,
                 replay_hint: str | None = None) -> None:
        self.executor = executor
        self._log = logging.getLogger(f"barrierflow.{executor}")  # the executor's log, as before the master
        self.gateway, self.clock, self.timers = gateway, clock, timers
        self.seed, self.faults = seed, faults
        self.run_id = run_id
        self.restore_from = restore_from
        self.restore_plan: RestorePlan | None = None
        if restore_from is not None:
            self.restore_plan = plan_restore(graph, *restore_from, allow_non_restored_state=allow_non_restored_state)
            graph = self.restore_plan.graph
        #: the job to run (after a restore: with the checkpoint's split counts)
        self.graph = graph
        #: where and when the plan's faults strike, one for the whole run (across attempts)
        self.schedule = FaultSchedule.for_graph(faults or FaultPlan(), graph)
        self.checkpoint_listeners = list(checkpoint_listeners)
        self.restart_backoff = RestartBackoff(graph.restart_strategy or RestartStrategy.no_restart(),
                                              random.Random(f"restart/{seed}"))
        self.replay = f"env.execute({graph.job_name!r}, executor={executor!r}, seed={seed}, faults={faults!r})"
        self.replay_hint = replay_hint or f"replay: {self.replay}"
        #: the running attempt (0: the first deployment)
        self.attempt = 0
        #: why each global failover happened, in order
        self.failures: list[str] = []
        #: the checkpoint each deployment restored: the given one first (`restore_from`), then one
        #: per restart (None: from the beginning)
        self.restored_checkpoints: list[int | None] = []
        #: the earlier execution's checkpoint the run starts from (None: none given)
        self.restored_from = RestoredFrom.of(restore_from[0]) if restore_from is not None else None
        #: the run's coordinators: what the dead ones did, crashes and promotions
        self.coordinators = CoordinatorSuccession(clock)
        #: how the coordinators are made highly available, as the executor describes it (None: standalone)
        self.high_availability: str | None = None
        #: set when the job failed for good
        self.error: JobFailedError | None = None
        #: every task finished
        self.finished = False

    @property
    def done(self) -> bool:
        return self.finished or self.error is not None

    @property
    def first_checkpoint_id(self) -> int:
        """The lowest checkpoint id this run may use: after the restored checkpoint's."""
        return self.restore_from[0].checkpoint_id + 1 if self.restore_from is not None else 1

    # ------------------------------------------------------------------ attempts

    def start(self) -> None:
        """Deploy the first attempt."""
        self.gateway.deploy_attempt(self.attempt)

    def plan_attempt(self, latest_valid: LatestValid, committed: CommittedOutput | None,
                     next_checkpoint_id: int) -> AttemptPlan | None:
        """What the attempt being deployed starts from (see the module docstring).

        Args:
            latest_valid: reads the newest retained checkpoint of this run that verifies.
            committed: the sinks' newest committed output.
            next_checkpoint_id: the id the coordinator hands out next.

        Returns:
            The plan; None if the job cannot recover (it failed for good: `error`).

        Raises:
            RestoreError: the checkpoint the user gave does not fit (first attempt only).
        """
        given = False
        try:
            latest, restores = latest_valid()
            if latest is None and self.restore_from is not None:
                given, latest = True, self.restore_from[0]
                restores = build_restores(self.graph, *self.restore_from, plan=self.restore_plan)
            check_not_behind_committed_output(
                self.graph.job_name, latest.checkpoint_id if latest is not None else None, committed)
        except RestoreError as exc:
            if given and not self.failures:
                raise  # the checkpoint the user gave does not fit: the error itself, from execute()
            self.fail_for_good(f"job {self.graph.job_name!r} cannot recover: {_first_line(exc)}", exc)
            return None
        plan = AttemptPlan(
            self.attempt, latest, restores, latest.checkpoint_id if latest is not None else 0,
            # restoring the checkpoint the user gave, nothing of this run is staged yet: every stage
            # past it is the earlier execution's
            sys.maxsize if given else next_checkpoint_id,
        )
        if self.failures or given:  # a restart, or the first deployment restoring the given checkpoint
            self.restored_checkpoints.append(plan.checkpoint_id)
        return plan

    # ------------------------------------------------------------------ failover

    def task_failed(self, task_id: Any, exc: BaseException) -> None:
        """Task `task_id` raised `exc`: fail over globally (or for good, if no restart can fix it)."""
        self.failover(f"task {task_id} failed: {exc}", exc)

    def failover(self, why: str, exc: BaseException | None = None,
                 reason: CheckpointFailureReason = CheckpointFailureReason.TASK_FAILURE) -> None:
        """Global failover: cancel the running attempt and deploy the next after the restart
        strategy's delay, or fail the job for good (`error`) if the strategy or `exc` says so."""
        if self.done:
            return
        self.failures.append(why)
        if suppresses_restarts(exc):  # no restart can fix it (a restart could duplicate output)
            self.fail_for_good(f"job {self.graph.job_name!r} failed without restarting: {why} "
                               f"({self.replay_hint})", exc)
            return
        self._log.info("barrierflow %s: failover (%s)", self.executor, why)
        self.gateway.cancel_attempt(self.attempt, reason)
        self.attempt += 1
        self.restart_backoff.notify_failure(self.clock.now())
        if not self.restart_backoff.can_restart():
            self.fail_for_good(
                f"job {self.graph.job_name!r} failed after {len(self.failures) - 1} restart(s): {why} "
                f"({self.restart_backoff.exhausted()}; {self.replay_hint})", exc)
            return
        attempt = self.attempt
        # a recovery begins (counted for `TaskCrashDuringRecovery.nth` only now that one will
        # happen); placed before the restart, carried out after it was scheduled (Ray deploys in it)
        recovery_crashes = [(target, self.clock.now() + fault.delay) for target, fault in self.schedule.recovery_started()]
        self.timers.schedule(self.restart_backoff.backoff_time, lambda: self._restart(attempt))
        for target, at in recovery_crashes:
            self.gateway.crash_during_recovery(target, at)

    def also_failed(self, why: str) -> None:
        """A second failure found while the running attempt was being cancelled (a process that
        died at the same moment): the failover already under way covers it, and its reason names
        both."""
        if self.failures:
            self.failures[-1] = f"{self.failures[-1]}; {why}"
        else:
            self.failures.append(why)

    def _restart(self, attempt: int) -> None:
        if attempt == self.attempt and not self.done:  # no later failover superseded it
            self.gateway.deploy_attempt(attempt)

    def fail_for_good(self, message: str, exc: BaseException | None) -> None:
        """The job failed and will not restart: `error` says why."""
        if self.error is None:
            self.error = JobFailedError(message, exc)

    def job_finished(self) -> None:
        """Every task finished."""
        self.finished = True

    # ------------------------------------------------------------------ checkpoints and result

    def checkpoint_completed(self, completed: Any, storage: Any) -> None:
        """Checkpoint `completed` completed (its files readable through `storage`)."""
        for listener in self.checkpoint_listeners:
            listener(completed, storage)

    def result(self, *, committer: Any, checkpoints: list[Any], metrics: JobMetrics, finals: Sequence[TaskFinal],
               trace: list[tuple[Any, ...]] | None = None) -> JobResult:
        """The `JobResult` of a finished job, from what its tasks reported (`finals`) and the live
        coordinator's `checkpoints` (the dead ones' are in `coordinators`)."""
        sinks = list(self.graph.sink_names)
        metrics.restarts = len(self.failures)
        metrics.records_out = sum(len(committer.output(s)) for s in sinks)
        metrics.global_commits = self.graph.stages_in_committer
        final_state: dict[str, dict[str, dict[Any, Any]]] = {}
        for final in finals:
            for name, entries in final.keyed_state.items():
                final_state.setdefault(final.task_id.vertex, {}).setdefault(name, {}).update(entries)
            if final.buffer_size is not None:
                metrics.buffer_sizes[str(final.task_id)] = final.buffer_size
            if final.smallest_buffer_size is not None:
                metrics.smallest_buffer_sizes[str(final.task_id)] = final.smallest_buffer_size
            if final.control_calls is not None:
                metrics.control_calls[str(final.task_id)] = final.control_calls
            if final.latencies is not None:
                metrics.latencies.merge(final.latencies)
            metrics.latency_warmup_records += final.latency_warmup_records
            metrics.add_task_span(final.first_created_at, final.last_arrival_at)
        return JobResult(
            job_name=self.graph.job_name,
            executor=self.executor,
            run_id=self.run_id,
            seed=self.seed,
            committer=committer,
            checkpoints=self.coordinators.checkpoints(checkpoints),
            metrics=metrics,
            final_state=final_state,
            failures=list(self.failures),
            restored_checkpoints=list(self.restored_checkpoints),
            restored_from=self.restored_from,
            parallelism={v.name: v.parallelism for v in self.graph.vertices},
            high_availability=self.high_availability,
            promotions=len(self.coordinators.promotion_times),
            coordinator_crashes=len(self.coordinators.crash_times),
            trace=trace if trace is not None else [],
            replay=self.replay,
            sink_names=sinks,
        )


class RunsOnJobMaster:
    """An executor's view of its `JobMaster` (`master`), under the names its callers read."""

    master: JobMaster

    @property
    def failures(self) -> list[str]:
        return self.master.failures

    @property
    def restart_backoff(self) -> RestartBackoff:
        return self.master.restart_backoff

    @property
    def error(self) -> JobFailedError | None:
        return self.master.error

    @property
    def done(self) -> bool:
        """Every task finished, or the job failed for good."""
        return self.master.done

    @property
    def coordinators(self) -> CoordinatorSuccession:
        return self.master.coordinators


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (a long one is named by its first line)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
