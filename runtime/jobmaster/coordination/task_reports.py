"""A task's way back to its coordinator — its acknowledgements and the snapshot writes they wait
for — decided once, for every executor.

The `ControlPlane` decides what becomes of the coordinator's messages to the tasks; this module
decides the other direction. The plan's faults are resolved elsewhere (`FaultSchedule.control`
/ `write` on the simulator, which sees every occurrence; `AttemptFaults.ack` / `write` in a Ray
task actor, which counts its own); what they *do* is decided here, and an executor supplies only
a port that carries, writes, discards and records:

1. **An acknowledgement** (`send_acknowledgement`) goes as its `ControlEffect` says: lost (0
   copies: the coordinator never hears of it; the checkpoint times out or a later one subsumes
   it), `copies` times (`DuplicatedControlMessage`: the coordinator ignores the repeat), or
   `delay` seconds late (`DelayedControlMessage`: a later acknowledgement may overtake it). The
   faults that struck it are reported first (for the executor's trace).
2. **A snapshot write** (`write_snapshot_files`) with its `WriteFaults`, decided when the write
   starts: `StorageWriteFailure` raises the injected `StorageError` without writing;
   `TornWrite` writes with the first file torn and reports success (the port names the file torn,
   and the restore's verification finds it later); a `SlowStorage` window makes it `slowdown`
   times longer (`write_started` reports it; the executor stretches the write's time). Any
   `StorageError` the write raises is its outcome, never an escape.
3. **The outcome at the task** (`snapshot_written`): a write reported in an attempt that ended is
   discarded; a failed one the task declines (`Task.on_snapshot_failed`: the reason is
   `CheckpointFailureReason.STORAGE_FAILURE`); a written one the task acknowledges, unless it no
   longer wants it (cancelled or aborted meanwhile: `on_snapshot_written` says False), and then
   its files are discarded — an orphan at worst, never a wrong checkpoint.

Pure: no clock, timers or I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from checkpoint.storage.layout import StorageError
from runtime.jobmaster.coordination.control_plane import Delivery
from runtime.jobmaster.faults.schedule import ControlEffect, WriteEffect
from vocabulary.fault_plan import Fault
from vocabulary.handles import TaskAcknowledgement, TaskId

# ---------------------------------------------------------------------- acknowledgements


class AcknowledgementPort(Protocol):
    """What an executor does with a task's acknowledgement."""

    def struck(self, ack: TaskAcknowledgement, faults: Sequence[Fault], lost: bool) -> None:
        """`faults` struck `ack` (`lost`: together they lose it), for the executor's trace."""
        ...

    def carry(self, ack: TaskAcknowledgement, delivery: Delivery) -> None:
        """Carry `ack` to the coordinator as `delivery` says (0 copies: it is lost on the way)."""
        ...


def send_acknowledgement(ack: TaskAcknowledgement, effect: ControlEffect, port: AcknowledgementPort) -> None:
    """A task acknowledges: `ack` goes to the coordinator as the plan's `effect` on it says."""
    if effect.faults:
        port.struck(ack, effect.faults, effect.lost)
    port.carry(ack, Delivery.of(effect))


# ---------------------------------------------------------------------- snapshot writes


@dataclass(frozen=True)
class WriteFaults:
    """What the plan does to one snapshot write, decided when it starts.

    Attributes:
        fail: `StorageWriteFailure`: the write raises `StorageError` and writes nothing.
        tear: `TornWrite`'s (keep, garble): the first file lands partially, the write reports success.
        slowdown: how many times longer the write takes (`SlowStorage`; 1.0: normal).
    """

    fail: bool = False
    tear: tuple[float, bool] | None = None
    slowdown: float = 1.0

    @classmethod
    def of(cls, effect: WriteEffect | None, slowdown: float = 1.0) -> WriteFaults:
        """The faults of a write from the `FaultSchedule`'s `effect` (None: no plan)."""
        if effect is None:
            return cls(slowdown=slowdown)
        tear = (effect.tear.keep, effect.tear.garble) if effect.tear is not None else None
        return cls(fail=effect.fail, tear=tear, slowdown=slowdown)


NO_WRITE_FAULTS = WriteFaults()


class SnapshotStoragePort(Protocol):
    """What an executor does for one snapshot write: write its files (whole or torn), record a
    fault's effect. A write that fails raises `StorageError`."""

    def write(self) -> Any:
        """Write the snapshot's files; their handles."""
        ...

    def write_torn(self, keep: float, garble: bool) -> tuple[Any, str | None]:
        """Write the snapshot's files, the first one torn (`TornWrite`): the handles, and the path
        torn (None: nothing was written)."""
        ...

    def struck(self, fault: str, detail: Any) -> None:
        """Fault `fault` ("SlowStorage": `detail` the slowdown; "TornWrite": the path torn, None if
        the write put no file) struck this write, for the executor's trace or counts."""
        ...


@dataclass(frozen=True)
class WriteOutcome:
    """A snapshot write's result: the files' `handles`, or the `error` it failed with."""

    handles: Any = None
    error: StorageError | None = None


def write_started(faults: WriteFaults, port: SnapshotStoragePort) -> float:
    """A snapshot write starts: how many times longer than normal it takes (reported if > 1)."""
    if faults.slowdown > 1.0:
        port.struck("SlowStorage", faults.slowdown)
    return faults.slowdown


def injected_write_failure(task_id: TaskId, checkpoint_id: int) -> StorageError:
    """The error a `StorageWriteFailure` makes a write of `task_id`'s snapshot raise."""
    return StorageError(f"injected storage failure writing {task_id} chk-{checkpoint_id}")


def write_snapshot_files(task_id: TaskId, checkpoint_id: int, faults: WriteFaults,
                         port: SnapshotStoragePort) -> WriteOutcome:
    """Write the snapshot `checkpoint_id` of `task_id` through `port`, as `faults` let it."""
    try:
        if faults.fail:
            raise injected_write_failure(task_id, checkpoint_id)
        if faults.tear is None:
            return WriteOutcome(handles=port.write())
        handles, torn = port.write_torn(*faults.tear)
    except StorageError as exc:
        return WriteOutcome(error=exc)
    port.struck("TornWrite", torn)
    return WriteOutcome(handles=handles)


def snapshot_written(task: Any, checkpoint_id: int, outcome: WriteOutcome, seconds: float, cpu: float,
                     discard: Callable[[Any], None], live: bool = True) -> None:
    """The write of `task`'s snapshot `checkpoint_id` ended with `outcome` after `seconds` (`cpu` of
    them on the task's CPU); `live`: its attempt still runs. The task declines or acknowledges it,
    or its files are `discard`ed."""
    if not live:
        if outcome.handles is not None:
            discard(outcome.handles)
        return
    if outcome.error is not None:
        task.on_snapshot_failed(checkpoint_id, outcome.error)
    elif not task.on_snapshot_written(checkpoint_id, outcome.handles, seconds, cpu):
        discard(outcome.handles)
