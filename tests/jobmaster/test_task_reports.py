"""A task's way back to its coordinator against scripted ports: each row is one acknowledgement or
one snapshot write with the plan's faults on it, and what the port is told to do — carried (copies,
delay) or lost, struck by which faults, written whole or torn, declined, acknowledged, discarded.

The acknowledgement rows run twice: with the effect the simulator asks the run's `FaultSchedule`
for, and with the one a Ray task actor takes from its attempt's `AttemptFaults` (the offsets the
driver handed it); both must carry the acknowledgement the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from checkpoint.storage.layout import StorageError
from runtime import FaultPlan
from runtime.core.subtask_checkpoint import SubtaskCheckpointCoordinator
from runtime.jobmaster.coordination.control_plane import Delivery
from runtime.jobmaster.coordination.task_reports import (
    WriteFaults,
    send_acknowledgement,
    snapshot_written,
    write_snapshot_files,
    write_started,
)
from runtime.jobmaster.faults.counts import AttemptFaults, RunCounts
from runtime.jobmaster.faults.schedule import FaultSchedule
from vocabulary.fault_plan import (
    DelayedControlMessage,
    DuplicatedControlMessage,
    Fault,
    LostAcknowledgement,
    LostControlMessage,
    StorageWriteFailure,
    TornWrite,
)
from vocabulary.handles import TaskAcknowledgement, TaskId
from vocabulary.reasons import CheckpointFailureReason

TASK = TaskId("count", 0)
TASKS = [TaskId("source", 0), TASK]

# ---------------------------------------------------------------------- acknowledgements


class ScriptedAcknowledgements:
    """Records what `send_acknowledgement` tells it, one compact line each."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def struck(self, ack: TaskAcknowledgement, faults: Sequence[Fault], lost: bool) -> None:
        self.log += [f"struck {type(f).__name__}{' lost' if lost else ''}" for f in faults]

    def carry(self, ack: TaskAcknowledgement, delivery: Delivery) -> None:
        self.log.append(f"ack {ack.checkpoint_id} x{delivery.copies}" + (f" +{delivery.delay}" if delivery.delay else ""))


#: (name, the faults on the task's acknowledgement nth=0, what the port does with it)
ACK_TABLE: list[tuple[str, tuple[Fault, ...], list[str]]] = [
    ("no fault: carried once", (), ["ack 1 x1"]),
    ("LostAcknowledgement: carried zero times", (LostAcknowledgement(task="count[0]"),),
     ["struck LostAcknowledgement lost", "ack 1 x0"]),
    ("LostControlMessage ack: carried zero times", (LostControlMessage("ack", task="count[0]"),),
     ["struck LostControlMessage lost", "ack 1 x0"]),
    ("DuplicatedControlMessage ack: carried twice", (DuplicatedControlMessage("ack", task="count[0]"),),
     ["struck DuplicatedControlMessage", "ack 1 x2"]),
    ("DelayedControlMessage ack: carried late", (DelayedControlMessage("ack", task="count[0]", delay=0.3),),
     ["struck DelayedControlMessage", "ack 1 x1 +0.3"]),
    ("duplicated and delayed: both", (DuplicatedControlMessage("ack", task="count[0]"),
                                      DelayedControlMessage("ack", task="count[0]", delay=0.3)),
     ["struck DuplicatedControlMessage", "struck DelayedControlMessage", "ack 1 x2 +0.3"]),
    ("lost and duplicated: lost wins", (DuplicatedControlMessage("ack", task="count[0]"),
                                        LostAcknowledgement(task="count[0]")),
     ["struck DuplicatedControlMessage lost", "struck LostAcknowledgement lost", "ack 1 x0"]),
]


def _schedule(faults: Sequence[Fault]) -> FaultSchedule:
    return FaultSchedule(FaultPlan.of(*faults), TASKS, [TASKS[0]], {TASK: 1}, dict.fromkeys(TASKS, 10), 10)


@pytest.mark.parametrize(("faults", "expected"), [(f, out) for _, f, out in ACK_TABLE],
                         ids=[name for name, _, _ in ACK_TABLE])
def test_acknowledgement_table(faults: tuple[Fault, ...], expected: list[str]) -> None:
    ack = TaskAcknowledgement(TASK, 1)
    simulator = ScriptedAcknowledgements()  # the run's schedule sees the occurrence
    send_acknowledgement(ack, _schedule(faults).control("ack", TASK), simulator)
    assert simulator.log == expected
    ray = ScriptedAcknowledgements()  # the attempt counts for itself from the driver's offsets
    send_acknowledgement(ack, AttemptFaults(RunCounts(_schedule(faults), TASKS).task_faults(TASK, 0.0)).ack(), ray)
    assert [line for line in ray.log if not line.startswith("struck")] == expected[-1:]


def test_an_attempt_strikes_its_nth_acknowledgement_counted_from_the_run() -> None:
    """The second attempt's first acknowledgement is the run's third: the fault on nth=2 strikes it
    there, not the first attempt's (whose counts the driver took at its end)."""
    counts = RunCounts(_schedule([LostAcknowledgement(task="count[0]", nth=2)]), TASKS)
    first = AttemptFaults(counts.task_faults(TASK, 0.0))
    assert [first.ack().lost for _ in range(2)] == [False, False]
    counts.attempt_ended(TASK, first.counts())
    second = AttemptFaults(counts.task_faults(TASK, 1.0))
    port = ScriptedAcknowledgements()
    send_acknowledgement(TaskAcknowledgement(TASK, 7), second.ack(), port)
    send_acknowledgement(TaskAcknowledgement(TASK, 8), second.ack(), port)
    assert port.log == ["ack 7 x0", "ack 8 x1"]


# ---------------------------------------------------------------------- snapshot writes


@dataclass
class ScriptedStorage:
    """A `SnapshotStoragePort` that records; `raises`: what its writes raise."""

    raises: BaseException | None = None
    log: list[str] = field(default_factory=list)

    def write(self) -> Any:
        self.log.append("write")
        if self.raises is not None:
            raise self.raises
        return "handles"

    def write_torn(self, keep: float, garble: bool) -> tuple[Any, str | None]:
        self.log.append(f"write torn keep={keep} garble={garble}")
        if self.raises is not None:
            raise self.raises
        return "handles", "chk-1/count[0].keyed"

    def struck(self, fault: str, detail: Any) -> None:
        self.log.append(f"struck {fault} {detail}")


@dataclass
class ScriptedTask:
    """The task's side of a write's outcome; `wants`: whether it still wants the snapshot."""

    wants: bool = True
    log: list[str] = field(default_factory=list)

    def on_snapshot_failed(self, checkpoint_id: int, error: BaseException) -> None:
        self.log.append(f"declines {checkpoint_id}: {error}")

    def on_snapshot_written(self, checkpoint_id: int, handles: Any, seconds: float, cpu: float) -> bool:
        self.log.append(f"acknowledges {checkpoint_id} with {handles} after {seconds}s")
        return self.wants


@dataclass(frozen=True)
class WriteRow:
    """One snapshot write: its faults, what the storage raises, whether the task still wants it
    when the write ends, and whether its attempt still runs then."""

    faults: WriteFaults = WriteFaults()
    raises: BaseException | None = None
    wants: bool = True
    live: bool = True


INJECTED = "declines 1: injected storage failure writing count[0] chk-1"
#: (name, row, the storage's log, the task's log, the handles discarded)
WRITE_TABLE: list[tuple[str, WriteRow, list[str], list[str], list[Any]]] = [
    ("no fault: written, acknowledged", WriteRow(), ["write"], ["acknowledges 1 with handles after 2.0s"], []),
    ("StorageWriteFailure: nothing written, declined", WriteRow(WriteFaults(fail=True)), [], [INJECTED], []),
    ("TornWrite: torn, reported, acknowledged", WriteRow(WriteFaults(tear=(0.25, True))),
     ["write torn keep=0.25 garble=True", "struck TornWrite chk-1/count[0].keyed"],
     ["acknowledges 1 with handles after 2.0s"], []),
    ("StorageWriteFailure and TornWrite: the failure wins", WriteRow(WriteFaults(fail=True, tear=(0.5, False))),
     [], [INJECTED], []),
    ("the storage fails: declined", WriteRow(raises=StorageError("disk full")), ["write"],
     ["declines 1: disk full"], []),
    ("the storage fails a torn write: declined, no tear reported",
     WriteRow(WriteFaults(tear=(0.5, False)), raises=StorageError("disk full")),
     ["write torn keep=0.5 garble=False"], ["declines 1: disk full"], []),
    ("the task no longer wants it: discarded", WriteRow(wants=False), ["write"],
     ["acknowledges 1 with handles after 2.0s"], ["handles"]),
    ("its attempt ended: discarded, the task told nothing", WriteRow(live=False), ["write"], [], ["handles"]),
    ("its attempt ended after a failure: nothing", WriteRow(WriteFaults(fail=True), live=False), [], [], []),
]


@pytest.mark.parametrize(("row", "storage_log", "task_log", "discarded"),
                         [case[1:] for case in WRITE_TABLE], ids=[case[0] for case in WRITE_TABLE])
def test_snapshot_write_table(row: WriteRow, storage_log: list[str], task_log: list[str], discarded: list[Any]) -> None:
    storage, task, discards = ScriptedStorage(row.raises), ScriptedTask(row.wants), []
    outcome = write_snapshot_files(TASK, 1, row.faults, storage)
    snapshot_written(task, 1, outcome, 2.0, 0.5, discards.append, live=row.live)
    assert (storage.log, task.log, discards) == (storage_log, task_log, discarded)


def test_an_error_that_is_no_storage_error_escapes() -> None:
    """A bug in the write (not the storage failing) is not hidden as a declined checkpoint."""
    with pytest.raises(ZeroDivisionError):
        write_snapshot_files(TASK, 1, WriteFaults(), ScriptedStorage(ZeroDivisionError()))


@pytest.mark.parametrize(("slowdown", "log"), [(1.0, []), (20.0, ["struck SlowStorage 20.0"])])
def test_a_slow_storage_window_stretches_the_write_and_is_reported(slowdown: float, log: list[str]) -> None:
    storage = ScriptedStorage()
    assert write_started(WriteFaults(slowdown=slowdown), storage) == slowdown
    assert storage.log == log


def test_the_schedules_write_effect_is_the_writes_faults() -> None:
    """The simulator's `FaultSchedule.write` and a Ray attempt's `AttemptFaults.write` give the same
    write the same faults."""
    plan = [StorageWriteFailure(task="count[0]", nth=1), TornWrite(task="count[0]", nth=2, keep=0.2, garble=True)]
    schedule = _schedule(plan)
    simulator = [WriteFaults.of(schedule.write(TASK)) for _ in range(3)]
    attempt = AttemptFaults(RunCounts(_schedule(plan), TASKS).task_faults(TASK, 0.0))
    ray = [WriteFaults(*attempt.write()) for _ in range(3)]
    assert simulator == ray == [WriteFaults(), WriteFaults(fail=True), WriteFaults(tear=(0.2, True))]
    assert WriteFaults.of(None, 3.0) == WriteFaults(slowdown=3.0)


@pytest.mark.parametrize(("cancelled", "declined"), [(False, [(3, CheckpointFailureReason.STORAGE_FAILURE)]),
                                                     (True, [])])
def test_a_failed_write_declines_as_a_storage_failure_unless_cancelled(cancelled: bool, declined: list[Any]) -> None:
    """The outcome reaches a task's real checkpointing: a failed write declines its checkpoint as a
    storage failure; one cancelled meanwhile declines nothing (the coordinator aborted it)."""
    ports = SimpleNamespace(declined=[])
    ports.decline = lambda task_id, checkpoint_id, reason: ports.declined.append((checkpoint_id, reason))
    checkpoints = SubtaskCheckpointCoordinator(TASK, ports, clock=SimpleNamespace(now=lambda: 0.0))
    checkpoints.in_flight[3] = SimpleNamespace()
    if cancelled:
        checkpoints.cancel(3)
    outcome = write_snapshot_files(TASK, 3, WriteFaults(fail=True), ScriptedStorage())
    snapshot_written(checkpoints, 3, outcome, 0.0, 0.0, lambda handles: None)
    assert ports.declined == declined
