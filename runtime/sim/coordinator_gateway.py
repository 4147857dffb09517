"""The checkpoint coordinator's link to the tasks on the simulator, both ways.

Out of the coordinator (its `CoordinatorGateway`): triggers to the sources, the global commit of
a completed checkpoint, completion and abort notifications, each a control message that the
fault plan may lose, duplicate or delay. Into it: the tasks' acknowledgements, and their snapshot
writes, which take virtual time proportional to their size and go to a real `CheckpointStorage`
(failing, torn or slow as the plan says) before the task acknowledges.

What a task learns of completions by a call of its own and what it takes from its next trigger
or barrier is `CompletionNotices`' decision. A coordinator that dies between a checkpoint's
durability and its commit (`CoordinatorCrashBeforeNotify`) is *doomed*: nothing more leaves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.handles import TaskAcknowledgement, TaskId
from checkpoint.io.storage import StorageError
from checkpoint.reasons import CheckpointFailureReason
from runtime.core.subtask_checkpoint import TaskSnapshot
from runtime.jobmaster.coordination.completions import CompletionNotices
from runtime.jobmaster.faults.storage import write_torn
from runtime.records.messages import CheckpointOptions

if TYPE_CHECKING:
    from runtime.sim.executor import SimExecutor


class SimCoordinatorGateway:
    """`CoordinatorGateway` of one `SimExecutor`'s coordinators, and the tasks' way back."""

    def __init__(self, sim: SimExecutor) -> None:
        self.sim = sim
        #: what the coordinator tells tasks by a call of their own, what it keeps for triggers
        self.notices = CompletionNotices(sim.graph)
        #: a coordinator that crashes at the end of this instant (`CoordinatorCrashBeforeNotify`)
        self._doomed: CheckpointCoordinator | None = None

    def coordinator_replaced(self) -> None:
        """A new coordinator: it owes no task a completion."""
        self.notices = CompletionNotices(self.sim.graph)

    # ------------------------------------------------------------------ `CoordinatorGateway`

    def trigger_source(self, task_id: TaskId, checkpoint_id: int, timestamp: float,
                       unaligned: bool = False, alignment_timeout: float | None = None,
                       forced_aligned: bool = False) -> None:
        sim = self.sim
        if self._doomed is sim.coordinator:
            return  # it is crashing: nothing more leaves it
        options = CheckpointOptions.of_trigger(unaligned, alignment_timeout, forced_aligned)
        if sim.invariants is not None:
            sim.invariants.on_trigger(checkpoint_id)
        completed = self.notices.take(task_id)

        def trigger() -> None:
            task = sim.tasks.get(task_id)
            if task is None or sim.fault_actions.held(task_id, trigger):
                return
            if not sim.runner.into_task(task_id, lambda: task.trigger_source_checkpoint(checkpoint_id, timestamp,
                                                                                        options, completed)):
                return
            if sim.invariants is not None:
                sim.invariants.on_source_triggered(task_id, checkpoint_id)
            sim.channels.send_outputs(task_id)
            sim.runner.schedule_run(task_id)

        sim.trace_event("trigger", checkpoint_id, str(task_id))
        sim.channels.send_control("trigger", task_id, checkpoint_id, sim.epoch, trigger)

    def commit_checkpoint(self, checkpoint_id: int) -> None:
        sim = self.sim
        coordinator = sim.coordinator
        if self._doomed is coordinator:
            return
        if sim.schedule is not None and sim.schedule.completion_announced(checkpoint_id):
            # the checkpoint is durable; the coordinator dies before committing or telling anyone
            self._doomed = coordinator
            sim.trace_event("fault", "CoordinatorCrashBeforeNotify", checkpoint_id)
            sim.at(sim.now, sim.crash_coordinator, None, "fault")
            return
        # the global committer, for every sink (a message, as on Ray; it dies with a failed-over epoch)
        committer = sim.sink_committer

        def commit() -> None:
            try:
                committer.commit_checkpoint(checkpoint_id)
            except Exception as exc:  # the sinks' external system failed (a full disk, a blocked path):
                # fail over; the restored sinks commit the checkpoint's transactions again
                sim.master.failover(f"committing checkpoint {checkpoint_id} failed: {exc}", exc)

        sim.channels.control(sim.epoch, commit)

    def notify_complete(self, task_id: TaskId, checkpoint_id: int) -> None:
        sim = self.sim
        coordinator = sim.coordinator
        if self._doomed is coordinator:
            return
        final = coordinator.is_final_checkpoint_complete and coordinator.final_checkpoint_id == checkpoint_id
        if not self.notices.is_direct(task_id, final):
            self._owe_completion(task_id, checkpoint_id)
            return

        def notify() -> None:
            task = sim.tasks.get(task_id)
            if task is None or sim.fault_actions.held(task_id, notify):
                return
            if not sim.runner.into_task(task_id, lambda: task.notify_checkpoint_complete(checkpoint_id, final=final)):
                return
            sim.writer.notify_checkpoint_complete(task_id, checkpoint_id)
            if sim.invariants is not None:
                sim.invariants.on_notified(task_id, checkpoint_id, completed=True)
            sim.channels.send_outputs(task_id)
            sim.runner.schedule_run(task_id)
            if task.is_finished:
                sim.runner.check_done()

        sim.channels.send_control("complete", task_id, checkpoint_id, sim.epoch, notify)

    def _owe_completion(self, task_id: TaskId, checkpoint_id: int) -> None:
        """A completion `task_id` gets no call for (`CompletionNotices`): kept for its next
        trigger as its "complete" control message's faults let it (lost: not kept; delayed: kept
        late), as on Ray; a task that is no source takes it from a barrier."""
        sim = self.sim
        schedule = sim.schedule
        effect = schedule.control("complete", task_id) if schedule is not None else None
        if effect is not None:
            for fault in effect.faults:
                sim.trace_event("fault", type(fault).__name__, "complete", checkpoint_id, str(task_id))
            if effect.lost:
                return
            if effect.delay > 0:
                sim.at(sim.now + effect.delay, lambda: self.notices.owe(task_id, checkpoint_id),
                       sim.epoch, "control")
                return
        self.notices.owe(task_id, checkpoint_id)

    def notify_aborted(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        sim = self.sim
        if self._doomed is sim.coordinator:
            return

        def notify() -> None:
            task = sim.tasks.get(task_id)
            if task is not None and not sim.fault_actions.held(task_id, notify):
                if not sim.runner.into_task(task_id, lambda: task.notify_checkpoint_aborted(checkpoint_id, reason)):
                    return
                sim.writer.notify_checkpoint_aborted(task_id, checkpoint_id)
                if sim.invariants is not None:
                    sim.invariants.on_notified(task_id, checkpoint_id, completed=False)
                sim.runner.schedule_run(task_id)

        sim.channels.send_control("abort", task_id, checkpoint_id, sim.epoch, notify)

    def fail_job(self, error: Exception) -> None:
        self.sim.master.failover(f"checkpoint failures: {error}", error)

    def on_checkpoint_completed(self, completed: Any) -> None:
        sim = self.sim
        if self._doomed is sim.coordinator:
            return
        sim.trace_event("completed", completed.checkpoint_id)
        sim.runner.charge_checkpoint_cpu()
        if sim.invariants is not None:
            sim.invariants.on_completed(completed)
        sim.master.checkpoint_completed(completed, sim.storage)

    # ------------------------------------------------------------------ from the tasks

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        """`task_id` learned of completion `checkpoint_id` from a barrier or its trigger."""
        sim = self.sim
        sim.writer.notify_checkpoint_complete(task_id, checkpoint_id)
        if sim.invariants is not None:
            sim.invariants.on_notified(task_id, checkpoint_id, completed=True)

    def acknowledge(self, epoch: int, ack: TaskAcknowledgement) -> None:
        sim = self.sim
        sim.trace_barrier("ack", ack.checkpoint_id, str(ack.task_id))
        sim.channels.send_control("ack", ack.task_id, ack.checkpoint_id, epoch,
                                  lambda: sim.coordinator.receive_acknowledge(ack))

    def write_snapshot(self, epoch: int, snapshot: TaskSnapshot) -> None:
        """Write `snapshot` to the checkpoint storage, taking virtual time (fixed latency plus
        size / bandwidth) and the task's CPU (`CostModel.sync_cost`, `write_cost`)."""
        sim = self.sim
        network = sim.network
        task_id = snapshot.task_id
        sim.trace_barrier("snapshot", snapshot.checkpoint_id, str(task_id), snapshot.sync_time)
        effect = sim.schedule.write(task_id) if sim.schedule is not None else None
        files = sim.writer.prepare(snapshot)
        size = sum(len(data) for data in files.values())
        latency = network.write_latency
        if network.write_latency_max is not None:  # drawn only then: a run without it draws the same numbers
            latency = sim.rng.uniform(latency, network.write_latency_max)
        duration = latency + size / network.write_bandwidth
        sync, cpu = sim.costs.sync_cost(size), sim.costs.write_cost(size)
        if sync + cpu > 0:  # the task's CPU (charged with its step); the write starts after the sync part
            sim.runner.owe_cpu(task_id, sync, cpu)
        if sim.schedule is not None:
            slower = sim.schedule.write_slowdown(sim.now)
            if slower > 1.0:
                sim.trace_event("fault", "SlowStorage", snapshot.checkpoint_id, str(task_id), slower)
                duration *= slower

        def done() -> None:
            task = sim.tasks.get(task_id)
            if task is None or sim.fault_actions.held(task_id, done):
                return
            if task.is_cancelled(snapshot.checkpoint_id):
                return  # cancelled in flight: nothing is written
            try:
                if effect is not None and effect.fail:
                    raise StorageError(f"injected storage failure writing {task_id} chk-{snapshot.checkpoint_id}")
                if effect is not None and effect.tear is not None:
                    handles = self._write_torn(snapshot, files, effect.tear)
                else:
                    handles = sim.writer.write(snapshot, files)
            except StorageError as exc:
                task.on_snapshot_failed(snapshot.checkpoint_id, exc)
                return
            if not task.on_snapshot_written(snapshot.checkpoint_id, handles, duration, cpu):
                sim.writer.discard(handles)

        sim.at(sim.now + sync + duration, done, epoch, "write")

    def _write_torn(self, snapshot: TaskSnapshot, files: dict[str, bytes], tear: Any) -> Any:
        """Write `snapshot` with its first file torn (`TornWrite`): the write reports success."""
        sim = self.sim
        handles, torn = write_torn(sim.storage, tear.keep, tear.garble, lambda: sim.writer.write(snapshot, files))
        sim.trace_event("fault", "TornWrite", snapshot.checkpoint_id, str(snapshot.task_id), torn)
        return handles
