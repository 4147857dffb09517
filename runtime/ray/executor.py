"""`RayExecutor`: runs a job graph with every task and the coordinator as Ray actors.

Theory of operation
-------------------
The driver process plays Flink's JobMaster: it places the actors, watches them and performs
failover; the actors run the *same* pure classes as the simulator (`Task`, the barrier handlers,
`CheckpointCoordinator`, `SnapshotWriter`, `build_restores`) — only the transport differs.

* Actors. One `WorkerActor` per `slots_per_worker` tasks (default 1: an actor per task;
  `runtime.ray.slots` packs a worker pipeline by pipeline, and channels between tasks of one
  worker are in-process; fractional CPUs, so 10+ actors fit on 2 cores; spread over the nodes
  of a cluster), each task a `TaskActor` slot in it, one `CoordinatorActor`, one `CommitterService` (the sinks' external
  system, outliving task restarts) and, for in-memory checkpoints, one `BlobStoreService`. The
  job-wide actors are pinned to the driver's node, so losing a worker node loses tasks only.
  Data flows task-to-task (`runtime.ray.channels`); the driver is on no data path.
* Watching. Every `heartbeat_interval` the driver polls each task (one outstanding heartbeat per
  task) and the coordinator, and about once a second the service actors (`runtime.ray.job_services`).
  A call to a dead actor (`ray.kill`, a crash, a lost node) raises `RayActorError` within
  milliseconds to a few seconds (node loss: the health check period); a heartbeat unanswered for
  `heartbeat_timeout` means a process that does not answer (heartbeats do not wait for a step);
  a task that raised reports its error in its heartbeat; the progress watchdog finds a task in
  one step for `stall_timeout` while nothing moves (a function that never returns); the
  coordinator reports "too many checkpoint failures" or a failed commit. Each of these starts a
  global failover (a dead service held in memory fails the job).
* Failover, as the simulator: the `runtime.jobmaster.JobMaster` decides (restart strategy,
  restore plan, result) and the driver is its gateway: cancelling an attempt suspends the
  coordinator (stop triggering, abort pending checkpoints with TASK_FAILURE) and cancels every
  task; after the restart delay (the driver sleeps) every task is deployed afresh from the
  checkpoint the master planned (the newest valid one is read in the coordinator actor, next to
  the store; `restore_from`'s is the fallback, any parallelism) as a new epoch; then triggering
  resumes. Completed checkpoints reach the master's listeners (`land_checkpoints_to`) with their
  files, read by the coordinator actor when they completed. Actors that died are replaced
  by new ones; the survivors host the new epoch's tasks (a new actor costs a process start, ~1 s).
  Every call carries its epoch and anything from an older epoch is dropped, so nothing leaks
  from the failed attempt into the restored one.
  A dead coordinator is replaced by one that recovers the completed-checkpoint store.
* High availability (`graph.high_availability`, ZOOKEEPER): two coordinator actors contend in
  ZooKeeper's leader election (see `coordinator_actor`); the driver deploys on the leader only.
  When the leader dies (its session ends, after the session timeout) or reports lost leadership,
  the driver waits for whichever contender leads now, `promote()`s it (it recovers the latest
  completed checkpoint from ZooKeeper), fails over globally from it and starts a replacement
  standby. Checkpoint ids come from ZooKeeper's counter, so they keep increasing.
* Faults (`FaultPlan`): resolved once per run by `runtime.jobmaster.fault_schedule.FaultSchedule`, as on
  the simulator, so a plan means the same on both (targets from the plan's seed, `nth` counted
  over the whole run across attempts, `at_fraction` a point of the records, not of time; `at`
  is wall seconds here, virtual ones there). Every kind is implemented (`RAY_FAULT_KINDS`). The
  driver: a `TaskCrash` (after records: the actor freezes at that count; at a time: the driver
  freezes it) and a `TaskCrashDuringRecovery` (once the new attempt is deployed) end with the
  driver killing the frozen actor and failing over with the simulator's failure message;
  `CoordinatorCrash` and `CoordinatorCrashBeforeNotify` kill the coordinator actor; a
  `ProcessKill` (Ray only) sends SIGKILL to an actor's process (`runtime.ray.processes`), and the
  poll that finds it dead reacts as to any death; progress points are checked every heartbeat interval. The task actors apply lost, duplicated and late
  acknowledgements, failed, torn and slow writes, `ChannelStall`, `TaskStall` (`hang`) and
  `ChannelDelay` (in the sender's `OutputChannels`), and report what they counted (heartbeats,
  `cancel`, `finish`) so the next attempt continues the count (`runtime.jobmaster.attempt_counts`);
  the coordinator actor applies the faults of triggers, completions and aborts, and of its own
  storage writes (`CoordinatorStorageFailure`). `runtime.jobmaster.faults` names where Ray differs.
* End. When every task reports finished, the driver waits until the final checkpoint's
  completion notifications have executed (the sinks committed; a coordinator that died since its
  last status fails over instead: the next attempt restores the final checkpoint and ends), asks every task for its keyed
  state and latencies, and reads the committed output from the committer.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from checkpoint.handles import TaskId
from checkpoint.io.ha_services import create_recovery_factory
from checkpoint.io.lease import lease_for
from checkpoint.io.recovery import ZooKeeperSuspendedError
from checkpoint.io.store import new_run_id
from checkpoint.reasons import CheckpointFailureReason
from runtime.core.graph import JobGraph
from runtime.core.links import resolve_link_delays
from runtime.jobmaster.attempt_counts import RunCounts
from runtime.jobmaster.durable_committer import open_committer
from runtime.jobmaster.fault_actions import coordinator_crash, crash_after_records, fire_fault, injected_crash
from runtime.jobmaster.faults import (
    ChannelDelay,
    ChannelStall,
    CoordinatorCrash,
    CoordinatorCrashBeforeNotify,
    CoordinatorStorageFailure,
    DelayedControlMessage,
    DuplicatedControlMessage,
    FaultPlan,
    LostAcknowledgement,
    LostControlMessage,
    ProcessKill,
    SlowStorage,
    StorageWriteFailure,
    TaskCrash,
    TaskCrashDuringRecovery,
    TaskStall,
    TornWrite,
    check_supported,
)
from runtime.jobmaster.master import JobMaster, RunsOnJobMaster
from runtime.jobmaster.progress import Phase, progress_figures, reading_phase
from runtime.jobmaster.registry import check_options
from runtime.jobmaster.result import JobFailedError, JobMetrics, JobResult
from runtime.jobmaster.watchdog import DEFAULT_STALL_TIMEOUT, Progress, ProgressWatchdog, check_timeout
from runtime.ray import errors
from runtime.ray.cluster import alive_nodes, ensure_ray
from runtime.ray.coordinator_actor import CoordinatorActor
from runtime.ray.errors import describe, project_error
from runtime.ray.job_services import JobServices
from runtime.ray.processes import ActorProcesses
from runtime.ray.services import SERVICE_CPUS
from runtime.ray.slots import SlotHandle, assign_slots, check_slots
from runtime.ray.storage import StorageConfigError, check_storage_for_cluster, is_memory, open_storage
from runtime.ray.timers import WallClock
from runtime.ray.worker_actor import WorkerActor

log = logging.getLogger("barrierflow.ray")

#: the `FaultPlan` kinds this executor implements; it refuses a plan with any other
RAY_FAULT_KINDS = (TaskCrash, CoordinatorCrash, LostAcknowledgement, ChannelStall, StorageWriteFailure, TaskStall,
                   TaskCrashDuringRecovery, TornWrite, SlowStorage, LostControlMessage, DuplicatedControlMessage,
                   DelayedControlMessage, CoordinatorCrashBeforeNotify, ChannelDelay, CoordinatorStorageFailure,
                   ProcessKill)

# No task events: Ray records every actor call for its dashboard and state API (a per-call cost on
# the sender and the receiver, ~5-8 % of a small call's CPU measured here); nothing here reads them.
_WorkerActor = ray.remote(enable_task_events=False)(WorkerActor)
_CoordinatorActor = ray.remote(enable_task_events=False)(CoordinatorActor)


#: seconds a newly created task actor may take to start its process and take its deployment
ACTOR_START_TIMEOUT = 60.0


class RayExecutor(RunsOnJobMaster):
    """Runs `graph` on Ray. See the module docstring; `run_job` is the entry point.

    Args:
        graph: the job.
        address: a Ray cluster to join (None: the running Ray, else an embedded local one).
        faults: what to break.
        seed: recorded in the result; seeds the restart strategy's jitter. Fault targets the plan
            leaves open are drawn from the plan's own seed (`FaultPlan.seed`), as on the simulator.
        progress: called about four times a second with a dict of progress figures.
        job_id: storage directory name (default: the job name).
        task_cpus: CPUs each worker actor requests.
        slots_per_worker: tasks per worker actor (`runtime.ray.slots`: packed pipeline by
            pipeline; 1, the default, is one actor per task). Calls between the tasks of one worker
            are in-process, and a checkpoint's triggers, notifications and acknowledgements go in
            one call per worker; a worker's death fails all its tasks (a global failover anyway).
        heartbeat_interval: seconds between polls of the actors (each poll is one Ray call per actor,
            ~0.25 ms of CPU to submit: at 0.02 s a 4-task job spent 250 calls/s on polling alone).
        heartbeat_timeout: seconds a task's process may leave a heartbeat unanswered before it counts
            as hung (a heartbeat does not wait for a step, however slow a record).
        stall_timeout: wall seconds without progress (no record processed, no task finished, no
            checkpoint completed, no new attempt; a step in progress counts until it has run this
            long) before the job is stuck (`runtime.jobmaster.watchdog`): a task that long in one
            step is hung and replaced (a failover), else the job fails; None: never.
        max_duration: wall seconds the whole job may take (None, the default: no limit; a long or
            unbounded job is not a stuck one, the watchdog tells them apart).
        committer: an earlier execution's `CollectCommitter` whose staged transactions this one may commit.
        trace_barriers: record barrier events in `JobResult.trace` (wall times: `barrier-in` per input
            channel, `snapshot`, `ack`, as on the simulator), for a barrier timeline.
        link_delays: task or vertex name -> extra seconds on everything it sends (a slow link,
            `runtime.core.links`), as the simulator's `NetworkOptions.link_delays`.
    """

    def __init__(
        self,
        graph: JobGraph,
        *,
        address: str | None = None,
        faults: FaultPlan | None = None,
        seed: int = 0,
        progress: Callable[[dict[str, Any]], None] | None = None,
        job_id: str | None = None,
        task_cpus: float = 0.01,
        slots_per_worker: int = 1,
        heartbeat_interval: float = 0.1,
        heartbeat_timeout: float = 30.0,
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
        max_duration: float | None = None,
        committer: Any = None,
        trace_barriers: bool = False,
        link_delays: dict[str, float] | None = None,
        restore_from: tuple[Any, Any] | None = None,
        allow_non_restored_state: bool = False,
        checkpoint_listeners: Sequence[Callable[[Any, Any], None]] = (),
    ) -> None:
        #: attempts, restarts, restore planning and the result (`runtime.jobmaster`); checks a
        #: `restore_from` checkpoint against the job before anything starts (StateMismatchError)
        self.master = JobMaster(
            graph, executor="ray", gateway=self, clock=WallClock(), timers=_DriverTimers(), seed=seed,
            faults=faults, restore_from=restore_from, allow_non_restored_state=allow_non_restored_state,
            checkpoint_listeners=checkpoint_listeners, run_id=new_run_id(), replay_hint=f"executor=ray, faults={faults or FaultPlan()!r}")
        self.graph = graph = self.master.graph
        self.trace_barriers = trace_barriers
        self.link_delays = resolve_link_delays(link_delays, graph.task_ids())
        #: an earlier execution's `CollectCommitter` (`result.committer`): this one restores its
        #: checkpoint, so the transactions it staged must still be committable
        self._initial_committer = committer
        self.address = address
        self.faults = faults or FaultPlan()
        check_supported(self.faults, RAY_FAULT_KINDS, "ray", "sim")
        self.seed = seed
        self.progress = progress
        self.started = time.time()  # reset once Ray and the services are up (job time)
        self.job_id = job_id or graph.job_name
        #: this run's identity in the checkpoint storage (recovery ignores other runs' checkpoints)
        self.run_id = self.master.run_id
        self.task_cpus = task_cpus
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.max_duration = check_timeout("max_duration", max_duration)
        self._watchdog = ProgressWatchdog(stall_timeout)
        config = graph.checkpoint_config
        self.checkpointing = graph.checkpointing_enabled
        self.storage_uri = config.storage if config is not None else None
        self.task_ids = graph.task_ids()
        self.slots_per_worker = check_slots(slots_per_worker)
        #: the tasks of each worker actor, and the worker of each task
        self.groups = assign_slots(self.task_ids, self.slots_per_worker)
        self._worker_of = {t: i for i, group in enumerate(self.groups) for t in group}
        self._resolve_faults()
        self.epoch = -1
        #: worker index -> its actor (None: not started yet or replaced)
        self.workers: list[Any] = [None] * len(self.groups)
        #: task -> its slot on its worker (`SlotHandle`)
        self.tasks: dict[TaskId, Any] = {}
        #: tasks' final counts of the current attempt, taken before their worker was killed
        self._final_counts: dict[TaskId, dict[str, Any]] = {}
        #: what the coordinator actors of the run sent and received (`CoordinatorActor.call_counts`)
        self.coordinator_calls: dict[str, int] = {}
        #: CPU seconds of the coordinator actors' and the committer's processes (`JobMetrics.service_cpu`)
        self.service_cpu: dict[str, float] = {}
        self._dead: set[TaskId] = set()
        #: task name -> node id of its actor (current epoch)
        self.placement: dict[str, str] = {}
        self._heartbeats: dict[TaskId, tuple[Any, float]] = {}
        self._status: dict[TaskId, dict[str, Any]] = {}
        self._coord_status: dict[str, Any] = {}
        self._coord_ref: Any = None
        self.coordinator: Any = None
        #: the driver killed the coordinator for a fault (its failover reads as the simulator's)
        self._coordinator_crashed = False
        #: HA only: the standby coordinator actor, and how many contenders were started so far
        self.standby: Any = None
        self._contenders = 0
        ha = graph.high_availability
        self.ha = ha if ha is not None and ha.enabled and self.checkpointing else None
        if self.ha is not None:  # bad hosts/cluster id fail here, in the driver, not in an actor
            self._ha_factory().close()
            self.master.high_availability = f"ZooKeeper at {self.ha.hosts}, cluster id {self.ha.cluster_id!r}"
        #: the driver's lease of the job's checkpoint directory (None: in memory, or not started)
        self.lease: Any = None
        #: the committer and in-memory storage service actors, watched (`runtime.ray.job_services`)
        self.services: JobServices | None = None
        #: every actor's process, for `ProcessKill`
        self.processes = ActorProcesses()
        #: the first checkpoint id of this run (from the first coordinator actor)
        self._first_checkpoint_id: int | None = None

    # ------------------------------------------------------------------ entry

    def run(self) -> JobResult:
        self._check_reachable()
        # one writer per checkpoint directory: the driver holds the job's lease and keeps it fresh
        self.lease = None if is_memory(self.storage_uri) else lease_for(
            open_storage(("uri", self.storage_uri), self.graph), self.job_id, self.run_id)
        try:
            return self._run_on_ray()
        finally:
            if self.lease is not None:
                self.lease.release()

    def _run_on_ray(self) -> JobResult:
        self._committer_seed = self._first_committer()
        self._report(Phase.STARTING)
        started_ray = ensure_ray(self.address)
        try:
            return self._run()
        except (JobFailedError, StorageConfigError):
            raise
        except RayError as exc:  # what Ray wrapped, as the project's own error (`runtime.ray.errors`)
            error = project_error(exc, self.graph.job_name)
            if isinstance(error, JobFailedError):
                self._attach_committer(error)
            raise error from exc
        except Exception as exc:  # nothing else leaves execute once the job runs: named, with its cause
            self.master.fail_for_good(f"job {self.graph.job_name!r} failed: {describe(exc)}", exc)
            self._raise(self.master.error)
            raise  # (unreachable: `_raise` raises)
        finally:
            try:
                self._report(Phase.STOPPING)
            except Exception as exc:  # a failing progress display must not leave the actors running
                log.warning("barrierflow ray: progress callback failed: %s", exc)
            self._cleanup()
            if started_ray:
                ray.shutdown()

    def _ha_factory(self) -> Any:
        assert self.ha is not None
        return create_recovery_factory(self.ha.mode, hosts=self.ha.hosts, cluster_id=self.ha.cluster_id,
                                       session_timeout=self.ha.session_timeout,
                                       operation_timeout=self.ha.operation_timeout)

    def _check_reachable(self) -> None:
        """Fail within seconds, before Ray starts, naming what cannot be reached: the checkpoint
        storage URI (`storage_timeout`) or ZooKeeper (`operation_timeout`). Actors would find out
        too, but only by dying in their constructors, retried until the deploy gives up.

        Raises:
            checkpoint.io.storage.StorageError: the storage URI cannot be opened.
            checkpoint.io.recovery.HighAvailabilityError: ZooKeeper cannot be reached.
        """
        if not is_memory(self.storage_uri):
            open_storage(("uri", self.storage_uri), self.graph)
        if self.ha is not None:
            with self._ha_factory() as factory:
                factory.create_id_counter(self.job_id).start()

    def _first_committer(self) -> Any:
        """What the committer service starts with (`open_committer`: the given committer, or one
        kept beside the checkpoints, seeded from the restored checkpoint's run), read before Ray
        starts: a damaged folder is named, as on the simulator.

        Raises:
            runtime.jobmaster.durable_committer.CorruptCommitterError: a committer file is damaged.
        """
        storage = None if is_memory(self.storage_uri) else open_storage(("uri", self.storage_uri), self.graph)
        return open_committer(self.master, storage, self.job_id, self._initial_committer)

    def _run(self) -> JobResult:
        nodes = alive_nodes()
        check_storage_for_cluster(self.storage_uri, len(nodes))
        self._multi_node = len(nodes) > 1
        self._pin = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.services = JobServices(self._committer_seed, is_memory(self.storage_uri), self._pin, self.graph)
        for handle in self.services.handles():
            self.processes.watch(handle)
        if is_memory(self.storage_uri):
            self.storage_spec: tuple[str, Any] = ("memory", self.services.blob_store)
        else:
            self.storage_spec = ("uri", self.storage_uri)
        self.graph_ref = ray.put(self.graph)
        log.info("barrierflow ray: job %r on %d node(s), %d tasks, faults=%r", self.graph.job_name,
                 len(nodes), len(self.task_ids), self.faults)
        self.started = time.time()
        if self.checkpointing:
            self.coordinator = self._new_coordinator()
            if self.ha is not None:
                self._await_leader(first=True)
        self.master.start()
        self._raise_if_failed()
        self.running_since = time.time()  # job time excludes starting Ray and the first actors
        last_progress = 0.0
        while True:
            now = time.time()
            if self.max_duration is not None and now - self.started > self.max_duration:
                self._give_up(f"job did not finish within max_duration={self.max_duration} s; {self._stuck()}", None)
            if self.lease is not None and self.lease.lost is not None:  # another writer: stop writing
                self._give_up(self.lease.lost, None)
            self._inject_faults(now)
            failure = (self._watch_progress(now) or self._poll_tasks(now) or self._poll_coordinator()
                       or self._poll_services(now))
            if failure is not None:
                self.master.failover(*failure)  # cancels this attempt and deploys the next (or fails)
                self._raise_if_failed()
                continue
            if self._all_finished():
                failure = self._final_commit_failed()
                if failure is not None:  # the restored final checkpoint commits again
                    self.master.failover(*failure)
                    self._raise_if_failed()
                    continue
                self._report(Phase.COMMITTING)
                return self._finish()
            if self.progress is not None and now - last_progress >= 0.25:
                last_progress = now
                self.progress(self._progress_info())
            time.sleep(self.heartbeat_interval)

    @property
    def committer(self) -> Any:
        """The committer service actor (None before it started)."""
        return self.services.committer if self.services is not None else None

    def _progress(self) -> Progress:
        """What the job has done, as the last heartbeats and coordinator status say."""
        statuses = self._status.values()
        return Progress(attempt=self.epoch, records=sum(s.get("records", 0) for s in statuses),
                        finished=sum(1 for s in statuses if s.get("finished")),
                        checkpoints=self._coord_status.get("completed", 0))

    def _watch_progress(self, now: float) -> tuple[str, None] | None:
        """The watchdog's verdict (`runtime.jobmaster.watchdog`): a task in one step for
        `stall_timeout` while nothing moved is hung — its worker is replaced and the job fails over;
        stuck with no task in a step fails the job."""
        busy = {str(t): s["busy_for"] + (now - s["seen"]) for t, s in self._status.items()
                if s.get("busy_for") is not None}
        stall = self._watchdog.observe(now, self._progress(), busy)
        if stall is None:
            return None
        limit = self._watchdog.stall_timeout
        if not stall.hung:
            self._give_up(f"job made no progress for {stall.seconds:.0f} s (stall_timeout={limit}: no record "
                          f"processed, no task finished, no checkpoint completed); {self._stuck()}", None)
        hung = [t for t in self.task_ids if str(t) in stall.hung]
        for task_id in hung:
            self._kill(task_id)
        named = ", ".join(f"{t} for {busy[str(t)]:.0f} s" for t in hung)
        return (f"task {hung[0]} is hung: in one step (a record in its function, a snapshot) with nothing else "
                f"moving ({named}; stall_timeout={limit}: a record that takes longer needs a larger one)"), None

    def _stuck(self) -> str:
        unfinished = [str(t) for t in self.task_ids if not self._status.get(t, {}).get("finished")]
        return f"unfinished tasks {unfinished}; coordinator: {self._coord_status}"

    # ------------------------------------------------------------------ deployment

    def _new_coordinator(self) -> Any:
        contender = f"coordinator-{self._contenders}"
        self._contenders += 1
        handle = _CoordinatorActor.options(num_cpus=SERVICE_CPUS, scheduling_strategy=self._pin,
                                           max_restarts=0).remote(self.job_id, self.graph_ref, self.storage_spec,
                                                                  contender, self._first_checkpoint_id,
                                                                  self.run_id, self.master.first_checkpoint_id,
                                                                  bool(self.master.checkpoint_listeners))
        self.processes.watch(handle)
        self._arm_coordinator(handle)
        if self._first_checkpoint_id is None:  # the first one: its successors clean up this run's ids only
            try:
                self._first_checkpoint_id = ray.get(handle.checkpoint_id_floor.remote(), timeout=120)
            except RayError as exc:  # it did not start: the next one is asked (its floor is only higher)
                log.warning("barrierflow ray: coordinator did not start: %s", describe(exc))
        return handle

    def _await_leader(self, first: bool = False) -> None:
        """HA: make whichever contender leads now `self.coordinator` (promoted: it recovered the
        completed checkpoints from ZooKeeper), and keep a live standby next to it.

        Raises:
            JobFailedError: no contender became leader within a few session timeouts.
        """
        assert self.ha is not None
        if first:  # the first contender joins alone, so it leads; the standby joins after it
            self.standby = None
        deadline = time.time() + 4 * self.ha.session_timeout + 30
        while time.time() < deadline:
            for handle in (self.coordinator, self.standby):
                if handle is None:
                    continue
                try:
                    leads = ray.get(handle.promote.remote(0.2), timeout=30)
                except (RayActorError, GetTimeoutError) as exc:
                    log.warning("barrierflow ray: coordinator contender unusable: %s", describe(exc))
                    self._replace_contender(handle)
                    break
                except RayError as exc:  # e.g. ZooKeeper unreachable while recovering: try again
                    log.warning("barrierflow ray: promoting a coordinator failed: %s", describe(exc))
                    time.sleep(0.2)
                    continue
                if leads:
                    if handle is self.standby:
                        self.coordinator, self.standby = self.standby, self.coordinator
                    if self.standby is None:
                        self.standby = self._new_coordinator()
                    if not first:
                        self._arm_coordinator(self.coordinator)
                        promoted_at = time.time()
                        status = ray.get(self.coordinator.status.remote(), timeout=30)
                        self.master.coordinators.promoted(status["latest_id"], promoted_at)
                    log.info("barrierflow ray: coordinator %s leads", "promoted" if not first else "elected")
                    return
        self._give_up(f"no coordinator of job {self.graph.job_name!r} became leader in ZooKeeper "
                      f"({self.ha.hosts}) within {4 * self.ha.session_timeout + 30:.0f} s", None)

    def _replace_contender(self, handle: Any) -> None:
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True)
        if handle is self.coordinator:
            self.coordinator, self.standby = self.standby, None
        else:
            self.standby = None
        if self.coordinator is None:
            self.coordinator = self._new_coordinator()

    def _deploy(self, restores: dict[TaskId, Any]) -> None:
        """Deploy a new epoch on the task actors, replacing the ones that died."""
        for _ in range(5):
            self.epoch += 1
            epoch = self.epoch
            fresh = set()
            for index, group in enumerate(self.groups):
                if self.workers[index] is None or any(t in self._dead for t in group):
                    self._new_worker(index)
                    fresh.update(group)
            self._dead.clear()
            self._final_counts = {}
            self.placement = {}
            outputs, inputs = self._routes()
            self._status = {}
            self._heartbeats = {}
            refs = {t: self.tasks[t].deploy.remote(epoch, restores.get(t), outputs[t], inputs[t],
                                                   self.counts.task_faults(t, time.time()), self.coordinator,
                                                   self.committer)
                    for t in self.task_ids}
            for task_id, ref in refs.items():
                # a new actor first starts a process (seconds on a busy host); a survivor that does
                # not answer within the heartbeat timeout is hung
                timeout = max(self.heartbeat_timeout, ACTOR_START_TIMEOUT) if task_id in fresh else self.heartbeat_timeout
                try:
                    errors.get(ref, timeout=timeout)  # restoring the task raised: that error, as on the simulator
                except RayActorError:
                    self._dead.add(task_id)  # died before or while deploying: replace it
                except GetTimeoutError:
                    self._kill(task_id)  # hung (still stuck in a user function): replace it
            if self._dead:
                continue
            if self.coordinator is not None:
                ray.get(self.coordinator.deploy.remote(epoch, self.tasks, epoch == 0, self.committer), timeout=60)
            for task_id in self.task_ids:
                # not awaited: starting runs user code, and a task that fails or hangs there is
                # caught by the heartbeats like anywhere else
                self.tasks[task_id].start.remote(epoch)
            return
        self._give_up(f"could not deploy the tasks of job {self.graph.job_name!r}: actors kept dying", None)

    def _new_worker(self, index: int) -> None:
        """Start worker `index` (killing its predecessor, if any is left) and address its tasks."""
        old = self.workers[index]
        if old is not None:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(old, no_restart=True)
        options: dict[str, Any] = {"num_cpus": self.task_cpus, "max_restarts": 0, "max_task_retries": 0}
        if self._multi_node:
            options["scheduling_strategy"] = "SPREAD"
        group = self.groups[index]
        services = {t: {"committer": self.committer, "global_committer": self.checkpointing,
                        "storage": self.storage_spec, "job_id": self.job_id, "trace_barriers": self.trace_barriers,
                        "link_delay": self.link_delays.get(t, 0.0)} for t in group}
        worker = self.workers[index] = _WorkerActor.options(**options).remote(self.graph_ref, index, group, services)
        self.processes.watch(worker)
        for task_id in group:
            self.tasks[task_id] = SlotHandle(worker, index, task_id)

    def _routes(self) -> tuple[dict[TaskId, dict[int, tuple[Any, int]]], dict[TaskId, dict[int, tuple[str, Any, int]]]]:
        outputs: dict[TaskId, dict[int, tuple[Any, int]]] = {t: {} for t in self.task_ids}
        inputs: dict[TaskId, dict[int, tuple[str, Any, int]]] = {t: {} for t in self.task_ids}
        for route in self.graph.channel_routes():
            outputs[route.sender][route.output_channel] = (self.tasks[route.receiver], route.input_channel)
            inputs[route.receiver][route.input_channel] = (str(route.sender), self.tasks[route.sender],
                                                           route.output_channel)
        return outputs, inputs

    # ------------------------------------------------------------------ watching

    def _poll_tasks(self, now: float) -> tuple[str, BaseException | None] | None:
        for task_id, handle in self.tasks.items():
            if task_id not in self._heartbeats:
                self._heartbeats[task_id] = (handle.heartbeat.remote(), now)
        refs = {ref: task_id for task_id, (ref, _) in self._heartbeats.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            task_id = refs[ref]
            del self._heartbeats[task_id]
            try:
                status = ray.get(ref)
            except RayActorError as exc:
                self._dead.update(self.groups[self._worker_of[task_id]])  # its worker died: all its tasks
                return f"task {task_id} died: {describe(exc)}", exc
            if status["epoch"] != self.epoch:
                continue
            status["seen"] = now
            self._status[task_id] = status
            self.placement[str(task_id)] = status["node"]
            if status["error"]:
                return status["error"], RemoteTaskError(status["error"], status["suppress_restarts"])
            if status["frozen"]:
                return self._check_crash(task_id, status)
        for task_id, (_, sent) in self._heartbeats.items():
            if now - sent > self.heartbeat_timeout:
                self._kill(task_id)
                return f"task {task_id} is hung: no heartbeat for {now - sent:.1f} s", None
        return None

    def _kill(self, task_id: TaskId) -> None:
        """Kill the worker of `task_id`: every task it hosts dies."""
        index = self._worker_of[task_id]
        ray.kill(self.workers[index], no_restart=True)
        self._dead.update(self.groups[index])

    def _cancel_siblings(self, task_id: TaskId) -> None:
        """Before killing the worker of a crashed task: stop the other tasks it hosts and keep
        their final counts, as a failover takes them from surviving tasks (`_count_attempt`), so
        a run's `FaultSchedule` counts the same whatever the slots."""
        siblings = [t for t in self.groups[self._worker_of[task_id]] if t != task_id and t not in self._dead]
        refs = {t: self.tasks[t].cancel.remote() for t in siblings}
        for sibling, ref in refs.items():
            with contextlib.suppress(RayError):
                self._final_counts[sibling] = ray.get(ref, timeout=self.heartbeat_timeout)

    def _poll_coordinator(self) -> tuple[Any, ...] | None:
        """None, or the failover to start: `JobMaster.failover`'s arguments."""
        if self.coordinator is None:
            return None
        if self._coord_ref is None:
            self._coord_ref = self.coordinator.status.remote()
        ready, _ = ray.wait([self._coord_ref], timeout=0)
        if not ready:
            return None
        ref, self._coord_ref = self._coord_ref, None
        try:
            self._coord_status = ray.get(ref)
        except RayActorError as exc:
            return self._coordinator_died(exc)
        self._land(self._coord_status)
        if self._coord_status.get("fail_request"):
            return self._coord_status["fail_request"], None
        if self.ha is not None and self._coord_status.get("leader_lost"):
            self._await_leader()
            self._coord_ref = None
            return "checkpoint coordinator lost its ZooKeeper leadership", None
        return None

    def _poll_services(self, now: float) -> tuple[str, BaseException] | None:
        """A dead committer is replaced (then the job fails over); a dead committer held in memory
        or a dead in-memory checkpoint storage fails the job (`runtime.ray.job_services`)."""
        assert self.services is not None
        death = self.services.poll(now)
        if death is None:
            return None
        if death.fatal:
            self._give_up(f"job {self.graph.job_name!r} failed: {death.message}", death.cause)
        self.processes.watch(self.committer)  # its replacement
        return death.message, death.cause

    def _final_commit_failed(self) -> tuple[Any, ...] | None:
        """Every task finished: wait for the last completion's notifications and commit; the
        failover to start if that commit failed or the committer died meanwhile."""
        assert self.services is not None
        if self.coordinator is not None:
            try:
                ray.get(self.coordinator.wait_notifications.remote(), timeout=60)
            except RayActorError as exc:  # it died since its last status (a crash in this very poll): the
                return self._coordinator_died(exc)  # next attempt restores the final checkpoint and ends
        death = self.services.check_committer()
        if death is not None:
            if death.fatal:
                self._give_up(f"job {self.graph.job_name!r} failed: {death.message}", death.cause)
            self.processes.watch(self.committer)  # its replacement
            return death.message, death.cause
        if self.coordinator is None:
            return None
        if self._coord_ref is not None:  # a status poll in flight may carry completed checkpoints
            ref, self._coord_ref = self._coord_ref, None
            self._land(ray.get(ref, timeout=60))
        self._coord_status = ray.get(self.coordinator.status.remote(), timeout=60)
        self._land(self._coord_status)
        request = self._coord_status.get("fail_request")
        return (request, None) if request else None
    def _coordinator_died(self, exc: RayActorError) -> tuple[Any, ...]:
        """Replace the dead coordinator; the failover to start (`JobMaster.failover`'s arguments)."""
        self._replace_coordinator()
        if self._coordinator_crashed:  # an injected crash: the failure reads as the simulator's
            self._coordinator_crashed = False
            return coordinator_crash(standby=self.ha is not None), None, CheckpointFailureReason.COORDINATOR_SHUTDOWN
        return f"checkpoint coordinator died: {describe(exc)}", exc

    def _replace_coordinator(self) -> None:
        ray.kill(self.coordinator, no_restart=True)
        self._coord_ref = None
        if self.ha is not None:
            self._close_dead_leader_session()
            self.coordinator, self.standby = self.standby, None
            if self.coordinator is None:
                self.coordinator = self._new_coordinator()
            self._await_leader()
            return
        self.coordinator = self._new_coordinator()

    def _close_dead_leader_session(self) -> None:
        """Ray confirmed the coordinator is dead: end its ZooKeeper session now rather than wait
        for the session timeout, so the standby is elected at once."""
        session = (self._coord_status or {}).get("zk_session")
        if not session:
            return
        from checkpoint.io.zookeeper import close_session

        try:
            close_session(self.ha.hosts, session, timeout=self.ha.operation_timeout)
        except Exception as exc:  # the session timeout still ends it; this only speeds it up
            log.warning("could not close the dead coordinator's ZooKeeper session: %s", exc)

    def _all_finished(self) -> bool:
        return len(self._status) == len(self.task_ids) and all(s["finished"] for s in self._status.values())

    # ------------------------------------------------------------------ failover

    def cancel_attempt(self, attempt: int, reason: CheckpointFailureReason) -> None:
        """`JobMasterGateway`: suspend the coordinator and cancel every task of the attempt."""
        self._report(Phase.RESTARTING)
        if self.coordinator is not None:
            try:
                ray.get(self.coordinator.suspend.remote(reason), timeout=30)
            except (RayActorError, GetTimeoutError) as exc:  # it died with the failure being handled
                injected, self._coordinator_crashed = self._coordinator_crashed, False
                self._replace_coordinator()
                if not injected:  # (an injected crash the failover covers reads as on the simulator)
                    state = "died" if isinstance(exc, RayActorError) else "did not answer"
                    self.master.also_failed(f"checkpoint coordinator {state}: {describe(exc)}")
        # survivors stop now and are redeployed below
        self._count_attempt({t: h.cancel.remote() for t, h in self.tasks.items()
                             if t not in self._dead and t not in self._final_counts})
        self._heartbeats.clear()
        self._status = {}

    def deploy_attempt(self, attempt: int) -> None:
        """`JobMasterGateway`: deploy the tasks restored as the job master plans (the coordinator
        actor reads the newest valid retained checkpoint, next to its store)."""
        assert self.services is not None
        death = self.services.check_committer()  # (a task may have found it dead first: this failover)
        if death is not None and death.fatal:
            self._give_up(f"job {self.graph.job_name!r} failed: {death.message}", death.cause)
        committed = ray.get(self.committer.latest_committed.remote(), timeout=60)
        next_id = None
        if self.coordinator is not None:
            given = self.master.restore_from[0] if self.master.restore_from is not None else None
            next_id = self._read_ha(lambda: ray.get(self.coordinator.next_checkpoint_id.remote(), timeout=60))
            plan = self.master.plan_attempt(
                lambda: self._read_ha(lambda: errors.get(self.coordinator.restores.remote(committed, given), timeout=120)),
                committed, next_id)
        else:
            plan = self.master.plan_attempt(lambda: (None, {}), committed, 0)
        if plan is None:
            return  # cannot recover: the job master failed the job
        # what the failed attempt staged past the restored checkpoint can never commit
        ray.get(self.committer.abort_lingering.remote(plan.abort_after, plan.abort_before, next_id), timeout=60)
        self._deploy(plan.restores)

    def _read_ha(self, read: Callable[[], Any]) -> Any:
        """`read` (a coordinator actor call that reads ZooKeeper), retried while the coordinator's
        ZooKeeper client is suspended — a restarted server or a dropped connection it may still
        get back — for at most the session timeout: past it the session is gone, and the error
        stands (a failover then, not a hang)."""
        return retry_while_suspended(read, self.ha.session_timeout if self.ha is not None else 0.0)

    def _raise_if_failed(self) -> None:
        if self.master.error is not None:
            self._raise(self.master.error)

    def _give_up(self, message: str, exc: BaseException | None) -> None:
        self.master.fail_for_good(message, exc)
        self._raise_if_failed()

    def _raise(self, error: JobFailedError) -> None:
        self._attach_committer(error)
        raise error

    def _attach_committer(self, error: JobFailedError) -> None:
        """What the sinks committed before the job failed (committed output is never taken back)."""
        error.committer = None
        if self.committer is not None:
            with contextlib.suppress(RayError):
                error.committer = ray.get(self.committer.committer.remote(), timeout=30)

    # ------------------------------------------------------------------ faults

    def _resolve_faults(self) -> None:
        """Resolve the plan once for the run (`runtime.jobmaster.fault_schedule`, as the simulator does)."""
        self.schedule = self.master.schedule
        #: what the attempts' actors counted, for the schedule; `torn_files`, `slowed_writes`
        self.counts = RunCounts(self.schedule, self.task_ids)
        #: faults placed at a wall time (seconds since the first deployment): (at, index)
        self._timed = [(at, index) for at, index, _ in self.schedule.timed()]
        #: task -> what froze it, for a crash at a time (the actor reports it frozen)
        self._crashing: dict[TaskId, str] = {}
        #: `TaskCrashDuringRecovery` faults due: (wall time, task)
        self._recovery_crashes: list[tuple[float, TaskId]] = []

    def _count_attempt(self, cancels: dict[TaskId, Any]) -> None:
        """An attempt ended: add what each task counted in it to the run's counts (records, source
        records, acknowledgements, writes). A cancelled task's counts come with its `cancel`; a
        frozen or failed task's last heartbeat is final; a task that died otherwise loses what it
        did after its last heartbeat."""
        final: dict[TaskId, dict[str, Any]] = dict(self._final_counts)
        for task_id, ref in cancels.items():
            try:
                final[task_id] = ray.get(ref, timeout=self.heartbeat_timeout)
            except RayError as exc:  # dead, or hung (a `TaskStall` longer than the heartbeat timeout): replaced
                died = isinstance(exc, RayActorError) and task_id not in self._dead
                with contextlib.suppress(RayError):
                    self._kill(task_id)  # (every task of its worker is then dead: named once)
                self._dead.add(task_id)
                if died:  # its process died with the failure being handled
                    self.master.also_failed(f"task {task_id} died: {describe(exc)}")
        for task_id in self.tasks:
            self.counts.attempt_ended(task_id, final.get(task_id) or self._status.get(task_id, {}))

    def _check_crash(self, task_id: TaskId, status: dict[str, Any]) -> tuple[str, BaseException]:
        """The task froze for a `TaskCrash` (after its records, or at a time): kill it; the failure
        reads as the simulator's."""
        self._cancel_siblings(task_id)
        self._kill(task_id)
        what = self._crashing.pop(task_id, None)
        if what is None:
            after = self.schedule.crash_due(task_id, self.counts.records(task_id, status["records"]))
            what = crash_after_records(after)
        exc = injected_crash(task_id, what)
        return f"task {task_id} failed: {exc}", exc

    def _inject_faults(self, now: float) -> None:
        elapsed = now - self.running_since
        for at, index in list(self._timed):
            if elapsed >= at:
                self._timed.remove((at, index))
                self._fire(index)
        source_records = self.counts.source_records(s.get("source_records", 0) for s in self._status.values())
        for index, _ in self.schedule.due(source_records, now):
            self._fire(index)
        if self._coord_status.get("doomed") and self.coordinator is not None:  # CoordinatorCrashBeforeNotify
            self._kill_coordinator()
        for at, target in list(self._recovery_crashes):
            if now >= at:
                self._recovery_crashes.remove((at, target))
                self._freeze(target, "TaskCrashDuringRecovery")

    def crash_during_recovery(self, task_id: TaskId, at: float) -> None:
        """`JobMasterGateway`: `TaskCrashDuringRecovery` at wall time `at` — at the earliest once the
        new attempt is deployed (this driver waits out the restart delay and deploys before it
        injects again), so on Ray the task fails while the new attempt restores and replays,
        never during the restart delay itself."""
        self._recovery_crashes.append((at, task_id))

    def _freeze(self, task_id: TaskId, what: str) -> None:
        """Crash `task_id` now: it freezes (its counts final), its next heartbeat says so, the poll
        kills it and fails over (`_check_crash`)."""
        handle = self.tasks.get(task_id)
        if handle is not None and task_id not in self._dead:
            self._crashing[task_id] = what
            handle.freeze.remote(self.epoch)

    def _fire(self, index: int) -> None:
        fire_fault(self.schedule, index, self.graph, self)

    # `FaultActions` (`runtime.jobmaster.fault_actions`)

    def crash_task(self, task_id: TaskId, what: str) -> None:
        self._freeze(task_id, what)

    def crash_coordinator(self) -> None:
        if self.coordinator is not None:
            self._kill_coordinator()

    def stall_channels(self, task_id: TaskId, duration: float) -> None:
        handle = self.tasks.get(task_id)
        if handle is not None:
            handle.stall.remote(self.epoch, duration)

    def stall_task(self, task_id: TaskId, duration: float) -> None:
        handle = self.tasks.get(task_id)
        if handle is not None:
            handle.hang.remote(self.epoch, duration)

    def delay_channel(self, receiver: TaskId, channel: int, fault: ChannelDelay) -> None:
        """Applied by the sender of that input channel."""
        route = next(r for r in self.graph.channel_routes() if r.receiver == receiver and r.input_channel == channel)
        window = self.counts.open_channel_delay(route.sender, route.output_channel, fault, time.time())
        handle = self.tasks.get(route.sender)
        if handle is not None and route.sender not in self._dead:
            handle.delay_channel.remote(self.epoch, *window)

    def slow_storage(self, fault: SlowStorage) -> None:
        """The storage is shared: every task's writes."""
        window = self.counts.open_slow_storage(fault, time.time())
        for task_id, handle in self.tasks.items():
            if task_id not in self._dead:
                handle.slow_writes.remote(self.epoch, *window)

    def kill_process(self, process: str, task_id: TaskId) -> None:
        """`ProcessKill`: SIGKILL the process; the poll that finds it dead starts the failover
        (or, for a service, whatever its death leads to)."""
        handle = {"worker": self.workers[self._worker_of[task_id]], "coordinator": self.coordinator,
                  "committer": self.committer, "blob_store": self.services and self.services.blob_store}[process]
        if handle is None or not self.processes.kill(handle):
            log.info("barrierflow ray: ProcessKill of the %s process (task %s): no such process running", process, task_id)

    def _kill_coordinator(self) -> None:
        """Kill the coordinator actor (`CoordinatorCrash`, `CoordinatorCrashBeforeNotify`), keeping
        its statistics and fault counts; the next poll finds it dead and replaces it."""
        history: list[Any] = []
        with contextlib.suppress(RayError):
            history = ray.get(self.coordinator.history.remote(), timeout=10)
            self.counts.coordinator_counted(ray.get(self.coordinator.fault_counts.remote(), timeout=10))
        self._coord_status = {**self._coord_status, "doomed": False}
        self.master.coordinators.crashed(history)
        self._add_coordinator_calls(self.coordinator)
        self._coordinator_crashed = True
        ray.kill(self.coordinator, no_restart=True)

    def _arm_coordinator(self, handle: Any) -> None:
        """A new (or newly promoted) coordinator applies the plan's control-message faults, counting
        on from what its predecessors sent (exact when a `CoordinatorCrash` killed the last one;
        else as of the driver's last poll of it)."""
        self.counts.coordinator_counted(self._coord_status.get("fault_counts", {}))
        handle.arm_faults.remote(self.faults, self.schedule.counts())

    # ------------------------------------------------------------------ the end

    def _finish(self) -> JobResult:
        finals = errors.get([self.tasks[t].finish.remote() for t in self.task_ids], timeout=120)
        for task_id, final in zip(self.task_ids, finals):  # the last attempt's occurrences: `schedule.fired` complete
            self.counts.attempt_ended(task_id, final["counts"], records=False)  # (its records are counted below)
        if self.coordinator is not None:  # what failed attempts left (late uploads of cancelled tasks too)
            try:
                ray.get(self.coordinator.discard_orphans.remote(), timeout=120)
            except RayError as exc:  # the job succeeded; `barrierflow checkpoints gc` gets the rest
                log.warning("barrierflow ray: deleting orphan checkpoint files failed: %s", describe(exc))
        committer, last_commit_at, committer_cpu, committer_gc = ray.get(
            [self.committer.committer.remote(), self.committer.last_commit_at.remote(),
             self.committer.process_cpu.remote(), self.committer.gc_pauses.remote()], timeout=60)
        self.service_cpu["committer"] = committer_cpu
        gc_pauses = dict(zip((", ".join(map(str, group)) for group in self.groups),
                             ray.get([worker.gc_pauses.remote() for worker in self.workers], timeout=60)))
        gc_pauses["committer"] = committer_gc
        history: list[Any] = []
        if self.coordinator is not None:
            if self._coord_ref is not None:  # a status poll in flight may carry completed checkpoints
                with contextlib.suppress(RayError):
                    self._land(ray.get(self._coord_ref, timeout=60))
            self._land({"completed_files": ray.get(self.coordinator.take_completed.remote(), timeout=60)})
            history = ray.get(self.coordinator.history.remote(), timeout=60)
            self.counts.coordinator_counted(ray.get(self.coordinator.fault_counts.remote(), timeout=60))
            self._add_coordinator_calls(self.coordinator)
            gc_pauses["coordinator"] = ray.get(self.coordinator.gc_pauses.remote(), timeout=60)
            ray.get(self.coordinator.shutdown.remote(), timeout=60)
        if self.standby is not None:
            with contextlib.suppress(RayError):
                ray.get(self.standby.shutdown.remote(), timeout=30)
        metrics = JobMetrics()
        metrics.duration = time.time() - self.running_since
        metrics.last_commit_at = last_commit_at
        metrics.coordinator_calls = dict(self.coordinator_calls)
        metrics.service_cpu = dict(self.service_cpu)
        metrics.gc_pauses = gc_pauses
        trace: list[tuple[Any, ...]] = []
        source_now = 0
        for task_id, final in zip(self.task_ids, finals):
            trace.extend(final["trace"])
            if final.get("step_times") is not None:
                metrics.tasks[str(task_id)] = final["step_times"]
            if self.graph.vertex(task_id.vertex).source is not None:
                source_now += final["records_in"]
        metrics.records_in = self.counts.source_records([source_now])
        return self.master.result(
            committer=committer, checkpoints=history, metrics=metrics,
            finals=[final["final"] for final in finals],
            trace=sorted(trace, key=lambda event: event[0]))

    def _add_coordinator_calls(self, coordinator: Any) -> None:
        """Add what `coordinator` sent and received to the run's `coordinator_calls`, and its
        process's CPU to `service_cpu`."""
        with contextlib.suppress(RayError):
            counts, cpu = ray.get([coordinator.call_counts.remote(), coordinator.process_cpu.remote()], timeout=10)
            for key, n in counts.items():
                self.coordinator_calls[key] = self.coordinator_calls.get(key, 0) + n
            self.service_cpu["coordinator"] = self.service_cpu.get("coordinator", 0.0) + cpu

    def _land(self, status: dict[str, Any]) -> None:
        """Hand the checkpoints the coordinator completed (with their files, read when they
        completed: the store may have deleted them since) to the job master's listeners."""
        for completed, files in status.get("completed_files") or ():
            self.master.checkpoint_completed(completed, files)

    def _progress_info(self) -> dict[str, Any]:
        status = self._coord_status
        sources = [t for t in self.task_ids if self.graph.vertex(t.vertex).source is not None]
        return {**progress_figures(
            reading_phase(self._status.get(t, {}).get("state") for t in sources), clock="wall time",
            seconds=time.time() - self.started,
            records_in=self.counts.source_records(s.get("source_records", 0) for s in self._status.values()),
            completed=status.get("completed", 0), aborted=status.get("aborted", 0),
            last_duration=status.get("last_duration"), last_alignment=status.get("last_alignment"),
            restarts=len(self.failures)), "task actors": len(self.tasks),
            "task nodes": len(set(self.placement.values()))}

    def _report(self, phase: Phase) -> None:
        """Tell the progress callback the job entered `phase` (the loop reports the others)."""
        if self.progress is not None:
            self.progress({**self._progress_info(), "phase": phase.value})

    def _cleanup(self) -> None:
        if not ray.is_initialized():
            return
        services = self.services.handles() if self.services is not None else []
        for handle in [*self.workers, self.coordinator, self.standby, *services]:
            if handle is not None:
                with contextlib.suppress(Exception):  # already gone
                    ray.kill(handle, no_restart=True)
        self.tasks = {}
        self.workers = [None] * len(self.groups)


class _DriverTimers:
    """The job master's restart delay: the driver has nothing else to do meanwhile, so it sleeps
    and then calls back (before `schedule` returns)."""

    def schedule(self, delay: float, callback: Callable[[], None]) -> _Fired:
        time.sleep(max(0.0, delay))
        callback()
        return _Fired()


class _Fired:
    def cancel(self) -> None:
        pass


class RemoteTaskError(RuntimeError):
    """A task actor's operator chain raised (the message names the task, operator and record);
    `suppress_restarts`: the task's error was a `SuppressRestartsError`."""

    def __init__(self, message: str, suppress_restarts: bool = False) -> None:
        super().__init__(message)
        self.suppress_restarts = suppress_restarts


#: seconds between reads retried while ZooKeeper is suspended (`retry_while_suspended`)
SUSPENDED_RETRY_DELAY = 0.1


def retry_while_suspended(read: Callable[[], Any], within: float, *, clock: Callable[[], float] = time.monotonic,
                          sleep: Callable[[float], None] = time.sleep) -> Any:
    """`read()`, called again while it raises `ZooKeeperSuspendedError`, for at most `within`
    seconds; the last error is raised after that (and any other error at once)."""
    deadline = clock() + within
    while True:
        try:
            return read()
        except ZooKeeperSuspendedError:
            if clock() >= deadline:
                raise
        sleep(SUSPENDED_RETRY_DELAY)


def run_job(
    graph: JobGraph,
    *,
    address: str | None = None,
    faults: FaultPlan | None = None,
    seed: int = 0,
    progress: Callable[[dict[str, Any]], None] | None = None,
    **options: Any,
) -> JobResult:
    """Run `graph` on Ray (what `env.execute(..., executor="ray")` calls).

    Args:
        graph: the job.
        address: a Ray cluster address to join; None uses the Ray this process is connected to,
            or starts (and afterwards stops) an embedded local one.
        faults: a `FaultPlan` (a task crash is a `ray.kill` of that task's actor), meaning what it
            means on the simulator (`runtime.jobmaster.fault_schedule`).
        seed: recorded in the result; seeds the restart jitter (fault targets come from the plan's
            seed only, as on the simulator).
        progress: called periodically with a dict of progress figures.
        options: `RayExecutor` tuning (job_id, task_cpus, slots_per_worker, heartbeat_interval, heartbeat_timeout,
            stall_timeout, max_duration, trace_barriers, link_delays), and what `runtime.api.environment`
            passes: restore_from, allow_non_restored_state, checkpoint_listeners, committer.

    Raises:
        JobFailedError: the job failed for good (restart attempts exhausted).
        runtime.ray.storage.StorageConfigError: node-local checkpoint storage on a multi-node cluster.
        checkpoint.io.storage.StorageError: the checkpoint storage URI cannot be reached (within
            `storage_timeout`; names the URI and the cause).
        checkpoint.io.recovery.HighAvailabilityError: ZooKeeper cannot be reached (within the
            `operation_timeout` of `set_high_availability`; names the hosts).
        runtime.ray.cluster.RayStartError: Ray could not be started or joined.
        runtime.jobmaster.registry.ExecutorOptionError: an option `RayExecutor` does not have (named).
    """
    check_options("ray", options, RayExecutor.__init__)
    return RayExecutor(graph, address=address, faults=faults, seed=seed, progress=progress, **options).run()
