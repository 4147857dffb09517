"""`SimExecutor`: runs a job graph deterministically in one process, in virtual time.

Theory of operation
-------------------
Everything that happens is an event on one heap, ordered by (virtual time, sequence number);
the sequence number makes ties deterministic, and every random choice (network delays, fault
targets) comes from one `random.Random(seed)`, so a seed replays the identical run.

* Tasks are the pure `runtime.core.task.Task`. Running a task is an event: one `step()`, whose
  records are charged `CostModel` virtual seconds; the task is busy until then.
* The network: one FIFO per channel with a seeded delay per message (delivery no earlier than
  the previous message of that channel). Data consumes credits; a consumed buffer sends its
  credit back after a network delay; a task whose outputs are out of credit stops stepping, so
  backpressure reaches the sources.
* The coordinator is the pure `CheckpointCoordinator`; this executor is its gateway (trigger
  sources, notifications) and each task's `TaskPorts` (acks, declines, snapshot writes).
  Snapshot writes take virtual time proportional to their size and go to a real
  `CheckpointStorage` (in memory unless the job names one).
* Failover: the `runtime.jobmaster.JobMaster` decides (restart strategy, restore plan, result);
  this executor is its gateway: cancelling an attempt bumps the execution *epoch* (events of the
  old epoch are dropped) and aborts pending checkpoints; deploying one creates every task from
  the checkpoint the master planned (global failover). A crashed
  coordinator is shut down (its pending checkpoints end with COORDINATOR_SHUTDOWN, its timers
  stop) and replaced by one that recovers the store.
* Faults: the `FaultPlan` (every kind is described in `runtime.jobmaster.faults`) is resolved once per run
  by a `runtime.jobmaster.fault_schedule.FaultSchedule` (the Ray executor's too, so a plan means the same on
  both), which answers where and when a fault strikes, and `runtime.jobmaster.fault_actions` says
  what a fault at a time or progress point does; this executor applies it: faults at a
  virtual time are events, at a fraction of the sources' records fire after the source step
  that reached it, crashes after records after the task's step, control messages go through `_send_control` (lost, duplicated, late), writes through
  `_write_snapshot` (failing, torn, slow), the coordinator's id-counter and metadata writes
  through a `CoordinatorWriteFaults` around the storage's blob store (failing), a stalled task's
  input, control and timers wait in `_held_for` until it resumes.
* Invariants: an `ExecutionObserver` (`runtime.jobmaster.observer`; `env.execute(...,
  invariants=True)` passes `runtime.verify.invariants.InvariantChecker`) is told what each event
  did and checks it after every event.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.handles import TaskAcknowledgement, TaskId
from checkpoint.io.cleanup import discard_orphans
from checkpoint.io.lease import lease_for
from checkpoint.io.snapshot_writer import SnapshotWriter
from checkpoint.io.storage import StorageError, storage_from_uri
from checkpoint.io.store import new_run_id
from checkpoint.options import DEFAULT_STORAGE_TIMEOUT
from checkpoint.reasons import CheckpointFailureReason
from runtime.core.graph import JobGraph
from runtime.core.links import resolve_link_delays
from runtime.core.messages import BufferOrEvent, CheckpointBarrier, CheckpointOptions
from runtime.core.subtask_checkpoint import TaskSnapshot
from runtime.core.task import Task
from runtime.core.task_metrics import StepTimes
from runtime.jobmaster.completions import CompletionNotices
from runtime.jobmaster.coordinator_state import coordinator_state, promoted
from runtime.jobmaster.durable_committer import open_committer
from runtime.jobmaster.fault_actions import coordinator_crash, crash_after_records, fire_fault, injected_crash
from runtime.jobmaster.fault_schedule import FaultSchedule
from runtime.jobmaster.fault_storage import CoordinatorWriteFaults, write_torn
from runtime.jobmaster.faults import Fault, FaultPlan, ProcessKill, check_supported
from runtime.jobmaster.master import JobMaster, RunsOnJobMaster, TaskFinal
from runtime.jobmaster.observer import ExecutionObserver
from runtime.jobmaster.progress import progress_figures, reading_phase
from runtime.jobmaster.registry import check_options
from runtime.jobmaster.restore import restore_latest_valid
from runtime.jobmaster.result import (
    CollectCommitter,
    GlobalCommitterView,
    JobMetrics,
    JobResult,
)
from runtime.sim.costs import CpuCores, StepCost, quantile
from runtime.sim.high_availability import SimHighAvailability
from runtime.sim.saturation import SaturationMonitor, sample_of

log = logging.getLogger("barrierflow.sim")

#: the `FaultPlan` kinds this executor implements: all but `ProcessKill` (it has no processes)
SIM_FAULT_KINDS = tuple(kind for kind in get_args(Fault) if kind is not ProcessKill)

#: events between progress reports (a busy job runs ~2,000 events per wall second)
PROGRESS_EVERY_EVENTS = 200


@dataclass(frozen=True)
class NetworkOptions:
    """Virtual network and storage timing (seconds)."""

    #: per-message delay, drawn uniformly per message (FIFO per channel is kept regardless)
    delay_min: float = 0.0002
    delay_max: float = 0.002
    #: delay of control messages (triggers, acks, notifications)
    control_delay: float = 0.0005
    #: snapshot write: fixed latency plus size / bandwidth
    write_latency: float = 0.002
    write_bandwidth: float = 200e6
    #: None: every write takes `write_latency`; else each write's latency is drawn uniformly from
    #: [`write_latency`, `write_latency_max`] (a real store's spread: a checkpoint waits for its
    #: slowest subtask, so the spread lengthens it beyond the median write)
    write_latency_max: float | None = None
    #: delay of an acknowledgement reaching the coordinator (None: `control_delay`)
    ack_delay: float | None = None
    #: when given (ascending, the 0th to 100th percentiles at equal steps), each acknowledgement's
    #: delay is drawn from this distribution (inverse CDF, linear between points) instead of
    #: `ack_delay`: a real control path's long tail, which a checkpoint waiting for its slowest
    #: acknowledgement feels in its duration (p50 and p99)
    ack_delay_quantiles: tuple[float, ...] = ()
    #: the same for a trigger reaching a source (instead of `control_delay`): sources triggered
    #: at different times send barriers that arrive apart, which an aligned task waits out
    trigger_delay_quantiles: tuple[float, ...] = ()
    #: task name ("vertex[i]") or vertex name -> extra seconds on everything it sends on its output
    #: channels (a slow link, `runtime.core.links`)
    link_delays: dict[str, float] = field(default_factory=dict)


def times_of(rates: tuple[float, float, float, float], records: int) -> tuple[float, float]:
    """(CPU seconds, off-CPU seconds) of a step that handled `records`, from a task's
    `CostModel.step_rates`."""
    per_step, per_record, wait, factor = rates
    return (per_step + records * per_record) * factor, records * wait * factor


@dataclass(frozen=True)
class CostModel:
    """Virtual CPU time a task spends per step (the terms `runtime.calibration` fits)."""

    per_record: float = 2e-6
    per_step: float = 2e-5
    #: at most this many records of an input buffer per step (`Task.records_per_step`; None =
    #: whole buffers): a buffer processed in parts, which an unaligned barrier can overtake
    records_per_step: int | None = None
    #: task name ("vertex[i]") or vertex name -> slowdown factor (backpressure scenarios)
    slow_tasks: dict[str, float] = field(default_factory=dict)
    #: task or vertex name -> slowdown of the per-record cost only: an expensive user function,
    #: while the per-step (per-buffer) overhead stays that of any task
    slow_records: dict[str, float] = field(default_factory=dict)
    #: task or vertex name -> its own step cost (the task's entry wins over its vertex's), in
    #: place of `per_step`/`per_record`
    task_costs: dict[str, StepCost] = field(default_factory=dict)
    #: cores the tasks share (`runtime.sim.costs.CpuCores`); None: a core per task
    cores: int | None = None
    #: CPU a task spends on a synchronous snapshot: fixed plus per byte of the snapshot
    sync_latency: float = 0.0
    sync_per_byte: float = 0.0
    #: CPU the write of a snapshot spends (serialising and writing it: fixed plus per byte),
    #: charged to its task as a synchronous snapshot's is: a Ray writer thread takes the GIL from
    #: the task's work thread; the write's duration is `NetworkOptions`'
    write_cpu: float = 0.0
    write_cpu_per_byte: float = 0.0
    #: CPU seconds the control path (on Ray: the coordinator and committer processes) spends per
    #: completed checkpoint, on the shared `cores` (without them it has a core of its own: no
    #: effect): charged when the checkpoint completes, so the tasks wait for it as on a real
    #: machine where it takes a core from the job
    checkpoint_cpu: float = 0.0
    #: seconds: a rate-limited source wakes at most once per this long (from the step that armed
    #: the wake-up), reading every record due by then; returned credits still run it at once (the
    #: Ray executor's sources wake at most once per buffer timeout: a record waits for the next
    #: wake-up, ~half of it on average); 0: it steps whenever a record is due
    source_pacing: float = 0.0

    def factor(self, task: TaskId) -> float:
        return self.slow_tasks.get(str(task), self.slow_tasks.get(task.vertex, 1.0))

    def step_rates(self, task: TaskId) -> tuple[float, float, float, float]:
        """(seconds per step, CPU seconds per record, off-CPU seconds per record, slowdown
        factor) of `task`'s steps (`times_of` turns them into a step's times)."""
        own = self.task_costs.get(str(task)) or self.task_costs.get(task.vertex)
        per_step, per_record, wait = (own.per_step, own.per_record, own.wait_per_record) if own is not None \
            else (self.per_step, self.per_record, 0.0)
        per_record *= self.slow_records.get(str(task), self.slow_records.get(task.vertex, 1.0))
        return per_step, per_record, wait, self.factor(task)

    def step_times(self, task: TaskId, records: int) -> tuple[float, float]:
        """(CPU seconds, off-CPU seconds) of a step of `task` that handled `records`: the CPU
        occupies a core, the rest (sleeps, I/O) keeps only the task busy."""
        return times_of(self.step_rates(task), records)

    def step_cost(self, task: TaskId, records: int) -> float:
        """Virtual seconds of a step of `task` that handled `records`."""
        return sum(self.step_times(task, records))

    def sync_cost(self, size: int) -> float:
        """CPU seconds of a synchronous snapshot of `size` bytes."""
        return self.sync_latency + size * self.sync_per_byte

    def write_cost(self, size: int) -> float:
        """CPU seconds of writing a snapshot of `size` bytes."""
        return self.write_cpu + size * self.write_cpu_per_byte


class _Ports:
    """`TaskPorts` of one task in one epoch."""

    def __init__(self, sim: SimExecutor, task_id: TaskId, epoch: int) -> None:
        self.sim, self.task_id, self.epoch = sim, task_id, epoch

    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        self.sim._on_ack(self.epoch, ack)

    def decline(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.sim._control(self.epoch, lambda: self.sim.coordinator.receive_decline(task_id, checkpoint_id, reason))

    def source_finished(self, task_id: TaskId) -> None:
        self.sim._control(self.epoch, lambda: self.sim.coordinator.source_finished(task_id))

    def write_snapshot(self, snapshot: TaskSnapshot) -> None:
        self.sim._write_snapshot(self.epoch, snapshot)

    def buffer_consumed(self, task_id: TaskId, input_channel: int) -> None:
        self.sim._return_credit(self.epoch, task_id, input_channel)

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        self.sim._completion_learned(task_id, checkpoint_id)

    def wake(self, task_id: TaskId) -> None:
        if self.epoch == self.sim.epoch:
            self.sim._wake(task_id)


class _ControlWork:
    """CPU work of the control path waiting for a shared core (hashed by identity)."""

    __slots__ = ("cpu",)

    def __init__(self, cpu: float) -> None:
        self.cpu = cpu


class _SimClock:
    def __init__(self, sim: SimExecutor) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.now


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _SimTimers:
    """Timers of the coordinator (`task_id` None: survive failover) or of one task (bound to the
    epoch; they wait while the task is stalled)."""

    def __init__(self, sim: SimExecutor, epoch_bound: bool, task_id: TaskId | None = None,
                 kind: str = "timer") -> None:
        self.sim, self.epoch_bound, self.task_id, self.kind = sim, epoch_bound, task_id, kind

    def schedule(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer()
        epoch = self.sim.epoch if self.epoch_bound else None
        task_id = self.task_id

        def fire() -> None:
            if timer.cancelled or (task_id is not None and self.sim._held(task_id, fire)):
                return
            callback()

        self.sim._at(self.sim.now + max(0.0, delay), fire, epoch, self.kind)
        return timer


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
            graph, executor="sim", gateway=self, clock=_SimClock(self),
            timers=_SimTimers(self, epoch_bound=False, kind="restart"), seed=seed, faults=faults,
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
        #: each task's `CostModel.step_rates`, asked once per run (a step asks at every run)
        self._step_rates: dict[TaskId, tuple[float, float, float, float]] = {}
        self.job_id = job_id or graph.job_name
        self.tracing = trace
        #: record only the barrier timeline (barrier-in / snapshot / ack events) in `trace`
        self.trace_barriers = trace or trace_barriers
        self.max_time = max_time
        self.max_events = max_events
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
        self._sink_committer: Any = self.committer
        if isinstance(invariants, bool):  # the checker lives above the simulator: the API builds it
            if invariants:
                raise TypeError("SimExecutor(invariants=True): pass the checker itself "
                                "(runtime.verify.invariants.InvariantChecker()); env.execute(..., invariants=True) builds it")
            invariants = None
        #: checks invariants after every event (`runtime.jobmaster.observer`); None: off
        self.invariants = invariants
        if self.invariants is not None:
            self.invariants.bind(self)  # before anything writes or deletes through the storage
        #: `CoordinatorStorageFailure`: the coordinator's id-counter and metadata writes (armed by `run`)
        self._coordinator_writes = CoordinatorWriteFaults.install(self.storage, self.job_id)
        self._coordinator_writes.on_fault = lambda what, path: self._trace("fault", "CoordinatorStorageFailure",
                                                                           what, path)
        self.metrics = JobMetrics()

        self.task_ids = [
            TaskId(v.name, s) for v in graph.vertices for s in range(v.parallelism)
        ]
        self.source_ids = [t for t in self.task_ids if graph.vertex(t.vertex).source is not None]
        #: the sources that read at a rate (`CostModel.source_pacing` paces them)
        self._rate_limited = {t for t in self.source_ids if graph.vertex(t.vertex).is_rate_limited}
        self._link_delays = resolve_link_delays(self.network.link_delays, self.task_ids)
        self.tasks: dict[TaskId, Task] = {}
        self._busy_until: dict[TaskId, float] = {}
        #: the shared cores (None: a core per task) and CPU a task owes for snapshots taken
        #: outside its steps (charged with its next step)
        self._cores = CpuCores(self.costs.cores) if self.costs.cores is not None else None
        self._owed_cpu: dict[TaskId, float] = {}
        self._scheduled: set[TaskId] = set()
        #: when each scheduled run is due (a timer callback that came due runs the task earlier)
        self._run_at: dict[TaskId, float] = {}
        self._flush_scheduled: set[TaskId] = set()
        #: paced sources with a wake-up due (`CostModel.source_pacing`)
        self._wake_scheduled: set[TaskId] = set()
        self._routes: dict[tuple[TaskId, int], tuple[TaskId, int]] = {}
        self._reverse: dict[tuple[TaskId, int], tuple[TaskId, int]] = {}
        self._last_delivery: dict[tuple[TaskId, int], float] = {}
        self._stalled_until: dict[TaskId, float] = {}
        #: stalled tasks (`TaskStall`): what reached them meanwhile, applied in order when they resume
        self._held_for: dict[TaskId, list[Callable[[], None]]] = {}
        #: a coordinator that crashes at the end of this instant (`CoordinatorCrashBeforeNotify`)
        self._doomed: CheckpointCoordinator | None = None
        #: the run's `FaultSchedule` (one for the whole run, across attempts)
        self.schedule: FaultSchedule | None = None
        self._records: dict[TaskId, int] = {}

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
        """The store and id counter of a new coordinator (`runtime.jobmaster.coordinator_state`):
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

    # ------------------------------------------------------------------ scheduling

    def _at(self, when: float, fn: Callable[[], None], epoch: int | None, kind: str) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), fn, epoch, kind))

    def _control(self, epoch: int | None, fn: Callable[[], None]) -> None:
        self._at(self.now + self.network.control_delay, fn, epoch, "control")

    def _schedule_run(self, task_id: TaskId, when: float | None = None) -> None:
        if task_id in self._scheduled:
            return
        self._scheduled.add(task_id)
        at = max(when if when is not None else self.now, self._busy_until.get(task_id, 0.0))
        self._run_at[task_id] = at
        self._at(at, lambda: self._run_task(task_id), self.epoch, "run")

    def _wake(self, task_id: TaskId) -> None:
        """A callback of the task's timers came due: run it now, even if a run is scheduled for
        later (a rate-limited source waiting for its next record; that run still happens)."""
        if task_id in self._scheduled and self._run_at.get(task_id, self.now) > self.now:
            at = max(self.now, self._busy_until.get(task_id, 0.0))
            self._at(at, lambda: self._run_task(task_id), self.epoch, "run")
            return
        self._schedule_run(task_id)

    # ------------------------------------------------------------------ setup

    def _new_coordinator(self) -> CheckpointCoordinator:
        #: what the coordinator tells tasks by a call of their own, what it keeps for triggers
        self._notices = CompletionNotices(self.graph)
        config = self.graph.checkpoint_config
        return CheckpointCoordinator(
            self.job_id,
            config,
            clock=_SimClock(self),
            timers=_SimTimers(self, epoch_bound=False),
            gateway=self,
            store=self.store,
            id_counter=self.id_counter,
            source_tasks=list(self.source_ids),
            all_tasks=list(self.task_ids),
        )

    def deploy_attempt(self, attempt: int) -> None:
        """`JobMasterGateway`: deploy attempt `attempt` (a restart, the first one included) and
        let the coordinator trigger."""
        if attempt > 0:
            self.coordinator.restart(list(self.source_ids), list(self.task_ids))
        epoch = self.epoch
        self._deploy()
        # (a task failing while it restores fails this attempt over at once: a new epoch)
        if self.checkpointing and self.master.error is None and self.epoch == epoch:
            self.coordinator.start()

    def cancel_attempt(self, attempt: int, reason: CheckpointFailureReason) -> None:
        """`JobMasterGateway`: the running attempt's events are dropped from now on."""
        self._trace("failover", self.failures[-1])
        self.coordinator.stop()
        # notifications of these aborts belong to the dying execution: they are dropped with it
        self.coordinator.abort_all_pending(reason)
        self.epoch += 1
        self.tasks = {}  # nothing of the failed execution may run, send or be delivered to again

    def _deploy(self) -> None:
        """Create every task of the current epoch, restored from the latest completed checkpoint
        (a task failing meanwhile — a user's `open`, a restored sink's commit — fails it over)."""
        # newest retained checkpoint that verifies (corrupt ones are skipped, with a warning)
        committed = self.committer.latest_committed()
        plan = self.master.plan_attempt(lambda: restore_latest_valid(self.graph, self.store, self.storage, committed),
                                        committed, self.id_counter.get())
        if plan is None:
            return
        latest, restores = plan.checkpoint, plan.restores
        if self.failures:  # what the failed attempt left (its events are dropped: nothing still writes)
            self._discard_orphans()
        self.writer.reset()  # a new execution attempt: tasks snapshot from scratch
        self.committer.abort_lingering(plan.abort_after, plan.abort_before)
        if self.invariants is not None:
            self.invariants.deploying()
        self.coordinator.restored_from(latest)
        self._notices.clear()
        epoch = self.epoch
        self.tasks = {}
        self._busy_until.clear()
        self._owed_cpu.clear()
        if self._cores is not None:
            self._cores.reset()
        self._scheduled.clear()
        self._flush_scheduled.clear()
        self._wake_scheduled.clear()
        self._last_delivery.clear()
        self._held_for.clear()  # a stalled task of the failed attempt is gone with it
        committer = self.invariants.committer(self.committer) if self.invariants is not None else self.committer
        self._sink_committer = committer
        committer = GlobalCommitterView(committer)  # `commit_checkpoint` commits each checkpoint
        for task_id in self.task_ids:
            vertex = self.graph.vertex(task_id.vertex)
            try:
                self.tasks[task_id] = Task(
                    task_id, self.graph, vertex,
                    clock=_SimClock(self), timers=_SimTimers(self, epoch_bound=True, task_id=task_id),
                    ports=_Ports(self, task_id, epoch), committer=committer,
                    restore=restores.get(task_id),
                )
            except Exception as exc:  # a user's `open`, a restored sink's commit (its storage full...)
                self.master.task_failed(task_id, exc)
                return
            if vertex.source is None:  # (`CostModel.records_per_step` is of input buffers)
                self.tasks[task_id].records_per_step = self.costs.records_per_step
        self._build_routes()
        if self.invariants is not None:
            self.invariants.deployed()
        for task_id in self.task_ids:
            self._send_outputs(task_id)  # restored output channel state goes first
            self._schedule_run(task_id)
        self._trace("deploy", epoch, latest.checkpoint_id if latest else None)

    def _build_routes(self) -> None:
        self._routes.clear()
        self._reverse.clear()
        for route in self.graph.channel_routes():
            self._routes[(route.sender, route.output_channel)] = (route.receiver, route.input_channel)
            self._reverse[(route.receiver, route.input_channel)] = (route.sender, route.output_channel)

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
            when, _, fn, epoch, kind = heapq.heappop(self._heap)
            if epoch is not None and epoch != self.epoch:
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
            stuck = [str(t) for t, task in self.tasks.items() if not task.is_finished]
            self.master.fail_for_good(f"job stalled with unfinished tasks {stuck} (seed={self.seed})", None)
        self.coordinator.stop()
        if invariants is not None:
            invariants.finished(self.error is None)
        if self.error is not None:
            raise self.error
        self._discard_orphans(finished=True)
        return self._result()

    def _watch_saturation(self) -> None:
        """Sample the run for the saturation monitor; a run that cannot keep up fails for good."""
        error = self._saturation.observe(sample_of(self))  # type: ignore[union-attr]
        if error is not None:
            self.master.fail_for_good(f"job {self.graph.job_name!r} {error}", error)

    def control_waiting(self) -> int:
        """Control-path CPU slices waiting for a shared core now."""
        cores = self._cores
        return sum(isinstance(w, _ControlWork) for w in cores.queued()) if cores is not None else 0

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

    def _trace(self, *event: Any) -> None:
        if self.tracing:
            self.trace.append((round(self.now, 9), *event))

    def _trace_barrier(self, *event: Any) -> None:
        if self.trace_barriers:
            self.trace.append((round(self.now, 9), *event))

    # ------------------------------------------------------------------ tasks

    def _run_task(self, task_id: TaskId) -> None:
        self._scheduled.discard(task_id)
        task = self.tasks.get(task_id)
        if task is None:
            return
        busy = self._busy_until.get(task_id, 0.0)
        if busy > self.now:
            self._schedule_run(task_id, busy)
            return
        cores = self._cores
        if cores is not None and not cores.free(self.now):
            cores.wait(task_id)  # ready, no core: `_core_freed` runs it (no other run meanwhile)
            self._scheduled.add(task_id)
            return
        try:
            handled = task.step()
        except Exception as exc:  # a user function or protocol error: the task fails
            self.master.task_failed(task_id, exc)
            return
        self._send_outputs(task_id)
        rates = self._step_rates.get(task_id)
        if rates is None:
            rates = self._step_rates[task_id] = self.costs.step_rates(task_id)
        cpu, wait = times_of(rates, handled)
        self._step_times(task_id).add(handled, cpu, cpu + wait)
        cpu += self._owed_cpu.pop(task_id, 0.0)
        if cores is not None:
            self._at(cores.occupy(self.now, cpu), self._core_freed, self.epoch, "cpu")
        self._busy_until[task_id] = self.now + cpu + wait
        if handled:
            self.metrics.records_in += handled if task.is_source else 0
            self._records[task_id] = self._records.get(task_id, 0) + handled
            if self._check_crash(task_id, task.input_ended):
                return
            if task.is_source:
                self._check_progress()
        elif task.input_ended and self._check_crash(task_id, input_ended=True):
            return
        if task.has_work():
            if self.costs.source_pacing > 0 and task_id in self._rate_limited:
                self._schedule_wake(task, task_id)
            else:
                ready = task.next_ready_time() if (task.is_source and handled == 0) else None
                self._schedule_run(task_id, ready)
        if task.pending_output() and task_id not in self._flush_scheduled:
            self._flush_scheduled.add(task_id)
            self._at(self.now + self.graph.buffer_timeout, lambda: self._flush(task_id), self.epoch, "flush")
        if task.is_finished:
            self._check_done()

    def _into_task(self, task_id: TaskId, call: Callable[[], Any]) -> bool:
        """`call()`, a call into task `task_id` (user functions and sinks run in it: a flush, a
        trigger's snapshot, a notification); an exception fails the task. Whether it returned."""
        try:
            call()
        except Exception as exc:
            self.master.task_failed(task_id, exc)
            return False
        return True

    def _schedule_wake(self, task: Task, task_id: TaskId) -> None:
        """A paced source (`CostModel.source_pacing`, as on Ray): a wake-up when its next record
        is due, at the earliest `source_pacing` after this step began (with the flush timer the
        step set: the records read then go with the buffer it flushes). Returned credits still run
        it at once, as mail drives a Ray task whatever its wake-up timer."""
        if task_id in self._wake_scheduled:
            return
        self._wake_scheduled.add(task_id)
        ready = task.next_ready_time()
        at = max(ready if ready is not None else self.now, self.now + self.costs.source_pacing)

        def wake() -> None:
            self._wake_scheduled.discard(task_id)
            self._schedule_run(task_id)

        self._at(at, wake, self.epoch, "wake")

    def _step_times(self, task_id: TaskId) -> StepTimes:
        name = str(task_id)
        times = self.metrics.tasks.get(name)
        if times is None:
            times = self.metrics.tasks[name] = StepTimes()
        return times

    def _core_freed(self) -> None:
        """A core freed: the tasks that waited longest take the free cores."""
        cores = self._cores
        while cores is not None and cores.free(self.now):
            task_id = cores.next_waiting()
            if task_id is None:
                return
            if isinstance(task_id, _ControlWork):
                self._at(cores.occupy(self.now, task_id.cpu), self._core_freed, self.epoch, "cpu")
            else:
                self._run_task(task_id)  # type: ignore[arg-type]

    def _flush(self, task_id: TaskId) -> None:
        self._flush_scheduled.discard(task_id)
        task = self.tasks.get(task_id)
        if task is not None and self._into_task(task_id, task.flush):
            self._send_outputs(task_id)

    def _send_outputs(self, task_id: TaskId) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            return
        invariants = self.invariants
        spikes = self.schedule is not None and self.schedule.delays_channels
        link_delay = self._link_delays.get(task_id, 0.0)
        for out_index, payload in task.drain_sendable():
            receiver, in_ch = self._routes[(task_id, out_index)]
            key = (task_id, out_index)
            delay = self.rng.uniform(self.network.delay_min, self.network.delay_max) + link_delay
            if spikes:
                extra = self.schedule.channel_delay(receiver, in_ch, self.now)  # type: ignore[union-attr]
                if extra:
                    self._trace("fault", "ChannelDelay", str(receiver), in_ch, extra)
                    delay += extra
            when = max(self.now + delay, self._last_delivery.get(key, 0.0),
                       self._stalled_until.get(receiver, 0.0))
            self._last_delivery[key] = when
            if invariants is not None:
                invariants.on_send(task_id, out_index, payload)
            self._at(when, lambda r=receiver, c=in_ch, p=payload: self._deliver(r, c, p), self.epoch, "net")

    def _deliver(self, receiver: TaskId, channel: int, payload: Any) -> None:
        task = self.tasks.get(receiver)
        if task is None:
            return
        if self._held_for and self._held(receiver, lambda: self._deliver(receiver, channel, payload)):
            return
        if self.invariants is not None:
            self.invariants.on_deliver(receiver, channel, payload)
        if isinstance(payload, CheckpointBarrier):
            self._trace_barrier("barrier-in", payload.id, str(receiver), channel)
        try:
            task.push(BufferOrEvent(channel, payload))
        except Exception as exc:
            self.master.task_failed(receiver, exc)
            return
        self._send_outputs(receiver)  # an overtaking (unaligned) barrier may have been forwarded
        self._schedule_run(receiver)

    def _return_credit(self, epoch: int, receiver: TaskId, in_ch: int) -> None:
        sender, out_index = self._reverse[(receiver, in_ch)]
        receiving = self.tasks.get(receiver)
        # buffer debloating: the credit carries the buffer size the receiver asks for
        buffer_size = receiving.announced_buffer_size if receiving is not None else None
        if self.invariants is not None:
            self.invariants.on_credit_returned(sender, out_index)

        def give() -> None:
            task = self.tasks.get(sender)
            if task is None:
                return
            task.add_credit(out_index, buffer_size)
            if self.invariants is not None:
                self.invariants.on_credit_given(sender, out_index)
            self._send_outputs(sender)
            self._schedule_run(sender)

        self._at(self.now + self.rng.uniform(self.network.delay_min, self.network.delay_max), give, epoch, "credit")

    def _check_done(self) -> None:
        if self.tasks and all(t.is_finished for t in self.tasks.values()):
            self.master.job_finished()
            self._trace("finished")

    # ------------------------------------------------------------------ checkpoint plumbing

    def _send_control(self, kind: str, task_id: TaskId, checkpoint_id: int, epoch: int | None,
                      fn: Callable[[], None]) -> None:
        """A control message of `kind` to `task_id` ("ack": from it), as faults let it go."""
        schedule = self.schedule
        effect = schedule.control(kind, task_id) if schedule is not None else None
        if kind == "ack" and self.network.ack_delay_quantiles:  # drawn only then: other runs replay as before
            delay = quantile(self.network.ack_delay_quantiles, self.rng.random())
        elif kind == "trigger" and self.network.trigger_delay_quantiles:
            delay = quantile(self.network.trigger_delay_quantiles, self.rng.random())
        elif kind == "ack" and self.network.ack_delay is not None:
            delay = self.network.ack_delay
        else:
            delay = self.network.control_delay
        if effect is None or not effect.faults:
            self._at(self.now + delay, fn, epoch, "control")
            return
        for fault in effect.faults:
            if kind == "ack" and effect.lost:
                self._trace("ack-lost", checkpoint_id, str(task_id))
            else:
                self._trace("fault", type(fault).__name__, kind, checkpoint_id, str(task_id))
        if effect.lost:
            return
        when = self.now + delay + effect.delay
        for copy in range(effect.copies):
            self._at(when + copy * self.network.control_delay, fn, epoch, "control")

    def trigger_source(self, task_id: TaskId, checkpoint_id: int, timestamp: float,
                       unaligned: bool = False, alignment_timeout: float | None = None,
                       forced_aligned: bool = False) -> None:
        if self._doomed is self.coordinator:
            return  # it is crashing: nothing more leaves it
        options = CheckpointOptions.of_trigger(unaligned, alignment_timeout, forced_aligned)
        if self.invariants is not None:
            self.invariants.on_trigger(checkpoint_id)
        completed = self._notices.take(task_id)

        def trigger() -> None:
            task = self.tasks.get(task_id)
            if task is None or self._held(task_id, trigger):
                return
            if not self._into_task(task_id, lambda: task.trigger_source_checkpoint(checkpoint_id, timestamp, options,
                                                                                  completed)):
                return
            if self.invariants is not None:
                self.invariants.on_source_triggered(task_id, checkpoint_id)
            self._send_outputs(task_id)
            self._schedule_run(task_id)

        self._trace("trigger", checkpoint_id, str(task_id))
        self._send_control("trigger", task_id, checkpoint_id, self.epoch, trigger)

    def commit_checkpoint(self, checkpoint_id: int) -> None:
        coordinator = self.coordinator
        if self._doomed is coordinator:
            return
        if self.schedule is not None and self.schedule.completion_announced(checkpoint_id):
            # the checkpoint is durable; the coordinator dies before committing or telling anyone
            self._doomed = coordinator
            self._trace("fault", "CoordinatorCrashBeforeNotify", checkpoint_id)
            self._at(self.now, self._crash_coordinator, None, "fault")
            return
        # the global committer, for every sink (a message, as on Ray; it dies with a failed-over epoch)
        committer = self._sink_committer

        def commit() -> None:
            try:
                committer.commit_checkpoint(checkpoint_id)
            except Exception as exc:  # the sinks' external system failed (a full disk, a blocked path):
                # fail over; the restored sinks commit the checkpoint's transactions again
                self.master.failover(f"committing checkpoint {checkpoint_id} failed: {exc}", exc)

        self._control(self.epoch, commit)

    def notify_complete(self, task_id: TaskId, checkpoint_id: int) -> None:
        coordinator = self.coordinator
        if self._doomed is coordinator:
            return
        final = coordinator.is_final_checkpoint_complete and coordinator.final_checkpoint_id == checkpoint_id
        if not self._notices.is_direct(task_id, final):
            self._owe_completion(task_id, checkpoint_id)
            return

        def notify() -> None:
            task = self.tasks.get(task_id)
            if task is None or self._held(task_id, notify):
                return
            if not self._into_task(task_id, lambda: task.notify_checkpoint_complete(checkpoint_id, final=final)):
                return
            self.writer.notify_checkpoint_complete(task_id, checkpoint_id)
            if self.invariants is not None:
                self.invariants.on_notified(task_id, checkpoint_id, completed=True)
            self._send_outputs(task_id)
            self._schedule_run(task_id)
            if task.is_finished:
                self._check_done()

        self._send_control("complete", task_id, checkpoint_id, self.epoch, notify)

    def _owe_completion(self, task_id: TaskId, checkpoint_id: int) -> None:
        """A completion `task_id` gets no call for (`CompletionNotices`): kept for its next
        trigger as its "complete" control message's faults let it (lost: not kept; delayed: kept
        late), as on Ray; a task that is no source takes it from a barrier."""
        schedule = self.schedule
        effect = schedule.control("complete", task_id) if schedule is not None else None
        if effect is not None:
            for fault in effect.faults:
                self._trace("fault", type(fault).__name__, "complete", checkpoint_id, str(task_id))
            if effect.lost:
                return
            if effect.delay > 0:
                self._at(self.now + effect.delay, lambda: self._notices.owe(task_id, checkpoint_id),
                         self.epoch, "control")
                return
        self._notices.owe(task_id, checkpoint_id)

    def _completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        """`task_id` learned of completion `checkpoint_id` from a barrier or its trigger."""
        self.writer.notify_checkpoint_complete(task_id, checkpoint_id)
        if self.invariants is not None:
            self.invariants.on_notified(task_id, checkpoint_id, completed=True)

    def notify_aborted(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        if self._doomed is self.coordinator:
            return

        def notify() -> None:
            task = self.tasks.get(task_id)
            if task is not None and not self._held(task_id, notify):
                if not self._into_task(task_id, lambda: task.notify_checkpoint_aborted(checkpoint_id, reason)):
                    return
                self.writer.notify_checkpoint_aborted(task_id, checkpoint_id)
                if self.invariants is not None:
                    self.invariants.on_notified(task_id, checkpoint_id, completed=False)
                self._schedule_run(task_id)

        self._send_control("abort", task_id, checkpoint_id, self.epoch, notify)

    def fail_job(self, error: Exception) -> None:
        self.master.failover(f"checkpoint failures: {error}", error)

    def on_checkpoint_completed(self, completed: Any) -> None:
        if self._doomed is self.coordinator:
            return
        self._trace("completed", completed.checkpoint_id)
        self._charge_checkpoint_cpu()
        if self.invariants is not None:
            self.invariants.on_completed(completed)
        self.master.checkpoint_completed(completed, self.storage)

    def _charge_checkpoint_cpu(self) -> None:
        """The control path's CPU for a completed checkpoint (`CostModel.checkpoint_cpu`): it
        takes a core when one is free, else queues with the ready tasks (FIFO, as they do: a
        control path busier than its share cannot starve the job)."""
        cpu = self.costs.checkpoint_cpu
        if cpu <= 0:
            return
        self.metrics.service_cpu["control"] = self.metrics.service_cpu.get("control", 0.0) + cpu
        cores = self._cores
        if cores is None:
            return
        if cores.free(self.now):
            self._at(cores.occupy(self.now, cpu), self._core_freed, self.epoch, "cpu")
        else:
            cores.wait(_ControlWork(cpu))

    def _on_ack(self, epoch: int, ack: TaskAcknowledgement) -> None:
        self._trace_barrier("ack", ack.checkpoint_id, str(ack.task_id))
        self._send_control("ack", ack.task_id, ack.checkpoint_id, epoch,
                           lambda: self.coordinator.receive_acknowledge(ack))

    def _write_snapshot(self, epoch: int, snapshot: TaskSnapshot) -> None:
        task_id = snapshot.task_id
        self._trace_barrier("snapshot", snapshot.checkpoint_id, str(task_id), snapshot.sync_time)
        effect = self.schedule.write(task_id) if self.schedule is not None else None
        files = self.writer.prepare(snapshot)
        size = sum(len(data) for data in files.values())
        latency = self.network.write_latency
        if self.network.write_latency_max is not None:  # drawn only then: other runs replay as before
            latency = self.rng.uniform(latency, self.network.write_latency_max)
        duration = latency + size / self.network.write_bandwidth
        sync, cpu = self.costs.sync_cost(size), self.costs.write_cost(size)
        if sync + cpu > 0:  # the task's CPU (charged with its step); the write starts after the sync part
            self._owed_cpu[task_id] = self._owed_cpu.get(task_id, 0.0) + sync + cpu
        if self.schedule is not None:
            slower = self.schedule.write_slowdown(self.now)
            if slower > 1.0:
                self._trace("fault", "SlowStorage", snapshot.checkpoint_id, str(task_id), slower)
                duration *= slower

        def done() -> None:
            task = self.tasks.get(task_id)
            if task is None or self._held(task_id, done):
                return
            if task.is_cancelled(snapshot.checkpoint_id):
                return  # cancelled in flight: nothing is written
            try:
                if effect is not None and effect.fail:
                    raise StorageError(f"injected storage failure writing {task_id} chk-{snapshot.checkpoint_id}")
                if effect is not None and effect.tear is not None:
                    handles = self._write_torn(snapshot, files, effect.tear)
                else:
                    handles = self.writer.write(snapshot, files)
            except StorageError as exc:
                task.on_snapshot_failed(snapshot.checkpoint_id, exc)
                return
            if not task.on_snapshot_written(snapshot.checkpoint_id, handles, duration, cpu):
                self.writer.discard(handles)

        self._at(self.now + sync + duration, done, epoch, "write")

    def _write_torn(self, snapshot: TaskSnapshot, files: dict[str, bytes], tear: Any) -> Any:
        """Write `snapshot` with its first file torn (`TornWrite`): the write reports success."""
        handles, torn = write_torn(self.storage, tear.keep, tear.garble, lambda: self.writer.write(snapshot, files))
        self._trace("fault", "TornWrite", snapshot.checkpoint_id, str(snapshot.task_id), torn)
        return handles

    # ------------------------------------------------------------------ faults and failover

    def _resolve_faults(self) -> None:
        """Resolve the plan once for the run (`runtime.jobmaster.fault_schedule`); schedule the faults placed
        at a virtual time, and any due before the first record."""
        self.schedule = schedule = self.master.schedule
        self._coordinator_writes.schedule = schedule
        for at, index, _ in schedule.timed():
            self._at(at, lambda i=index: self._fire(i), None, "fault")

    def _fire(self, index: int) -> None:
        """A fault placed at a time or at the sources' progress starts now."""
        fire_fault(self.master.schedule, index, self.graph, self)

    def _check_progress(self) -> None:
        """After a source step: fire the faults placed at this point of the sources' progress (not
        within the step: at the same virtual instant, as an event)."""
        schedule = self.schedule
        if schedule is None:
            return
        for index, _ in schedule.due(self.metrics.records_in, self.now):
            self._at(self.now, lambda i=index: self._fire(i), None, "fault")

    def _check_crash(self, task_id: TaskId, input_ended: bool = False) -> bool:
        """`TaskCrash` after records: the task has handled its crash point's records over the run
        (or, placed `at_fraction`, its input ended first)."""
        records = self._records.get(task_id, 0)
        after = self.schedule.crash_due(task_id, records, input_ended) if self.schedule else None
        if after is None:
            return False
        self.crash_task(task_id, crash_after_records(after, records))
        return True

    # `FaultActions` (`runtime.jobmaster.fault_actions`): SlowStorage and ChannelDelay windows
    # are open in the schedule, which every write and send asks

    def crash_task(self, task_id: TaskId, what: str) -> None:
        self.master.task_failed(task_id, injected_crash(task_id, what))

    def crash_coordinator(self) -> None:
        self._crash_coordinator()

    def stall_channels(self, task_id: TaskId, duration: float) -> None:
        self._stalled_until[task_id] = self.now + duration
        self._trace("stall", str(task_id), duration)

    def stall_task(self, task_id: TaskId, duration: float) -> None:
        """`TaskStall`: the task takes no step until `now + duration`; what reaches it meanwhile
        (input, control messages, its timers, its finished writes) waits and is applied in order."""
        if self.done or task_id not in self.tasks or task_id in self._held_for:
            return
        until = self.now + duration
        self._trace("fault", "TaskStall", str(task_id), duration)
        self._held_for[task_id] = []
        self._busy_until[task_id] = max(self._busy_until.get(task_id, 0.0), until)

        def resume() -> None:
            for fn in self._held_for.pop(task_id, []):
                fn()
            self._schedule_run(task_id)

        self._at(until, resume, self.epoch, "fault")

    def delay_channel(self, receiver: TaskId, channel: int, fault: Any) -> None:
        pass

    def slow_storage(self, fault: Any) -> None:
        pass

    def _held(self, task_id: TaskId, fn: Callable[[], None]) -> bool:
        """True (and `fn` kept for later) while `task_id` is stalled."""
        held = self._held_for.get(task_id)
        if held is None:
            return False
        held.append(fn)
        return True

    def _crash_coordinator(self) -> None:
        if self.done:
            return
        self._trace("coordinator-crash")
        # the process is gone: its pending checkpoints end with it (their notifications belong to
        # the execution failing over below), and none of its timers may act again
        self.coordinator.shutdown()
        self.coordinators.crashed(self.coordinator.stats.history)
        if self.ha is not None:
            # the leader's process died: its session expires, the standby is elected and takes
            # over the shared store (fenced by its own leadership) and the shared ID counter
            leader = self.high_availability.crash_leader()  # type: ignore[union-attr]
            self.store, self.id_counter = self._coordinator_state()
            self.coordinators.promoted(promoted(self.store, self.id_counter, self.storage, self.job_id,
                                                self.master.first_checkpoint_id))
            self._trace("leader", leader)
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
        self._trace("fault", "TaskCrashDuringRecovery", str(task_id), round(at - self.now, 9))
        self._at(at, lambda: self.crash_task(task_id, "TaskCrashDuringRecovery"), self.epoch, "fault")


def run_job(graph: JobGraph, *, seed: int = 0, faults: FaultPlan | None = None, **options: Any) -> JobResult:
    """Run `graph` on the simulator (what `env.execute(..., executor="sim")` calls).

    Raises:
        runtime.jobmaster.registry.ExecutorOptionError: an option `SimExecutor` does not have (named).
    """
    check_options("sim", options, SimExecutor.__init__)
    return SimExecutor(graph, seed=seed, faults=faults, **options).run()
