"""`DriverFaultInjection`: the driver's part of a run's `FaultPlan` (`runtime.jobmaster.faults.actions.FaultActions`):
firing the faults due, freezing and killing tasks, killing processes.

A part of `runtime.ray.executor.RayExecutor`, which holds the state it works on.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from runtime.jobmaster.faults.actions import crash_after_records, fire_fault, injected_crash
from runtime.jobmaster.faults.counts import RunCounts
from vocabulary.fault_plan import (
    ChannelDelay,
    SlowStorage,
)
from vocabulary.handles import TaskId

log = logging.getLogger("barrierflow.ray")


class DriverFaultInjection:
    """The driver's part of a run's `FaultPlan` (`runtime.jobmaster.faults.actions.FaultActions`):
    firing the faults due, freezing and killing tasks, killing processes."""

    def _resolve_faults(self) -> None:
        """Resolve the plan once for the run (`runtime.jobmaster.faults.schedule`, as the simulator does)."""
        self.schedule = self.master.schedule
        #: what the attempts' actors counted, for the schedule; `torn_files`, `slowed_writes`
        self.counts = RunCounts(self.schedule, self.task_ids)
        #: faults placed at a wall time (seconds since the first deployment): (at, index)
        self._timed = [(at, index) for at, index, _ in self.schedule.timed()]
        #: task -> what froze it, for a crash at a time (the actor reports it frozen)
        self._crashing: dict[TaskId, str] = {}
        #: `TaskCrashDuringRecovery` faults due: (wall time, task)
        self._recovery_crashes: list[tuple[float, TaskId]] = []

    def _check_crash(self, task_id: TaskId, status: dict[str, Any]) -> tuple[str, BaseException]:
        """The task froze for a `TaskCrash` (after its records, or at a time): kill it; the failure
        reads as the simulator's."""
        self._cancel_siblings(task_id)
        self._kill(task_id)
        what = self._crashing.pop(task_id, None)
        if what is None:
            records = self.counts.records(task_id, status["records"])
            after = self.schedule.crash_due(task_id, records, status.get("input_ended", False))
            what = crash_after_records(after, records)
        exc = injected_crash(task_id, what)
        return f"task {task_id} failed: {exc}", exc

    def _inject_faults(self, now: float) -> bool:
        """Fire what is due at `now` (times, the sources' progress in the last statuses, a doomed
        coordinator, crashes during recovery); whether anything fired."""
        fired = False
        elapsed = now - self.running_since
        for at, index in list(self._timed):
            if elapsed >= at:
                self._timed.remove((at, index))
                self._fire(index)
                fired = True
        source_records = self.counts.source_records(s.get("source_records", 0) for s in self._status.values())
        for index, _ in self.schedule.due(source_records, now):
            self._fire(index)
            fired = True
        if self._coord_status.get("doomed") and self.coordinator is not None:  # CoordinatorCrashBeforeNotify
            self._kill_coordinator()
            fired = True
        for at, target in list(self._recovery_crashes):
            if now >= at:
                self._recovery_crashes.remove((at, target))
                self._freeze(target, "TaskCrashDuringRecovery")
                fired = True
        return fired

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

    # `FaultActions` (`runtime.jobmaster.faults.actions`)

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
        services = self.services
        handle = {"worker": self.workers[self._worker_of[task_id]], "coordinator": self.coordinator,
                  "committer": services and services.committer and services.committer.actor,
                  "blob_store": services and services.blob_store and services.blob_store.actor}[process]
        if handle is None or not self.processes.kill(handle):
            log.info("barrierflow ray: ProcessKill of the %s process (task %s): no such process running", process, task_id)
