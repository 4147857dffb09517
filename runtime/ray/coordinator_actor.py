"""`CoordinatorActor`: the pure `CheckpointCoordinator` in a Ray actor, as its gateway.

Timers. The coordinator needs one-shot timers (periodic triggers, checkpoint timeouts, final
checkpoint retries) but a synchronous actor cannot sleep. It gets a `ThreadTimers`: a daemon
thread inside the actor fires due callbacks while holding the actor's lock, and every actor
method takes the same lock, so the coordinator never sees two threads. (A driver-side ticker
calling `tick()` would also work, but would put a driver round trip — ~1 ms plus the driver's
poll period — into every trigger and timeout; the thread fires within a millisecond.)

Gateway. The coordinator's gateway is the job master's `ControlPlane`, which decides what
becomes of every trigger, commit and notification (doomed, routed, owed, lost, duplicated,
delayed); the actor carries them out (`runtime.ray.control_transport`). Triggers and
notifications are fire-and-forget calls to the worker actors of the current epoch, batched per
worker: what the coordinator decides in one entry point (a timer, a report) is queued per worker
and sent as one `control` call per worker when it returns
(`_flush`), so a checkpoint's triggers cost one call per worker with sources, whatever number of
source subtasks it hosts. Tasks report back the same way (`report`: a worker's acknowledgements
of a checkpoint in one call, `runtime.ray.worker_actor.WorkerReports`); the pure coordinator still
sees one acknowledgement per task. `call_counts` says how many calls went each way. The refs of
calls carrying completion notifications are kept so the driver can wait until every task has
seen the final checkpoint's completion (its sinks have committed) before collecting results.
Messages from tasks carry their epoch: anything from an earlier execution attempt is dropped,
so a late "source finished" or acknowledgement of a killed task cannot leak into the next one.
`fail_job` (too many checkpoint failures) is recorded and picked up by the driver, which owns
failover; so is anything the coordinator raises in a timer callback or a task's report (nobody
else would see it, and a final checkpoint whose trigger raised is never retried: the job hangs).

Global committer. The coordinator actor commits each completed checkpoint for every sink in one
call to the committer service (`commit_checkpoint`, Flink's global committer), sent before the
tasks' notifications; the sinks' notifications commit nothing (`RemoteCommitter.commits_checkpoints`).
Its refs count as notifications (`wait_notifications`), and `suspend` waits for them, so a
failover plans its restore against the committed output as it is.

Notifications on barriers. A task whose chain has no completion listener gets no call of its own
for a non-final completed checkpoint (`runtime.jobmaster.coordination.completions`): one Ray
call fewer per such task and checkpoint, and one wake-up of its threads: on the page-view job at
5,000 rec/s with checkpoints every 100 ms, ~6 ms less CPU per checkpoint over the job for its two
sources.

The completed-checkpoint store lives on the job's checkpoint storage (memory: the shared
blob-store actor), so a replacement coordinator `recover()`s it and keeps ids increasing.

High availability (`graph.high_availability` enabled, ZOOKEEPER). Each coordinator actor is a
contender: it builds its own HA services (`create_recovery_factory`; kazoo runs in the actor
process), joins the leader election, and uses the ZooKeeper ID counter and the ZooKeeper store
fenced by its election. Only the leader triggers (the control plane asks
`RayControlTransport.leads`). The driver `promote()`s a contender once it leads: it waits for
the grant, then recovers the store from ZooKeeper. A revoked leadership (session lost or suspended) stops triggering at once, aborts
what is pending and is reported in `status()["leader_lost"]` until the contender is promoted again,
so the driver fails over through a new election even when the failover began for another reason
(a trigger that found ZooKeeper suspended before the revocation reached the coordinator).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.io.cleanup import discard_orphans
from checkpoint.io.ha_services import create_recovery_factory
from runtime.core.subtask_checkpoint import TaskRestore
from runtime.jobmaster.committer.collect import CommittedOutput
from runtime.jobmaster.coordination.control_plane import ControlPlane
from runtime.jobmaster.coordination.coordinator_state import coordinator_state, promoted
from runtime.jobmaster.faults.schedule import FaultSchedule
from runtime.jobmaster.faults.storage import CoordinatorWriteFaults
from runtime.jobmaster.restore.state_assignment import restore_latest_valid
from runtime.jobmaster.result import GcPauses
from runtime.ray.control_transport import RayControlTransport
from runtime.ray.data_links import CONTROL, DataInbox, DataLinkError, link_to
from runtime.ray.errors import describe
from runtime.ray.heap import freeze_startup_heap, gc_pauses
from runtime.ray.storage import StorageSpec, open_storage
from runtime.ray.timers import ProcessCpu, ThreadTimers, WallClock
from vocabulary.fault_plan import FaultPlan
from vocabulary.handles import TaskId
from vocabulary.reasons import CheckpointFailureReason

log = logging.getLogger("barrierflow.ray")


class CoordinatorActor:
    """Hosts the job's `CheckpointCoordinator`. Wrapped with `ray.remote` by the executor."""

    def __init__(self, job_id: str, graph: Any, storage: StorageSpec, contender_id: str = "coordinator",
                 first_checkpoint_id: int | None = None, run_id: str | None = None, min_checkpoint_id: int = 1,
                 capture_completed: bool = False, first_epoch: int = 0) -> None:
        self._lock = threading.RLock()
        #: control messages decided but not sent yet: worker index -> (worker, [(task, method, args)])
        self._outbox: dict[int, tuple[Any, list[tuple[TaskId, str, tuple[Any, ...]]]]] = {}
        #: calls sent ("control", "commit") and received ("report"), and messages in them
        self._calls: Counter[str] = Counter()
        self._cpu = ProcessCpu()
        #: where the workers' reports come as socket frames (`data_address`); kept by `serve`,
        #: counting this job's frames
        self._inbox: DataInbox | None = getattr(self, "_inbox", None)
        if self._inbox is not None:
            self._inbox.frames = 0
        # every timer callback sends what it queued when it returns (`_flush`)
        self._timers = _FlushingTimers(ThreadTimers(self._lock, on_error=self._internal_error), self._flush)
        self.graph = graph
        self.job_id = job_id
        self.contender_id = contender_id
        self._min_checkpoint_id = min_checkpoint_id
        config = graph.checkpoint_config
        self.storage = open_storage(storage, graph)
        #: `CoordinatorStorageFailure` on the id counter's and metadata writes, once `arm_faults` ran
        #: (so a replacement's recovery of the counter below is not counted, as on the simulator)
        self._writes = CoordinatorWriteFaults.install(self.storage, job_id)
        ha = getattr(graph, "high_availability", None)
        self.ha_factory: Any = None
        self.election: Any = None
        # deletes of dropped checkpoints run on their own thread, not before the notifications
        self._discard_pool = ThreadPoolExecutor(1, thread_name_prefix="barrierflow-discard")
        self._leader_lost = False
        if ha is not None and ha.enabled:
            self.ha_factory = create_recovery_factory(ha.mode, hosts=ha.hosts, cluster_id=ha.cluster_id,
                                                      session_timeout=ha.session_timeout,
                                                      operation_timeout=ha.operation_timeout)
            self.election = self.ha_factory.create_leader_election(job_id, contender_id, on_revoke=self._on_revoke)
        store, self.id_counter = coordinator_state(self.storage, job_id, config.retained, run_id, min_checkpoint_id,
                                                   ha=self.ha_factory, election=self.election,
                                                   discard_executor=self._discard_pool)
        self.store: Any = store
        #: ids from here on are this run's (the first coordinator's counter value, handed on to its
        #: successors): the orphan cleanup touches no earlier run's checkpoints
        self.first_checkpoint_id = first_checkpoint_id if first_checkpoint_id is not None else self.id_counter.get()
        self._handles: dict[TaskId, Any] = {}
        self._notify_refs: list[Any] = []
        #: the committer service (None: no sinks commit through it) and its commit calls in flight:
        #: (checkpoint id, ref); a failed one fails the job over (`_check_commits`)
        self._committer: Any = None
        self._commit_refs: list[tuple[int, Any]] = []
        self._fail_request: str | None = None
        #: completed checkpoints with their files, for the driver's listeners (`capture_completed`)
        self._capture = capture_completed
        self._completed: list[tuple[Any, CapturedFiles]] = []
        #: the coordinator's gateway: every decision about its messages to the tasks
        self.plane = ControlPlane(graph, RayControlTransport(self), first_epoch)
        self.coordinator = CheckpointCoordinator(
            job_id, config, clock=WallClock(), timers=self._timers, gateway=self.plane, store=self.store,
            id_counter=self.id_counter, source_tasks=graph.source_task_ids(), all_tasks=graph.task_ids(),
        )
        self.plane.attach(self.coordinator)
        #: control-message faults (trigger, complete, abort), counted over the run (`arm_faults`)
        self._faults: FaultSchedule | None = None
        freeze_startup_heap()
        if self.election is not None:
            self.election.start()

    # ------------------------------------------------------------------ faults

    def serve(self, *args: Any) -> None:
        """Coordinate another job (`runtime.ray.worker_pool`): this actor's job was shut down
        (`shutdown`), and `args` are the constructor's. The process is kept; the rest is new: a
        report of the earlier job still on its way carries an epoch the new plane never has."""
        self.__init__(*args)

    def arm_faults(self, plan: FaultPlan, counts: dict[tuple[str, TaskId | None], int]) -> None:
        """Apply `plan`'s control-message faults to the triggers, completions and aborts this
        coordinator sends, and its `CoordinatorStorageFailure`s to its storage writes; `counts`:
        the messages and writes of earlier coordinators of the run."""
        with self._lock:
            self._faults = FaultSchedule.for_graph(plan, self.graph)
            for (kind, task_id), n in counts.items():
                self._faults.advance(kind, task_id, n)
            self._writes.schedule = self.plane.faults = self._faults

    def fault_counts(self) -> dict[tuple[str, TaskId | None], int]:
        """The control messages sent and storage writes made so far in the run, per (kind, task)
        (for `arm_faults`)."""
        with self._lock:
            return self._faults.counts() if self._faults is not None else {}

    def _internal_error(self, exc: BaseException) -> None:
        """Under the lock: the coordinator raised (a timer callback, or a task's report). Nothing
        may be left to retry what failed — a final checkpoint never triggered leaves every source
        waiting for it — so the driver fails the job over (`status()["fail_request"]`), loudly."""
        log.error("checkpoint coordinator of job %s failed", self.job_id, exc_info=exc)
        if self._fail_request is None:
            self._fail_request = f"checkpoint coordinator failed: {type(exc).__name__}: {exc}"

    @contextlib.contextmanager
    def _reporting_errors(self) -> Iterator[None]:
        """Run a task's report under the lock; what the coordinator raises fails the job over
        (the task's call is fire-and-forget: nobody would see the error)."""
        with self._lock:
            try:
                yield
            except Exception as exc:
                self._internal_error(exc)
            finally:
                self._flush()

    def _queue(self, handle: Any, method: str, *args: Any) -> None:
        """Queue `method(*args)` for the subtask of `handle` (a `SlotHandle`); sent by `_flush`."""
        self._outbox.setdefault(handle.worker_index, (handle, []))[1].append((handle.task_id, method, args))

    def _flush(self) -> None:
        """Under the lock: one `control` call per worker with what was queued for it, in order.
        With `data_transport="socket"` a batch of triggers only is a frame on the worker's inbox
        (`WorkerActor.deliver_frame`) instead: nobody waits for it, where a notification's call is
        awaited (`wait_notifications`; the final one is applied before its call returns)."""
        outbox, self._outbox = self._outbox, {}
        for handle, items in outbox.values():
            self._calls["control messages"] += len(items)
            if handle.data_transport == "socket" and all(method == "trigger_source" for _, method, _ in items):
                try:
                    link_to(handle.worker).send((None, CONTROL, items))
                    self._calls["control frames"] += 1
                except DataLinkError as exc:  # lost triggers: their checkpoints time out, as for a lost message
                    log.warning("checkpoint coordinator of job %s: triggers not sent: %s", self.job_id, exc)
                continue
            ref = handle.worker.control.remote(items)
            self._calls["control"] += 1
            if any(method == "notify_complete" for _, method, _ in items):
                self._notify_refs.append(ref)
        if len(self._notify_refs) > 256:
            _, self._notify_refs = ray.wait(self._notify_refs, num_returns=len(self._notify_refs), timeout=0)

    def call_counts(self) -> dict[str, int]:
        """Calls this coordinator sent (`control` to workers, `commit` to the committer) and
        received (`report` from workers; `report frames`: those that came as socket frames), and
        the messages they carried."""
        with self._lock:
            frames = {"report frames": self._inbox.frames} if self._inbox is not None and self._inbox.frames else {}
            return {**self._calls, **frames}

    def process_cpu(self) -> float:
        """CPU seconds this actor's process spent since it started (every thread)."""
        return self._cpu.seconds()

    def gc_pauses(self) -> GcPauses:
        """This actor process's full garbage collections (`JobMetrics.gc_pauses`)."""
        return gc_pauses()

    # ------------------------------------------------------------------ high availability

    def promote(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for this contender to lead, then recover the completed
        checkpoints from ZooKeeper. Returns whether it leads (always True without HA).

        Raises:
            checkpoint.io.recovery.HighAvailabilityError: ZooKeeper failed during recovery.
        """
        if self.election is None:
            return True
        # A loss from here on stays reported, even one whose revocation races this promotion: the
        # driver fails over once more rather than deploy a coordinator that does not lead.
        self._leader_lost = False
        if not self.election.await_leadership(timeout):  # not under the lock: the grant may need it
            return False
        with self._lock:
            promoted(self.store, self.id_counter, self.storage, self.job_id, self._min_checkpoint_id)
            return bool(self.election.is_leader)

    def is_leader(self) -> bool:
        return self.election is None or bool(self.election.is_leader)

    def _on_revoke(self) -> None:
        # election thread: must not block on the actor lock, so the step-down runs on the timer thread
        self._leader_lost = True
        self._timers.schedule(0.0, self._step_down)

    def _step_down(self) -> None:
        log.warning("coordinator %r of job %s lost leadership: stops triggering", self.contender_id, self.job_id)
        self.coordinator.stop()
        self.coordinator.abort_all_pending(CheckpointFailureReason.COORDINATOR_SHUTDOWN)

    # ------------------------------------------------------------------ driver-facing

    def deploy(self, epoch: int, handles: dict[TaskId, Any], committer: Any = None) -> None:
        """Tasks of `epoch` are up: route to them and (re)start periodic triggering; `committer`:
        the committer service, told of every completed checkpoint."""
        with self._lock:
            self.plane.attempt_deployed(epoch)
            self._committer = committer
            self._handles = dict(handles)
            self._notify_refs = []
            self._fail_request = None
            self.coordinator.start()
            self._flush()

    def suspend(self, reason: CheckpointFailureReason = CheckpointFailureReason.TASK_FAILURE) -> None:
        """Failover begins: stop triggering, abort what is pending, ignore the old epoch."""
        with self._lock:
            self.plane.cancel_attempt(reason)
            self._outbox = {}  # (notifications for the failed attempt: it ignores them)
            refs, self._commit_refs = [ref for _, ref in self._commit_refs], []
        if refs:  # the restore is planned against the committed output: let the commits land
            ray.wait(refs, num_returns=len(refs), timeout=30)

    def next_checkpoint_id(self) -> int:
        with self._lock:
            return self.id_counter.get()

    def restores(self, committed: CommittedOutput | None = None) -> tuple[Any, dict[TaskId, TaskRestore]]:
        """The newest retained checkpoint that verifies and the restore state of every task from it
        (`(None, {})`: none yet; a corrupt one is skipped for the previous retained one).

        Raises:
            runtime.jobmaster.restore.state_assignment.NoValidCheckpointError: checkpoints are retained but none verifies.
            runtime.jobmaster.restore.state_assignment.CommittedOutputAheadError: the sinks committed output of a newer
                checkpoint than the one that verifies (`committed`).
            runtime.jobmaster.restore.state_assignment.RestoreError: the checkpoint does not fit the job.
        """
        with self._lock:
            return restore_latest_valid(self.graph, self.store, self.storage, committed)

    def restored_from(self, checkpoint: Any) -> None:
        """The attempt being deployed starts from `checkpoint` (None: from scratch)."""
        with self._lock:
            self.coordinator.restored_from(checkpoint)

    def checkpoint_id_floor(self) -> int:
        """The first checkpoint id of this run (`first_checkpoint_id` of a successor)."""
        return self.first_checkpoint_id

    def discard_orphans(self, finished: bool = True) -> list[str]:
        """Delete the files of this run's checkpoints that are neither retained nor pending, and
        what interrupted writes left (`checkpoint.io.cleanup`): what a failed attempt left, and
        when the job `finished` (a cancelled task of a failed attempt may have finished an upload
        late)."""
        with self._lock:
            return discard_orphans(self.storage, self.job_id, self.store, since=self.first_checkpoint_id,
                                   pending=self.coordinator.pending_ids, finished=finished)

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._check_commits()
            stats = self.coordinator.stats
            last = stats.latest_completed
            return {
                "completed": stats.num_completed,
                "aborted": stats.num_aborted,
                "last_duration": last.duration if last else None,
                "last_alignment": last.alignment_time if last else None,
                "fail_request": self._fail_request,
                "final_complete": self.coordinator.is_final_checkpoint_complete,
                "latest_id": (self.store.get_latest_checkpoint() or _NoCheckpoint).checkpoint_id,
                "leader": self.is_leader(),
                "leader_lost": self._leader_lost,
                "contender": self.contender_id,
                "fault_counts": self._faults.counts() if self._faults is not None else {},
                "doomed": self.plane.doomed,
                "zk_session": self.ha_factory.session() if self.ha_factory is not None and hasattr(
                    self.ha_factory, "session") else None,
                "completed_files": self._take_completed(),
            }

    def take_completed(self) -> list[tuple[Any, CapturedFiles]]:
        """The checkpoints completed since the last call (or `status()`), with their files."""
        with self._lock:
            return self._take_completed()

    def _take_completed(self) -> list[tuple[Any, CapturedFiles]]:
        completed, self._completed = self._completed, []
        return completed

    def history(self) -> list[Any]:
        with self._lock:
            return list(self.coordinator.stats.history)

    def wait_notifications(self, timeout: float = 10.0) -> None:
        """Wait until the completion notifications sent so far were executed by their tasks."""
        with self._lock:
            refs, self._notify_refs = self._notify_refs, []
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout)

    def shutdown(self) -> None:
        with self._lock:
            self.coordinator.shutdown()
            self._timers.close()
            self.store.shutdown()  # waits for the deletes still running
            self._discard_pool.shutdown()
        if self.election is not None:  # ends the ZooKeeper session: a standby is elected at once
            self.election.stop()
            self.ha_factory.close()

    # ------------------------------------------------------------------ task-facing

    def data_address(self) -> tuple[str, int, bytes]:
        """(host, port, token) of this actor's `DataInbox`, opened on the first ask: where the
        workers' reports come as frames (`runtime.ray.data_links.ReportsBySocket`)."""
        if self._inbox is None:  # (each frame is `report`'s arguments; `report` takes the lock)
            self._inbox = DataInbox(lambda call: self.report(*call), ray.util.get_node_ip_address())
        return (*self._inbox.address, self._inbox.token)

    def report(self, items: list[tuple[Any, ...]], cause: str = "at once") -> None:
        """A worker's reports, in the order its subtasks made them: ("ack", epoch, ack),
        ("decline", epoch, task, checkpoint id, reason), ("finished", epoch, task). `cause` is
        why the worker sent them now (`WorkerReports`): counted as `report (cause)`."""
        with self._reporting_errors():
            self._calls["report"] += 1
            self._calls[f"report ({cause})"] += 1
            for kind, epoch, *args in items:
                if epoch != self.plane.epoch:  # a report of an ended attempt
                    continue
                if kind == "ack":
                    self._calls["acks"] += 1
                    self.coordinator.receive_acknowledge(*args)
                elif kind == "decline":
                    self.coordinator.receive_decline(*args)
                else:
                    self.coordinator.source_finished(*args)

    # ------------------------------------------------------------------ for the control plane

    def _commit(self, checkpoint_id: int) -> None:
        """Commit `checkpoint_id` for every sink in one call to the committer service."""
        if self._committer is None:
            return
        ref = self._committer.commit_checkpoint.remote(checkpoint_id)
        self._calls["commit"] += 1
        self._notify_refs.append(ref)
        self._commit_refs.append((checkpoint_id, ref))
        if len(self._commit_refs) > 64:
            self._check_commits()

    def _check_commits(self) -> None:
        """Under the lock: forget the commits that landed; one that failed (its storage full, a
        blocked path) fails the job over — the restored sinks commit that checkpoint's
        transactions again. A dead committer service is the driver's to notice and replace."""
        if not self._commit_refs:
            return
        done, _ = ray.wait([ref for _, ref in self._commit_refs], num_returns=len(self._commit_refs), timeout=0)
        finished = set(done)
        for checkpoint_id, ref in [c for c in self._commit_refs if c[1] in finished]:
            try:
                ray.get(ref)
            except RayActorError:
                pass
            except RayError as exc:
                if self._fail_request is None:
                    self._fail_request = f"committing checkpoint {checkpoint_id} failed: {describe(exc)}"
        self._commit_refs = [c for c in self._commit_refs if c[1] not in finished]

    def _capture_completed(self, completed: Any) -> None:
        if self._capture:  # read now: by the time the driver's listener runs, the store may have deleted them
            self._completed.append((completed, CapturedFiles(completed, self.storage)))


class _FlushingTimers:
    """The coordinator's timers: after each callback, what it queued is sent (`flush`)."""

    def __init__(self, timers: ThreadTimers, flush: Callable[[], None]) -> None:
        self._timers, self._flush = timers, flush

    def schedule(self, delay: float, callback: Callable[[], None]) -> Any:
        def fire() -> None:
            try:
                callback()
            finally:
                self._flush()

        return self._timers.schedule(delay, fire)

    def close(self) -> None:
        self._timers.close()


class CapturedFiles:
    """The task files of one completed checkpoint, read when it completed: what a checkpoint
    listener (e.g. `spark_bridge.io.landing.CheckpointLander`) reads through `read_task_file`."""

    def __init__(self, completed: Any, storage: Any) -> None:
        self._files = {(h.path, h.offset, h.length): storage.read_task_file(h) for h in completed.state_handles()}

    def read_task_file(self, handle: Any) -> bytes:
        return self._files[(handle.path, handle.offset, handle.length)]


class _NoCheckpoint:
    checkpoint_id = None
