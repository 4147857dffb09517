"""`TaskFaultInjection`: the faults of a run's `FaultPlan` that a task slot applies itself.

The driver resolves the plan (`runtime.jobmaster.faults.schedule`) and gives each attempt's task
its share as offsets from the attempt's start (`runtime.jobmaster.faults.counts.AttemptFaults`,
in `deploy`), or calls an entry point below when a fault placed at a time or at the sources'
progress strikes:

* `TaskCrash`: after N records the work thread freezes the task (`_freeze`); at a time the
  driver calls `freeze`. A frozen task ignores every later call and says so in its heartbeat;
  the driver then kills its worker, so the crash lands at that exact point.
* Acknowledgements: lost (`LostAcknowledgement`, `LostControlMessage("ack")`), sent twice
  (`DuplicatedControlMessage`) or late (`DelayedControlMessage`, on a timer, so later ones may
  overtake it), as `runtime.jobmaster.coordination.task_reports.send_acknowledgement` decides.
* `ChannelStall` (`stall`): every input is held back, then delivered in arrival order;
  `TaskStall` (`hang`): the task holds its lock and takes no step; `ChannelDelay`
  (`delay_channel`): what it sends on one output arrives late; `SlowStorage` (`slow_writes`):
  its state writes take longer (applied on the writer thread, `runtime.ray.snapshot_uploads`,
  with failed and torn writes).

The attempt counts its records, acknowledgements and writes and reports them (heartbeat,
`cancel`), so the driver's `FaultSchedule` counts over the whole run.

A part of `runtime.ray.task_actor.TaskActor`, which holds the state it works on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from runtime.jobmaster.coordination.control_plane import Delivery
from runtime.jobmaster.coordination.task_reports import send_acknowledgement
from runtime.jobmaster.faults.counts import AttemptFaults
from vocabulary.fault_plan import Fault
from vocabulary.handles import TaskAcknowledgement


class TaskFaultInjection:
    """The faults a task slot applies itself (see the module docstring)."""

    def _arm_faults(self, faults: dict[str, Any]) -> None:
        """A new attempt: its faults, counting from zero, and no crash or stall yet."""
        #: the faults this attempt applies itself, and what it counted (`runtime.jobmaster.faults.counts`)
        self._faults = AttemptFaults(faults)
        self._frozen = False
        #: `ChannelStall`: input is held until this wall time, and what it held, in arrival order
        self._stalled_until = 0.0
        self._stalled: deque[tuple[int, int, list[Any]]] = deque()

    def _holds_input(self) -> bool:
        """Input arriving now waits (`ChannelStall`, or input held before it still waits)."""
        return bool(self._stalled) or time.time() < self._stalled_until

    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        """`TaskPorts`: to the coordinator, through the worker's reports, as
        `send_acknowledgement` decides on the plan's faults."""
        send_acknowledgement(ack, self._faults.ack(), _Acknowledgements(self))

    def stall(self, epoch: int, duration: float) -> None:
        """`ChannelStall`: hold every input back for `duration` seconds, then deliver in order."""
        with self._lock:
            self._drain_inbox()
            if self._live(epoch):
                self._stalled_until = time.time() + duration
                self._timers.schedule(duration, self._bound(self._unstall))

    def _unstall(self) -> None:
        while self._stalled and not self._dead:
            self._accept(*self._stalled.popleft())

    def hang(self, epoch: int, duration: float) -> None:
        """`TaskStall`: the task hangs `duration` seconds (a GC pause, a stuck call). It holds the
        lock, so its work thread takes no step; the actor's calls are serial, so input, control
        messages and heartbeats wait behind this one; its timers and finished writes queue as
        mail. It then resumes where it stopped."""
        with self._lock:
            if self._live(epoch):
                time.sleep(duration)

    def delay_channel(self, epoch: int, out_index: int, start: float, end: float, extra: float) -> None:
        """`ChannelDelay`: what this task sends on `out_index` in [start, end) arrives `extra` s later."""
        with self._lock:
            self._drain_inbox()
            if self._live(epoch):
                self.outputs.spike(out_index, start, end, extra)

    def slow_writes(self, epoch: int, start: float, end: float, factor: float) -> None:
        """`SlowStorage`: state writes started in [start, end) (wall time) take `factor` times longer."""
        with self._lock:
            if self._live(epoch):
                self._faults.slow_windows.append((start, end, factor))

    def freeze(self, epoch: int) -> None:
        """`TaskCrash` at a time: freeze now; the driver kills the actor once a heartbeat says so."""
        with self._lock:
            if self._live(epoch):
                self._freeze()

    def _freeze(self) -> None:
        self._dead = True
        self._frozen = True
        self._timers.clear()


class _Acknowledgements:
    """`AcknowledgementPort` of one task slot: through its worker's reports, a late one on a timer
    (so later acknowledgements may overtake it)."""

    def __init__(self, slot: TaskFaultInjection) -> None:
        self.slot = slot

    def struck(self, ack: TaskAcknowledgement, faults: Sequence[Fault], lost: bool) -> None:
        """Nothing to record: the driver counts what struck (`RunCounts.attempt_ended`)."""

    def carry(self, ack: TaskAcknowledgement, delivery: Delivery) -> None:
        if delivery.copies == 0:
            return  # lost on the way
        slot: Any = self.slot
        if slot._trace is not None:
            slot._trace.append((time.time(), "ack", ack.checkpoint_id, str(ack.task_id)))
        epoch, coordinator, reports = slot.epoch, slot._coordinator, slot._reports

        def send() -> None:
            for _ in range(delivery.copies):
                reports.ack(coordinator, epoch, ack)

        if delivery.delay > 0:
            slot._timers.schedule(delivery.delay, send)
        else:
            send()
