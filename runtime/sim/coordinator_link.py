"""The checkpoint coordinator's link to the tasks on the simulator, both ways.

Out of the coordinator: the simulator's `ControlTransport`. What becomes of each trigger, commit
and notification (a doomed coordinator, the completions a source takes with its trigger, the
fault plan's lost, duplicated and delayed messages) is the `ControlPlane`'s decision, the
coordinator's gateway; this side carries a message to its task in virtual time, over the
network's control latency, and applies it there. Into it: the tasks' acknowledgements, and their
snapshot writes, which take virtual time proportional to their size and go to a real
`CheckpointStorage` (failing, torn or slow as the plan says) before the task acknowledges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from runtime.core.subtask_checkpoint import TaskSnapshot
from runtime.jobmaster.coordination.control_plane import (
    ControlMessage,
    ControlPlane,
    Delivery,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    TriggerCheckpoint,
)
from runtime.jobmaster.coordination.task_reports import (
    WriteFaults,
    send_acknowledgement,
    snapshot_written,
    write_snapshot_files,
    write_started,
)
from runtime.jobmaster.faults.schedule import DELIVER
from runtime.jobmaster.faults.storage import write_torn
from runtime.records.messages import CheckpointOptions
from vocabulary.fault_plan import Fault
from vocabulary.handles import TaskAcknowledgement, TaskId

if TYPE_CHECKING:
    from runtime.sim.executor import SimExecutor


class SimCoordinatorLink:
    """The `ControlTransport` of one `SimExecutor`'s coordinators (their gateway is `plane`), and
    the tasks' way back."""

    def __init__(self, sim: SimExecutor) -> None:
        self.sim = sim
        #: the coordinators' gateway: every decision about their messages
        self.plane = ControlPlane(sim.graph, self)
        #: whether a sink stages in the committer: else no global commit is sent
        self._commits = sim.graph.stages_in_committer
        #: checkpoints completed over the run, every coordinator's (the watchdog's progress)
        self.completions = 0

    # ------------------------------------------------------------------ `ControlTransport`

    def leads(self) -> bool:
        return True  # a standby takes over only when the leader's process dies

    def deliver(self, task_id: TaskId, epoch: int, message: ControlMessage, delivery: Delivery) -> None:
        if isinstance(message, TriggerCheckpoint):
            fn = self._trigger(task_id, message)
        elif isinstance(message, NotifyCheckpointComplete):
            fn = self._notify_complete(task_id, message)
        else:
            fn = self._notify_aborted(task_id, message)
        self.sim.channels.carry_control(message.kind, epoch, fn, delivery.copies, delivery.delay)

    def struck(self, message: ControlMessage, task_id: TaskId, faults: Sequence[Fault]) -> None:
        for fault in faults:
            self.sim.trace_event("fault", type(fault).__name__, message.kind, message.checkpoint_id, str(task_id))

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        sim = self.sim
        sim.at(sim.now + delay, callback, sim.epoch, "control")

    def commit(self, checkpoint_id: int) -> None:
        # the global committer, for every sink (a message, as on Ray; it dies with a failed-over epoch);
        # none when no sink stages there (a `DiscardingSink`'s job), as on Ray
        if not self._commits:
            return
        sim = self.sim
        committer = sim.sink_committer

        def commit() -> None:
            try:
                committer.commit_checkpoint(checkpoint_id)
            except Exception as exc:  # the sinks' external system failed (a full disk, a blocked path):
                # fail over; the restored sinks commit the checkpoint's transactions again
                sim.master.failover(f"committing checkpoint {checkpoint_id} failed: {exc}", exc)

        sim.channels.control(sim.epoch, commit)

    def crash(self, checkpoint_id: int) -> None:
        sim = self.sim
        sim.trace_event("fault", "CoordinatorCrashBeforeNotify", checkpoint_id)
        sim.at(sim.now, sim.crash_coordinator, None, "fault")  # at the end of this instant

    def fail(self, error: Exception) -> None:
        self.sim.master.failover(f"checkpoint failures: {error}", error)

    def completed(self, completed: Any) -> None:
        sim = self.sim
        sim.trace_event("completed", completed.checkpoint_id)
        self.completions += 1
        sim.runner.charge_checkpoint_cpu()
        if sim.invariants is not None:
            sim.invariants.on_completed(completed)
        sim.master.checkpoint_completed(completed, sim.storage)

    # ------------------------------------------------------------------ a message at its task

    def _trigger(self, task_id: TaskId, message: TriggerCheckpoint) -> Callable[[], None]:
        sim = self.sim
        checkpoint_id, timestamp, completed = message.checkpoint_id, message.timestamp, message.completed
        options = CheckpointOptions.of_trigger(message.unaligned, message.alignment_timeout, message.forced_aligned)
        if sim.invariants is not None:
            sim.invariants.on_trigger(checkpoint_id)

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
        return trigger

    def _notify_complete(self, task_id: TaskId, message: NotifyCheckpointComplete) -> Callable[[], None]:
        sim = self.sim
        checkpoint_id, final = message.checkpoint_id, message.final

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

        return notify

    def _notify_aborted(self, task_id: TaskId, message: NotifyCheckpointAborted) -> Callable[[], None]:
        sim = self.sim
        checkpoint_id, reason = message.checkpoint_id, message.reason

        def notify() -> None:
            task = sim.tasks.get(task_id)
            if task is not None and not sim.fault_actions.held(task_id, notify):
                if not sim.runner.into_task(task_id, lambda: task.notify_checkpoint_aborted(checkpoint_id, reason)):
                    return
                sim.writer.notify_checkpoint_aborted(task_id, checkpoint_id)
                if sim.invariants is not None:
                    sim.invariants.on_notified(task_id, checkpoint_id, completed=False)
                sim.runner.schedule_run(task_id)

        return notify

    # ------------------------------------------------------------------ from the tasks

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        """`task_id` learned of completion `checkpoint_id` from a barrier or its trigger."""
        sim = self.sim
        sim.writer.notify_checkpoint_complete(task_id, checkpoint_id)
        if sim.invariants is not None:
            sim.invariants.on_notified(task_id, checkpoint_id, completed=True)

    def acknowledge(self, epoch: int, ack: TaskAcknowledgement) -> None:
        """`ack` goes to the coordinator over the network, as `send_acknowledgement` decides."""
        sim = self.sim
        sim.trace_barrier("ack", ack.checkpoint_id, str(ack.task_id))
        effect = sim.schedule.control("ack", ack.task_id) if sim.schedule is not None else DELIVER
        send_acknowledgement(ack, effect, _SimAcknowledgements(sim, epoch))

    def write_snapshot(self, epoch: int, snapshot: TaskSnapshot) -> None:
        """Write `snapshot` to the checkpoint storage, taking virtual time (fixed latency plus
        size / bandwidth, stretched by a `SlowStorage` window) and the task's CPU
        (`CostModel.sync_cost`, `write_cost`); what the plan's faults do to it and what the task
        then does is `runtime.jobmaster.coordination.task_reports`'."""
        sim = self.sim
        network = sim.network
        task_id = snapshot.task_id
        sim.trace_barrier("snapshot", snapshot.checkpoint_id, str(task_id), snapshot.sync_time)
        effect = sim.schedule.write(task_id) if sim.schedule is not None else None
        files = sim.writer.prepare(snapshot)
        port = _SimSnapshotStorage(sim, snapshot, files)
        size = sum(len(data) for data in files.values())
        latency = network.write_latency
        if network.write_latency_max is not None:  # drawn only then: a run without it draws the same numbers
            latency = sim.rng.uniform(latency, network.write_latency_max)
        duration = latency + size / network.write_bandwidth
        sync, cpu = sim.costs.sync_cost(size), sim.costs.write_cost(size)
        if sync + cpu > 0:  # the task's CPU (charged with its step); the write starts after the sync part
            sim.runner.owe_cpu(task_id, sync, cpu)
        faults = WriteFaults.of(effect, sim.schedule.write_slowdown(sim.now) if sim.schedule is not None else 1.0)
        duration *= write_started(faults, port)

        def done() -> None:
            task = sim.tasks.get(task_id)
            if task is None or sim.fault_actions.held(task_id, done):
                return
            if task.is_cancelled(snapshot.checkpoint_id):
                return  # cancelled in flight: nothing is written
            outcome = write_snapshot_files(task_id, snapshot.checkpoint_id, faults, port)
            snapshot_written(task, snapshot.checkpoint_id, outcome, duration, cpu, sim.writer.discard)

        sim.at(sim.now + sync + duration, done, epoch, "write")


class _SimAcknowledgements:
    """`AcknowledgementPort` of one epoch's tasks on the simulator: over the network's control
    path (which draws a latency for a lost message too); faults go to the trace."""

    def __init__(self, sim: SimExecutor, epoch: int) -> None:
        self.sim, self.epoch = sim, epoch

    def struck(self, ack: TaskAcknowledgement, faults: Sequence[Fault], lost: bool) -> None:
        for fault in faults:
            if lost:
                self.sim.trace_event("ack-lost", ack.checkpoint_id, str(ack.task_id))
            else:
                self.sim.trace_event("fault", type(fault).__name__, "ack", ack.checkpoint_id, str(ack.task_id))

    def carry(self, ack: TaskAcknowledgement, delivery: Delivery) -> None:
        sim = self.sim
        sim.channels.carry_control("ack", self.epoch, lambda: sim.coordinator.receive_acknowledge(ack),
                                   delivery.copies, delivery.delay)


class _SimSnapshotStorage:
    """`SnapshotStoragePort` of one snapshot write on the simulator: its prepared `files` into the
    run's `CheckpointStorage`; faults go to the trace."""

    def __init__(self, sim: SimExecutor, snapshot: TaskSnapshot, files: dict[str, bytes]) -> None:
        self.sim, self.snapshot, self.files = sim, snapshot, files

    def write(self) -> Any:
        return self.sim.writer.write(self.snapshot, self.files)

    def write_torn(self, keep: float, garble: bool) -> tuple[Any, str | None]:
        return write_torn(self.sim.storage, keep, garble, self.write)

    def struck(self, fault: str, detail: Any) -> None:
        self.sim.trace_event("fault", fault, self.snapshot.checkpoint_id, str(self.snapshot.task_id), detail)
