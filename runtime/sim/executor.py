"""`SimExecutor`: runs a job graph deterministically in one process, in virtual time.

Theory of operation
-------------------
Everything that happens is an event on one heap, ordered by (virtual time, sequence number);
the sequence number makes ties deterministic, and every random choice (network delays, fault
targets) comes from one `random.Random(seed)`, so a seed replays the identical run. This module
holds the event loop, the execution attempts and the coordinator's life; each other job is a
module of its own, reached through the executor:

* `runtime.sim.task_runner`: tasks are the pure `runtime.core.task.Task`; running one is an event,
  one `step()`, charged the `runtime.sim.costs.CostModel`'s virtual seconds (on shared cores).
* `runtime.sim.network`: per-channel FIFOs with seeded delays, credits, control messages.
* `runtime.sim.coordinator_link`: carries the coordinator's triggers, commits and notifications
  as its gateway, the job master's `ControlPlane`, decides them, and the tasks' way back
  (acknowledgements, snapshot writes to a real `CheckpointStorage`, in memory unless the job
  names one).
* `runtime.sim.fault_actions`: the `FaultPlan` (every kind is described in
  `vocabulary.fault_plan`), resolved once per run by a `FaultSchedule` and carried out; the
  coordinator's id-counter and metadata writes fail through a `CoordinatorWriteFaults` around
  the storage's blob store.
* `runtime.sim.ports`: the virtual clock, timers and each task's `TaskPorts`.
* Failover: the `runtime.jobmaster.JobMaster` decides (restart strategy, restore plan, result);
  this executor is its gateway: cancelling an attempt bumps the execution *epoch* (events of the
  old epoch are dropped) and aborts pending checkpoints; deploying one creates every task from
  the checkpoint the master planned (global failover). A crashed coordinator is shut down (its
  pending checkpoints end with COORDINATOR_SHUTDOWN, its timers stop) and replaced by one that
  recovers the store (with high availability: the standby, `runtime.sim.high_availability`).
* Invariants: an `ExecutionObserver` (`runtime.jobmaster.observer`; `env.execute(...,
  invariants=True)` passes `runtime.checker.invariants.InvariantChecker`) is told what each event
  did and checks it after every event.
* Liveness: a run ends at `max_time` virtual seconds or `max_events` events at most, and, given
  a `stall_timeout`, sooner when the `ProgressWatchdog` sees nothing move for that many virtual
  seconds (the Ray executor's watchdog, in wall seconds there); a task stalled that long is hung,
  and the job fails over.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any, get_args

from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.io.cleanup import discard_orphans
from checkpoint.io.lease import lease_for
from checkpoint.io.snapshot_writer import SnapshotWriter
from checkpoint.io.storage import new_run_id, storage_from_uri
from runtime.core.graph import JobGraph
from runtime.core.task import Task
from runtime.jobmaster.committer.collect import CollectCommitter, GlobalCommitterView
from runtime.jobmaster.committer.durable import open_committer
from runtime.jobmaster.coordination.coordinator_state import coordinator_state, promoted
from runtime.jobmaster.faults.actions import coordinator_crash
from runtime.jobmaster.faults.schedule import FaultSchedule
from runtime.jobmaster.faults.storage import CoordinatorWriteFaults
from runtime.jobmaster.lifecycle.attempt_boundary import begin_attempt
from runtime.jobmaster.lifecycle.progress import progress_figures, reading_phase
from runtime.jobmaster.lifecycle.watchdog import (
    Progress,
    ProgressWatchdog,
    hung_message,
    no_progress_message,
)
from runtime.jobmaster.master import AttemptPlan, JobMaster, RunsOnJobMaster, TaskFinal
from runtime.jobmaster.observer import ExecutionObserver
from runtime.jobmaster.registry import check_options
from runtime.jobmaster.restore.state_assignment import restore_latest_valid
from runtime.jobmaster.result import JobMetrics, JobResult
from runtime.sim.coordinator_link import SimCoordinatorLink
from runtime.sim.costs import CostModel
from runtime.sim.fault_actions import SimFaultActions
from runtime.sim.high_availability import SimHighAvailability
from runtime.sim.network import NetworkOptions, SimNetwork
from runtime.sim.ports import SimClock, SimTaskPorts, SimTimers
from runtime.sim.saturation import SaturationMonitor, sample_of
from runtime.sim.task_runner import TaskRunner
from vocabulary.fault_plan import Fault, FaultPlan, ProcessKill, check_supported
from vocabulary.handles import TaskId
from vocabulary.options import DEFAULT_STORAGE_TIMEOUT
from vocabulary.reasons import CheckpointFailureReason

log = logging.getLogger("barrierflow.sim")

#: the `FaultPlan` kinds this executor implements: all but `ProcessKill` (it has no processes)
SIM_FAULT_KINDS = tuple(kind for kind in get_args(Fault) if kind is not ProcessKill)

#: events between progress reports (a busy job runs ~2,000 events per wall second)
PROGRESS_EVERY_EVENTS = 200


class SimExecutor(RunsOnJobMaster):
    """Deterministic discrete-event executor. See the module docstring."""

    def __init__(
        self,
        graph: JobGraph,
        *,
        seed: int = 0,
        faults: FaultPlan | None = None,
        network: NetworkOptions | None = None,
        costs: CostModel | None = None,
        job_id: str | None = None,
        trace: bool = False,
        trace_barriers: bool = False,
        max_time: float = 3600.0,
        max_events: int = 20_000_000,
        stall_timeout: float | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
        restore_from: tuple[Any, Any] | None = None,
        checkpoint_listeners: Sequence[Callable[[Any, Any], None]] = (),
        committer: CollectCommitter | None = None,
        allow_non_restored_state: bool = False,
        invariants: ExecutionObserver | None = None,
        run_id: str | None = None,
        stop_when_saturated: bool = False,
    ) -> None:
        self.now = 0.0
        self.epoch = 0
        self._heap: list[tuple[float, int, Callable[[], None], int | None, str]] = []
        self._seq = itertools.count()
        #: attempts, restarts, restore planning and the result (`runtime.jobmaster`); checks a
        #: `restore_from` checkpoint against the job before anything runs (StateMismatchError)
        self.master = JobMaster(
            graph, executor="sim", gateway=self, clock=SimClock(self),
            timers=SimTimers(self, epoch_bound=False, kind="restart"), seed=seed, faults=faults,
            restore_from=restore_from, allow_non_restored_state=allow_non_restored_state,
            checkpoint_listeners=checkpoint_listeners, run_id=run_id or new_run_id(),
            replay_hint=f"replay: seed={seed}, faults={faults or FaultPlan()!r}")
        self.run_id = self.master.run_id
        self.restore_from = restore_from
        self.graph = graph = self.master.graph
        self.seed = seed
        self.faults = faults or FaultPlan()
        check_supported(self.faults, SIM_FAULT_KINDS, "sim", "ray")
        self.network = network or NetworkOptions()
        self.costs = costs or CostModel()
        self.job_id = job_id or graph.job_name
        self.tracing = trace
        #: record only the barrier timeline (barrier-in / snapshot / ack events) in `trace`
        self.trace_barriers = trace or trace_barriers
        self.max_time = max_time
        self.max_events = max_events
        #: a job with no record handled, task finished, checkpoint completed or new attempt for
        #: `stall_timeout` virtual seconds fails (a final checkpoint that expires forever, tasks
        #: that wait on each other while timers still fire); watched every tenth of it. Off by
        #: default: a lost message holds its checkpoint, and aligned input behind it, for the whole
        #: checkpoint timeout (600 s by default), which `max_time` leaves room for
        self._watchdog = ProgressWatchdog(stall_timeout)
        self._next_watch = 0.0 if stall_timeout is not None else float("inf")
        self.progress = progress
        self.rng = random.Random(seed)
        self.trace: list[tuple] = []
        self.events = 0

        config = graph.checkpoint_config
        self.checkpointing = config is not None and config.interval is not None
        self.storage = storage_from_uri(config.storage if config else None,
                                        timeout=config.storage_timeout if config else DEFAULT_STORAGE_TIMEOUT)
        #: this run's lease of the job's checkpoint directory, kept fresh until `run` ends (None: in
        #: memory); taken before anything reads or writes the directory
        self.lease = lease_for(self.storage, self.job_id, self.run_id)
        try:
            self._open(committer, restore_from, invariants, stop_when_saturated)
        except BaseException:
            self.close()
            raise

    def _open(self, committer: CollectCommitter | None, restore_from: tuple[Any, Any] | None,
              invariants: ExecutionObserver | None, stop_when_saturated: bool) -> None:
        """The rest of the construction: what reads or writes the checkpoint directory."""
        graph = self.graph
        config = graph.checkpoint_config
        self.writer = SnapshotWriter(self.storage, self.job_id, config)
        #: the sinks' external system; an earlier execution's (`result.committer`) when this one
        #: restores its checkpoint, so the transactions that one staged can still be committed
        self.committer = open_committer(self.master, self.storage, self.job_id, committer)
        #: what the sinks see (watched by the invariants)
        self.sink_committer: Any = self.committer
        if isinstance(invariants, bool):  # the checker lives above the simulator: the API builds it
            if invariants:
                raise TypeError("SimExecutor(invariants=True): pass the checker itself "
                                "(runtime.checker.invariants.InvariantChecker()); env.execute(..., invariants=True) builds it")
            invariants = None
        #: checks invariants after every event (`runtime.jobmaster.observer`); None: off
        self.invariants = invariants
        if self.invariants is not None:
            self.invariants.bind(self)  # before anything writes or deletes through the storage
        #: `CoordinatorStorageFailure`: the coordinator's id-counter and metadata writes (armed by `run`)
        self._coordinator_writes = CoordinatorWriteFaults.install(self.storage, self.job_id)
        self._coordinator_writes.on_fault = lambda what, path: self.trace_event("fault", "CoordinatorStorageFailure",
                                                                                what, path)
        self.metrics = JobMetrics()

        self.task_ids = graph.task_ids()
        self.source_ids = graph.source_task_ids()
        #: the channels between the tasks and the control messages (`runtime.sim.network`)
        self.channels = SimNetwork(self, self.network)
        self.tasks: dict[TaskId, Task] = {}
        #: when each task steps and what it costs (`runtime.sim.task_runner`)
        self.runner = TaskRunner(self)
        #: the coordinator's messages carried, and the tasks' way back (`runtime.sim.coordinator_link`)
        self.coordinator_link = SimCoordinatorLink(self)
        #: the plan's faults carried out (`runtime.sim.fault_actions`)
        self.fault_actions = SimFaultActions(self)
        #: the run's `FaultSchedule` (one for the whole run, across attempts)
        self.schedule: FaultSchedule | None = None

        #: `stop_when_saturated`: stops a run that cannot keep up (`runtime.sim.saturation`), in
        #: windows of two checkpoint intervals or ten buffer timeouts, at least 0.5 virtual s
        self._saturation = SaturationMonitor(
            max(0.5, 2 * (config.interval if self.checkpointing else 0.0), 10 * graph.buffer_timeout),
            cores=self.costs.cores, max_time=self.max_time) if stop_when_saturated else None
        #: task name -> the tasks it sends to
        routes = graph.channel_routes()
        self.downstream = {str(t): tuple(sorted({str(r.receiver) for r in routes if r.sender == t}))
                           for t in self.task_ids}

        self.ha = graph.high_availability if graph.high_availability is not None and graph.high_availability.enabled else None
        #: ZooKeeper mode: two coordinator contenders, in memory or on the server `hosts` names
        #: (`runtime.sim.high_availability`; an unreachable server fails here, naming it)
        self.high_availability = SimHighAvailability(self.ha, self.job_id) if self.ha is not None else None
        if self.high_availability is not None:
            self.master.high_availability = (
                f"ZooKeeper at {self.ha.hosts}, cluster id {self.ha.cluster_id!r}" if self.high_availability.uses_server
                else "the simulator's in-memory leader election (no ZooKeeper server: no hosts given)")
        try:
            self.store, self.id_counter = self._coordinator_state()
        except BaseException:
            self.close()
            raise
        #: ids from here on are this run's: the orphan cleanup touches no earlier run's checkpoints
        self.first_checkpoint_id = self.id_counter.get()
        self.coordinator = self._new_coordinator()

    def _coordinator_state(self) -> tuple[Any, Any]:
        """The store and id counter of a new coordinator (`runtime.jobmaster.coordination.coordinator_state`):
        with high availability the leading contender's, fenced by its leadership."""
        config = self.graph.checkpoint_config
        services, leader = self.high_availability.leader() if self.high_availability is not None else (None, None)
        return coordinator_state(self.storage, self.job_id, config.retained if config else 1, self.run_id,
                                 self.master.first_checkpoint_id, ha=services, election=leader)

    def close(self) -> None:
        """End the HA contenders' sessions (a ZooKeeper server's) and release the checkpoint
        directory's lease; `run` does it when it ends."""
        try:
            if getattr(self, "high_availability", None) is not None:
                self.high_availability.close()
        finally:
            if self.lease is not None:
                self.lease.release()
                self.lease = None

    # ------------------------------------------------------------------ events

    def at(self, when: float, fn: Callable[[], None], epoch: int | None, kind: str) -> None:
        """Run `fn` at virtual time `when` (dropped if `epoch` is not None and has ended); `kind`
        names the event in the trace."""
        heapq.heappush(self._heap, (when, next(self._seq), fn, epoch, kind))

    # ------------------------------------------------------------------ setup

    def _new_coordinator(self) -> CheckpointCoordinator:
        config = self.graph.checkpoint_config
        plane = self.coordinator_link.plane
        coordinator = CheckpointCoordinator(
            self.job_id,
            config,
            clock=SimClock(self),
            timers=SimTimers(self, epoch_bound=False),
            gateway=plane,
            store=self.store,
            id_counter=self.id_counter,
            source_tasks=list(self.source_ids),
            all_tasks=list(self.task_ids),
        )
        plane.attach(coordinator)
        return coordinator

    def deploy_attempt(self, attempt: int) -> None:
        """`JobMasterGateway`: deploy attempt `attempt` (a restart, the first one included) and
        let the coordinator trigger."""
        epoch = self.epoch
        self._deploy()
        # (a task failing while it restores fails this attempt over at once: a new epoch)
        if self.checkpointing and self.master.error is None and self.epoch == epoch:
            self.coordinator.start()

    def cancel_attempt(self, attempt: int, reason: CheckpointFailureReason) -> None:
        """`JobMasterGateway`: the running attempt's events are dropped from now on."""
        self.trace_event("failover", self.failures[-1])
        self.coordinator_link.plane.cancel_attempt(reason)
        self.epoch += 1
        self.tasks = {}  # nothing of the failed execution may run, send or be delivered to again

    def _deploy(self) -> None:
        """Plan the current epoch and create every task of it, restored from the latest completed
        checkpoint, in the attempt boundary's order (`runtime.jobmaster.lifecycle.attempt_boundary`;
        a task failing meanwhile — a user's `open`, a restored sink's commit — fails it over)."""
        begin_attempt(self.master, _SimAttemptBoundary(self))

    def _create_tasks(self, plan: AttemptPlan) -> None:
        """The attempt boundary's last step: the tasks of the current epoch, from `plan`."""
        latest, restores = plan.checkpoint, plan.restores
        self.writer.reset()  # a new execution attempt: tasks snapshot from scratch
        if self.invariants is not None:
            self.invariants.deploying()
        epoch = self.epoch
        self.coordinator_link.plane.attempt_deployed(epoch)
        self.tasks = {}
        self.runner.reset()
        self.channels.reset()
        self.fault_actions.reset()
        committer = self.invariants.committer(self.committer) if self.invariants is not None else self.committer
        self.sink_committer = committer
        committer = GlobalCommitterView(committer)  # `commit_checkpoint` commits each checkpoint
        for task_id in self.task_ids:
            vertex = self.graph.vertex(task_id.vertex)
            try:
                self.tasks[task_id] = Task(
                    task_id, self.graph, vertex,
                    clock=SimClock(self), timers=SimTimers(self, epoch_bound=True, task_id=task_id),
                    ports=SimTaskPorts(self, task_id, epoch), committer=committer,
                    restore=restores.get(task_id),
                )
            except Exception as exc:  # a user's `open`, a restored sink's commit (its storage full...)
                self.master.task_failed(task_id, exc)
                return
            if vertex.source is None:  # (`CostModel.records_per_step` is of input buffers)
                self.tasks[task_id].records_per_step = self.costs.records_per_step
        self.channels.build_routes()
        if self.invariants is not None:
            self.invariants.deployed()
        for task_id in self.task_ids:
            self.channels.send_outputs(task_id)  # restored output channel state goes first
            self.runner.schedule_run(task_id)
        self.trace_event("deploy", epoch, latest.checkpoint_id if latest else None)

    # ------------------------------------------------------------------ the run

    def run(self) -> JobResult:
        try:
            return self._run()
        finally:
            self.close()

    def _run(self) -> JobResult:
        self._resolve_faults()
        log.info(
            "barrierflow sim: job %r seed=%s faults=%r — replay: env.execute(%r, executor='sim', "
            "seed=%s, faults=%r)", self.graph.job_name, self.seed, self.faults, self.graph.job_name,
            self.seed, self.faults,
        )
        self.master.start()
        invariants = self.invariants
        if invariants is not None:
            invariants.after_event()
        while self._heap and not self.done:
            entry = heapq.heappop(self._heap)
            when, _, fn, epoch, kind = entry
            if epoch is not None and epoch != self.epoch:
                continue
            if when > self._next_watch and self._next_watch <= self.max_time:
                # the watchdog looks at quiet times too (a stall with nothing due until it ends):
                # at its own time, the event after it goes back on the heap, untouched
                heapq.heappush(self._heap, entry)
                self.now = self._next_watch
                if self._watch_progress():
                    break
                continue
            if when > self.max_time or self.events >= self.max_events:
                self.master.fail_for_good(f"job did not finish within {self.max_time} virtual seconds / "
                                    f"{self.max_events} events (seed={self.seed})", None)
                break
            self.now = when
            self.events += 1
            if self.tracing:
                self.trace.append((round(when, 9), kind))
            try:
                fn()
            except Exception as exc:
                if invariants is not None:
                    invariants.raise_found(exc)  # a violation found first explains the error
                # nothing but a JobFailedError leaves execute once the job runs: tasks' errors fail
                # them over where they arise; this is an error of the job's machinery itself
                self.master.fail_for_good(f"job {self.graph.job_name!r} failed: {type(exc).__name__} in the "
                                          f"simulator's {kind} event: {exc} (seed={self.seed})", exc)
                break
            if invariants is not None:
                invariants.after_event()
            if self._saturation is not None and self.now >= self._saturation.next_at:
                self._watch_saturation()
            if self.progress is not None and self.events % PROGRESS_EVERY_EVENTS == 0:
                self.progress(self._progress_info())
            if self.lease is not None and self.lease.lost is not None:  # another writer: stop writing
                self.master.fail_for_good(self.lease.lost, None)
                break
        if not self.done and self.error is None:
            self.master.fail_for_good(f"job stalled with unfinished tasks {self._unfinished()} (seed={self.seed})",
                                      None)
        self.coordinator.stop()
        if invariants is not None:
            invariants.finished(self.error is None)
        if self.error is not None:
            raise self.error
        self._discard_orphans(finished=True)
        return self._result()

    def _watch_progress(self) -> bool:
        """Observe the job for the `ProgressWatchdog` (every tenth of `stall_timeout`). A stalled
        task (`TaskStall`) is in one step: hung once that step has lasted `stall_timeout`, and the
        job fails over, as for a function that never returns on Ray. Stuck with no task in a
        step: the job fails for good (True)."""
        limit = self._watchdog.stall_timeout
        assert limit is not None
        self._next_watch = self.now + limit / 10
        finished = sum(1 for task in self.tasks.values() if task.is_finished)
        progress = Progress(attempt=self.epoch, records=self.runner.records_handled(), finished=finished,
                            checkpoints=self.coordinator_link.completions)
        busy = {str(t): seconds for t, seconds in self.fault_actions.stalled_for().items()}
        stall = self._watchdog.observe(self.now, progress, busy)
        if stall is None:
            return False
        if stall.hung:
            self.master.failover(hung_message(stall, busy, limit, "virtual s"))
            return False
        self.master.fail_for_good(f"{no_progress_message(stall, limit, 'virtual s')}; unfinished tasks "
                                  f"{self._unfinished()} (seed={self.seed})", None)
        return True

    def _unfinished(self) -> list[str]:
        return [str(t) for t, task in self.tasks.items() if not task.is_finished]

    def _watch_saturation(self) -> None:
        """Sample the run for the saturation monitor; a run that cannot keep up fails for good."""
        error = self._saturation.observe(sample_of(self))  # type: ignore[union-attr]
        if error is not None:
            self.master.fail_for_good(f"job {self.graph.job_name!r} {error}", error)

    def _discard_orphans(self, *, finished: bool = False) -> None:
        """Delete the files of this run's checkpoints that are neither retained nor pending, and
        what interrupted writes left (`checkpoint.io.cleanup`); `finished`: the job ended."""
        discard_orphans(self.storage, self.job_id, self.store, since=self.first_checkpoint_id,
                        pending=self.coordinator.pending_ids, finished=finished)

    def _result(self) -> JobResult:
        self.metrics.duration = self.now
        self.metrics.events = self.events
        finals = [TaskFinal.of(task_id, task) for task_id, task in self.tasks.items()]
        return self.master.result(committer=self.committer, checkpoints=self.coordinator.stats.history,
                                  metrics=self.metrics, finals=finals, trace=self.trace)

    def _progress_info(self) -> dict[str, Any]:
        history = self.coordinator_history()
        completed = [c for c in history if c.completed]
        last = completed[-1] if completed else None
        return progress_figures(
            reading_phase(self.tasks[t].state.value for t in self.source_ids), clock="virtual time",
            seconds=self.now, records_in=self.metrics.records_in, completed=len(completed),
            aborted=len(history) - len(completed), last_duration=last.duration if last else None,
            last_alignment=last.alignment_time if last else None, restarts=len(self.failures))

    def coordinator_history(self) -> list[Any]:
        return self.coordinators.checkpoints(self.coordinator.stats.history)

    def trace_event(self, *event: Any) -> None:
        """Record `event` at the current virtual time in `trace` (when tracing)."""
        if self.tracing:
            self.trace.append((round(self.now, 9), *event))

    def trace_barrier(self, *event: Any) -> None:
        """Record `event` of the barrier timeline (barrier-in / snapshot / ack) in `trace`."""
        if self.trace_barriers:
            self.trace.append((round(self.now, 9), *event))

    # ------------------------------------------------------------------ faults and the coordinator's life

    def _resolve_faults(self) -> None:
        """Resolve the plan once for the run (`runtime.jobmaster.faults.schedule`); schedule the faults placed
        at a virtual time, and any due before the first record."""
        self.schedule = schedule = self.master.schedule
        self.coordinator_link.plane.faults = schedule
        self._coordinator_writes.schedule = schedule
        for at, index, _ in schedule.timed():
            self.at(at, lambda i=index: self.fault_actions.fire(i), None, "fault")

    def crash_coordinator(self) -> None:
        """The coordinator's process dies: it is replaced (with high availability, by the standby)
        and the job fails over."""
        if self.done:
            return
        self.trace_event("coordinator-crash")
        # the process is gone: nothing more leaves it; its pending checkpoints end with it, and
        # none of its timers may act again
        self.coordinator_link.plane.coordinator_lost()
        self.coordinator.shutdown()
        self.coordinators.crashed(self.coordinator.stats.history)
        if self.ha is not None:
            # the leader's process died: its session expires, the standby is elected and takes
            # over the shared store (fenced by its own leadership) and the shared ID counter
            leader = self.high_availability.crash_leader()  # type: ignore[union-attr]
            self.store, self.id_counter = self._coordinator_state()
            self.coordinators.promoted(promoted(self.store, self.id_counter, self.storage, self.job_id,
                                                self.master.first_checkpoint_id))
            self.trace_event("leader", leader)
            self.coordinator = self._new_coordinator()
            self.master.failover(coordinator_crash(standby=True), None, CheckpointFailureReason.COORDINATOR_SHUTDOWN)
            return
        # standalone mode: the coordinator's memory is gone; what survives is the storage
        with self._coordinator_writes.paused():  # its recovery, not a trigger (Ray's, too, is not counted)
            self.store, self.id_counter = self._coordinator_state()
        self.coordinator = self._new_coordinator()
        self.master.failover(coordinator_crash(standby=False), None, CheckpointFailureReason.COORDINATOR_SHUTDOWN)

    def crash_during_recovery(self, task_id: TaskId, at: float) -> None:
        """`JobMasterGateway`: `TaskCrashDuringRecovery` (the restart delay included)."""
        self.fault_actions.crash_during_recovery(task_id, at)


class _SimAttemptBoundary:
    """`AttemptBoundaryPort` of the simulator: every step in process, at the current instant."""

    def __init__(self, sim: SimExecutor) -> None:
        self.sim = sim

    def latest_committed(self) -> Any:
        return self.sim.committer.latest_committed()

    def next_checkpoint_id(self) -> int:
        return self.sim.id_counter.get()

    def latest_valid(self, committed: Any) -> tuple[Any, dict[Any, Any]]:
        # newest retained checkpoint that verifies (corrupt ones are skipped, with a warning)
        sim = self.sim
        return restore_latest_valid(sim.graph, sim.store, sim.storage, committed)

    def discard_orphans(self) -> None:
        self.sim._discard_orphans()  # (the failed attempt's events are dropped: nothing still writes)

    def abort_lingering(self, plan: AttemptPlan, next_checkpoint_id: int) -> None:
        self.sim.committer.abort_lingering(plan.abort_after, plan.abort_before)

    def restored_from(self, checkpoint: Any) -> None:
        self.sim.coordinator.restored_from(checkpoint)

    def deploy(self, plan: AttemptPlan) -> None:
        self.sim._create_tasks(plan)


def run_job(graph: JobGraph, *, seed: int = 0, faults: FaultPlan | None = None, **options: Any) -> JobResult:
    """Run `graph` on the simulator (what `env.execute(..., executor="sim")` calls).

    Raises:
        runtime.jobmaster.registry.ExecutorOptionError: an option `SimExecutor` does not have (named).
    """
    check_options("sim", options, SimExecutor.__init__)
    return SimExecutor(graph, seed=seed, faults=faults, **options).run()
