"""`RayExecutor`: runs a job graph with every task and the coordinator as Ray actors.

Theory of operation
-------------------
The driver process plays Flink's JobMaster: it places the actors, watches them and performs
failover; the actors run the *same* pure classes as the simulator (`Task`, the barrier handlers,
`CheckpointCoordinator`, `SnapshotWriter`, `build_restores`) — only the transport differs.

* Actors. One `WorkerActor` per pipeline by default (subtask i of every vertex: Flink's slot
  sharing) or per `slots_per_worker` tasks (1: an actor per task; `runtime.ray.slots`); channels
  between tasks of one worker are in-process; fractional CPUs, so 10+ actors fit on 2 cores; spread over the nodes
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
  from the failed attempt into the restored one. A job that ended cleanly leaves its workers to
  the next job of this process (`runtime.ray.worker_pool`), whose epochs are all later ones.
  A dead coordinator is replaced by one that recovers the completed-checkpoint store.
* High availability (`graph.high_availability`, ZOOKEEPER): two coordinator actors contend in
  ZooKeeper's leader election (see `coordinator_actor`); the driver deploys on the leader only.
  When the leader dies (its session ends, after the session timeout) or reports lost leadership,
  the driver waits for whichever contender leads now, `promote()`s it (it recovers the latest
  completed checkpoint from ZooKeeper), fails over globally from it and starts a replacement
  standby. Checkpoint ids come from ZooKeeper's counter, so they keep increasing.
* Faults (`FaultPlan`): resolved once per run by `runtime.jobmaster.faults.schedule.FaultSchedule`, as on
  the simulator, so a plan means the same on both (targets from the plan's seed, `nth` counted
  over the whole run across attempts, `at_fraction` a point of the records, not of time; `at`
  is wall seconds here, virtual ones there). Every kind is implemented (`RAY_FAULT_KINDS`). The
  driver: a `TaskCrash` (after records: the actor freezes at that count, or placed `at_fraction`
  at the end of its input if sooner; at a time: the driver
  freezes it) and a `TaskCrashDuringRecovery` (once the new attempt is deployed) end with the
  driver killing the frozen actor and failing over with the simulator's failure message;
  `CoordinatorCrash` and `CoordinatorCrashBeforeNotify` kill the coordinator actor; a
  `ProcessKill` (Ray only) sends SIGKILL to an actor's process (`runtime.ray.processes`), and the
  poll that finds it dead reacts as to any death; progress points are checked every heartbeat interval. The task actors apply lost, duplicated and late
  acknowledgements, failed, torn and slow writes, `ChannelStall`, `TaskStall` (`hang`) and
  `ChannelDelay` (in the sender's `OutputChannels`), and report what they counted (heartbeats,
  `cancel`, `finish`) so the next attempt continues the count (`runtime.jobmaster.faults.counts`);
  the coordinator actor applies the faults of triggers, completions and aborts, and of its own
  storage writes (`CoordinatorStorageFailure`). `vocabulary.fault_plan` names where Ray differs.
* Parts. The driver's parts are mixed into `RayExecutor`, which holds their state and runs the
  driver loop (`_run`: faults due, watchdog, heartbeats, coordinator and service polls, failover,
  the end): `runtime.ray.task_deployment` (deploying, polling, killing and cancelling the task
  actors), `runtime.ray.coordinator_handover` (the coordinator actor and HA hand-over),
  `runtime.ray.fault_injection` (the driver's faults), `runtime.ray.failover` (the job master's
  gateway) and `runtime.ray.job_end` (the final commit, the tasks' final reports, the result).
* End. When every task reports finished, the driver waits until the final checkpoint's
  completion notifications have executed (the sinks committed; a coordinator that died since its
  last status fails over instead: the next attempt restores the final checkpoint and ends), asks every task for its keyed
  state and latencies, and reads the committed output from the committer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from checkpoint.io.ha_services import create_recovery_factory
from checkpoint.io.lease import lease_for
from checkpoint.io.storage import new_run_id
from runtime.core.graph import JobGraph
from runtime.jobmaster.committer.durable import open_committer
from runtime.jobmaster.lifecycle.progress import Phase, progress_figures, reading_phase
from runtime.jobmaster.lifecycle.watchdog import (
    DEFAULT_STALL_TIMEOUT,
    Progress,
    ProgressWatchdog,
    check_timeout,
    hung_message,
    no_progress_message,
)
from runtime.jobmaster.master import JobMaster, RunsOnJobMaster
from runtime.jobmaster.registry import check_options
from runtime.jobmaster.result import JobFailedError, JobResult
from runtime.ray.cluster import alive_nodes, ensure_ray
from runtime.ray.coordinator_handover import CoordinatorHandover
from runtime.ray.data_links import DEFAULT_DATA_TRANSPORT, ReportsBySocket, check_data_transport
from runtime.ray.errors import describe, project_error
from runtime.ray.failover import DriverFailover
from runtime.ray.fault_injection import DriverFaultInjection
from runtime.ray.job_end import JobEnd
from runtime.ray.job_services import JobServices
from runtime.ray.processes import ActorProcesses
from runtime.ray.slots import PIPELINE, Slots, assign_slots, check_slots
from runtime.ray.storage import StorageConfigError, check_storage_for_cluster, is_memory, open_storage
from runtime.ray.task_deployment import TaskDeployment
from runtime.ray.timers import WallClock
from runtime.ray.worker_pool import kill_quietly, next_epoch
from vocabulary.fault_plan import (
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
from vocabulary.handles import TaskId
from vocabulary.links import resolve_link_delays

log = logging.getLogger("barrierflow.ray")

#: the `FaultPlan` kinds this executor implements; it refuses a plan with any other
RAY_FAULT_KINDS = (TaskCrash, CoordinatorCrash, LostAcknowledgement, ChannelStall, StorageWriteFailure, TaskStall,
                   TaskCrashDuringRecovery, TornWrite, SlowStorage, LostControlMessage, DuplicatedControlMessage,
                   DelayedControlMessage, CoordinatorCrashBeforeNotify, ChannelDelay, CoordinatorStorageFailure,
                   ProcessKill)


class RayExecutor(CoordinatorHandover, DriverFaultInjection, TaskDeployment, DriverFailover, JobEnd,
                  RunsOnJobMaster):
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
            pipeline; "pipeline", the default, is one worker per pipeline: subtask i of every vertex
            in worker i; 1 is one actor per task). Calls between the tasks of one worker
            are in-process, and a checkpoint's triggers, notifications and acknowledgements go in
            one call per worker; a worker's death fails all its tasks (a global failover anyway).
        heartbeat_interval: seconds between polls of the actors (each poll is one Ray call per actor,
            ~0.25 ms of CPU to submit: at 0.02 s a 4-task job spent 250 calls/s on polling alone).
        heartbeat_timeout: seconds a task's process may leave a heartbeat unanswered before it counts
            as hung (a heartbeat does not wait for a step, however slow a record).
        stall_timeout: wall seconds without progress (no record processed, no task finished, no
            checkpoint completed, no new attempt; a step in progress counts until it has run this
            long) before the job is stuck (`runtime.jobmaster.lifecycle.watchdog`): a task that long in one
            step is hung and replaced (a failover), else the job fails; None: never.
        max_duration: wall seconds the whole job may take (None, the default: no limit; a long or
            unbounded job is not a stuck one, the watchdog tells them apart).
        committer: an earlier execution's `CollectCommitter` whose staged transactions this one may commit.
        trace_barriers: record barrier events in `JobResult.trace` (wall times: `barrier-in` per input
            channel, `snapshot`, `ack`, as on the simulator), for a barrier timeline.
        link_delays: task or vertex name -> extra seconds on everything it sends (a slow link,
            `vocabulary.links`), as the simulator's `NetworkOptions.link_delays`.
        reuse_actors: when this process stays connected to Ray after the job (it was connected
            before: the executor did not start Ray), the workers and services (coordinator
            without HA, committer, in-memory storage) of a job that ended cleanly wait idle and
            the next job runs on them, as a Flink session cluster keeps its TaskManagers (`runtime.ray.worker_pool`);
            False: this job neither takes idle actors nor leaves its own.
        data_transport: how the data calls between workers (pushed buffers, returned credits) go:
            "socket", the default, as frames on a TCP connection per sending process and receiving
            worker (`runtime.ray.data_links`: ~0.2-0.4 ms of CPU a call for both sides against
            ~1.3-1.8 ms as a Ray call, when the calls come a few hundred a second); "ray", as Ray
            actor calls. Calls between the subtasks of one worker are in-process either way.
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
        slots_per_worker: Slots = PIPELINE,
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
        reuse_actors: bool = True,
        data_transport: str = DEFAULT_DATA_TRANSPORT,
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
        self.reuse_actors = reuse_actors
        self.data_transport = check_data_transport(data_transport)
        #: the epoch of the first attempt; later attempts' are higher (`runtime.ray.worker_pool`)
        self.first_epoch = next_epoch()
        self.epoch = -1
        #: every task finished and reported: the workers may host a later job
        self._ended_cleanly = False
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
        #: tasks of workers started but not yet deployed to (their processes may still be starting)
        self._starting: set[TaskId] = set()
        #: task name -> node id of its actor (current epoch)
        self.placement: dict[str, str] = {}
        self._heartbeats: dict[TaskId, tuple[Any, float]] = {}
        self._status: dict[TaskId, dict[str, Any]] = {}
        self._coord_status: dict[str, Any] = {}
        self._coord_ref: Any = None
        self.coordinator: Any = None
        #: where the tasks send their reports with sockets (`TaskDeployment._reports_to`)
        self._reports: ReportsBySocket | None = None
        #: the coordinator actor the driver killed last for a fault (a kill is asynchronous: it may
        #: still answer; until it is replaced, its failover reads as the simulator's)
        self._killed_coordinator: Any = None
        #: the coordinator died while an attempt was being deployed (its replacement's constructor
        #: failed, say): the failover to start instead of that attempt, which never ran (`runtime.ray.failover`)
        self._failed_deploy: tuple[Any, ...] | None = None
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
            self._fail_if_storage_died()
            error = project_error(exc, self.graph.job_name)
            if isinstance(error, JobFailedError):
                self._attach_committer(error)
            raise error from exc
        except Exception as exc:  # nothing else leaves execute once the job runs: named, with its cause
            self._fail_if_storage_died()
            self.master.fail_for_good(f"job {self.graph.job_name!r} failed: {describe(exc)}", exc)
            self._raise(self.master.error)
            raise  # (unreachable: `_raise` raises)
        finally:
            try:
                self._report(Phase.STOPPING)
            except Exception as exc:  # a failing progress display must not leave the actors running
                log.warning("barrierflow ray: progress callback failed: %s", exc)
            self._cleanup(keep_actors=self.reuse_actors and self._ended_cleanly and not started_ray)
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
            checkpoint.storage.layout.StorageError: the storage URI cannot be opened.
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
            runtime.jobmaster.committer.durable.CorruptCommitterError: a committer file is damaged.
        """
        storage = None if is_memory(self.storage_uri) else open_storage(("uri", self.storage_uri), self.graph)
        return open_committer(self.master, storage, self.job_id, self._initial_committer)

    def _run(self) -> JobResult:
        nodes = alive_nodes()
        check_storage_for_cluster(self.storage_uri, len(nodes))
        self._multi_node = len(nodes) > 1
        self._pin = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.services = JobServices(self._committer_seed, is_memory(self.storage_uri), self._pin, self.graph,
                                    token=self.first_epoch, reuse=self.reuse_actors)
        for handle in self.services.handles():
            self.processes.watch(handle)
        if is_memory(self.storage_uri):
            self.storage_spec: tuple[str, Any] = ("memory", self.services.blob_store)
        else:
            self.storage_spec = ("uri", self.storage_uri)
        self.graph_ref = ray.put(self.graph)
        self._start_workers()  # their processes start while the coordinator's does
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
            failure = (self._failed_deploy or self._watch_progress(now) or self._poll_tasks(now)
                       or self._poll_coordinator() or self._poll_services(now))
            if failure is not None:
                self._failover(failure)
                continue
            if self._all_finished():
                # a fault the last statuses made due strikes before the end, as on the simulator,
                # where it fires at its record; the next poll sees what it did
                if self._inject_faults(time.time()):
                    continue
                failure = self._final_commit_failed()
                if failure is None:
                    finals, failure = self._take_finals()
                if failure is not None:  # the restored final checkpoint commits again
                    self._failover(failure)
                    continue
                self._report(Phase.COMMITTING)
                result = self._finish(finals)
                self._ended_cleanly = True
                return result
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
        """The watchdog's verdict (`runtime.jobmaster.lifecycle.watchdog`): a task in one step for
        `stall_timeout` while nothing moved is hung — its worker is replaced and the job fails over;
        stuck with no task in a step fails the job."""
        busy = {str(t): s["busy_for"] + (now - s["seen"]) for t, s in self._status.items()
                if s.get("busy_for") is not None}
        stall = self._watchdog.observe(now, self._progress(), busy)
        if stall is None:
            return None
        limit = self._watchdog.stall_timeout
        if not stall.hung:
            self._give_up(f"{no_progress_message(stall, limit)}; {self._stuck()}", None)
        for task_id in self.task_ids:
            if str(task_id) in stall.hung:
                self._kill(task_id)
        return hung_message(stall, busy, limit), None

    def _stuck(self) -> str:
        unfinished = [str(t) for t in self.task_ids if not self._status.get(t, {}).get("finished")]
        return f"unfinished tasks {unfinished}; coordinator: {self._coord_status}"

    # ------------------------------------------------------------------ watching

    def _poll_services(self, now: float) -> tuple[str, BaseException] | None:
        """A dead committer is replaced (then the job fails over); a dead committer held in memory
        or a dead in-memory checkpoint storage fails the job (`runtime.ray.job_services`)."""
        assert self.services is not None
        death = self.services.poll(now)
        return self._service_died(death) if death is not None else None

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

    def _cleanup(self, keep_actors: bool = False) -> None:
        """Kill the job's actors; `keep_actors`: leave its workers and services to a later job
        instead (`runtime.ray.worker_pool`)."""
        if not ray.is_initialized():
            return
        if keep_actors:
            self._keep_workers()
            self._keep_coordinator()
            if self.services is not None:
                self.services.keep()
        services = self.services.handles() if self.services is not None else []
        for handle in [*self.workers, self.coordinator, self.standby, *services]:
            if handle is not None:
                kill_quietly(handle)
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
            means on the simulator (`runtime.jobmaster.faults.schedule`).
        seed: recorded in the result; seeds the restart jitter (fault targets come from the plan's
            seed only, as on the simulator).
        progress: called periodically with a dict of progress figures.
        options: `RayExecutor` tuning (job_id, task_cpus, slots_per_worker, heartbeat_interval, heartbeat_timeout,
            stall_timeout, max_duration, trace_barriers, link_delays, reuse_actors, data_transport), and what `runtime.api.environment`
            passes: restore_from, allow_non_restored_state, checkpoint_listeners, committer.

    Raises:
        JobFailedError: the job failed for good (restart attempts exhausted).
        runtime.ray.storage.StorageConfigError: node-local checkpoint storage on a multi-node cluster.
        checkpoint.storage.layout.StorageError: the checkpoint storage URI cannot be reached (within
            `storage_timeout`; names the URI and the cause).
        checkpoint.io.recovery.HighAvailabilityError: ZooKeeper cannot be reached (within the
            `operation_timeout` of `set_high_availability`; names the hosts).
        runtime.ray.cluster.RayStartError: Ray could not be started or joined.
        runtime.jobmaster.registry.ExecutorOptionError: an option `RayExecutor` does not have (named).
    """
    check_options("ray", options, RayExecutor.__init__)
    return RayExecutor(graph, address=address, faults=faults, seed=seed, progress=progress, **options).run()
