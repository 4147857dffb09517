"""`ControlPlane` against a scripted transport: each row is one message the coordinator decides
on (its fault, a doomed coordinator, the final checkpoint, a source / a task without a listener
/ a listening sink) and what the transport is told to do with it — sent (copies, delay), owed to
the source's next trigger (now, or once a delayed message would have arrived), struck by which
faults, committed, crashed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from runtime.jobmaster.coordination.control_plane import (
    ControlMessage,
    ControlPlane,
    Delivery,
    NotifyCheckpointComplete,
    TriggerCheckpoint,
)
from runtime.jobmaster.faults.schedule import FaultSchedule
from vocabulary.fault_plan import (
    CoordinatorCrashBeforeNotify,
    DelayedControlMessage,
    DuplicatedControlMessage,
    Fault,
    LostControlMessage,
)
from vocabulary.options import CheckpointingMode
from vocabulary.reasons import CheckpointFailureReason


class _ListeningSink(CollectSink):
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)


def _graph() -> Any:
    """source -> to-app -> sink, each its own task: only the (user's) sink listens for completions."""
    env = StreamEnvironment(parallelism=1).disable_chaining()
    env.enable_checkpointing(interval=0.1, mode=CheckpointingMode.EXACTLY_ONCE)
    env.from_collection([{"a": 1}]).map(lambda r: r, name="to-app").sink_to(_ListeningSink("pv"))
    return env.get_job_graph("plane")


GRAPH = _graph()
TASKS = {name: next(t for t in GRAPH.task_ids() if t.vertex.startswith(prefix))
         for name, prefix in (("source", "Source"), ("mid", "to-app"), ("sink", "Sink"))}
NAMES = {task: name for name, task in TASKS.items()}


class ScriptedTransport:
    """Records what the plane tells it, one compact line each; runs scheduled callbacks on `fire()`."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.struck_by: list[str] = []
        self.pending: list[tuple[float, Callable[[], None]]] = []
        self.leading = True
        self.plane: ControlPlane | None = None

    def leads(self) -> bool:
        return self.leading

    def deliver(self, task_id: Any, epoch: int, message: ControlMessage, delivery: Delivery) -> None:
        line = f"{message.kind} {message.checkpoint_id} to {NAMES[task_id]} x{delivery.copies}"
        if delivery.delay:
            line += f" +{delivery.delay}"
        if isinstance(message, NotifyCheckpointComplete) and message.final:
            line += " final"
        if isinstance(message, TriggerCheckpoint) and message.completed is not None:
            line += f" carrying {message.completed}"
        self.log.append(line)

    def struck(self, message: ControlMessage, task_id: Any, faults: Sequence[Fault]) -> None:
        self.struck_by += [f"{type(f).__name__} {message.kind} {NAMES[task_id]}" for f in faults]

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        self.pending.append((delay, callback))

    def fire(self) -> None:
        pending, self.pending = self.pending, []
        for _, callback in pending:
            callback()

    def commit(self, checkpoint_id: int) -> None:
        self.log.append(f"commit {checkpoint_id}")

    def crash(self, checkpoint_id: int) -> None:
        self.log.append(f"crash {checkpoint_id}")

    def fail(self, error: Exception) -> None:
        self.log.append(f"fail {error}")

    def completed(self, completed: Any) -> None:
        self.log.append(f"completed {completed.checkpoint_id}")


def _coordinator(final_id: int | None) -> Any:
    return SimpleNamespace(is_final_checkpoint_complete=final_id is not None, final_checkpoint_id=final_id,
                           restart=lambda sources, tasks: None)


def _plane(faults: Sequence[Any] = (), final_id: int | None = None) -> tuple[ControlPlane, ScriptedTransport]:
    transport = ScriptedTransport()
    plane = ControlPlane(GRAPH, transport)
    transport.plane = plane
    plane.attach(_coordinator(final_id))
    plane.faults = FaultSchedule.for_graph(FaultPlan.of(*faults), GRAPH) if faults else None
    plane.attempt_deployed(0)
    return plane, transport


def _completion(plane: ControlPlane, checkpoint_id: int, tasks: Sequence[str]) -> None:
    """The coordinator's sequence for a completed checkpoint (`CheckpointCoordinator._complete`)."""
    plane.commit_checkpoint(checkpoint_id)
    for name in tasks:
        plane.notify_complete(TASKS[name], checkpoint_id)
    plane.on_checkpoint_completed(SimpleNamespace(checkpoint_id=checkpoint_id))


@dataclass(frozen=True)
class Row:
    """One message: `op` ("complete", "abort", "trigger", "completion": the whole sequence of a
    completed checkpoint to `to`), its fault, whether the coordinator is doomed first (an earlier
    completion struck by `CoordinatorCrashBeforeNotify`), whether checkpoint 5 is the final one,
    and whether an attempt runs."""

    op: str
    to: str
    fault: Any = None
    doomed: bool = False
    final: bool = False
    running: bool = True


@dataclass(frozen=True)
class Outcome:
    """What the transport was told for the row's message; what the source's next trigger carries
    right after (`carried`) and once the scheduled callbacks ran (`carried_late`); the faults
    reported."""

    sent: tuple[str, ...] = ()
    carried: int | None = None
    carried_late: int | None = None
    struck: tuple[str, ...] = ()


LOST, TWICE, LATE = LostControlMessage, DuplicatedControlMessage, DelayedControlMessage

TABLE: list[tuple[str, Row, Outcome]] = [
    # -- routing: a listener hears at once, a source takes it with its trigger, a task without a
    #    listener that is no source takes it from a barrier; the final one goes to every task
    ("listener", Row("complete", "sink"), Outcome(sent=("complete 5 to sink x1",))),
    ("source-owed", Row("complete", "source"), Outcome(carried=5)),
    ("mid-from-barrier", Row("complete", "mid"), Outcome()),
    ("final-to-source", Row("complete", "source", final=True), Outcome(sent=("complete 5 to source x1 final",))),
    ("final-to-mid", Row("complete", "mid", final=True), Outcome(sent=("complete 5 to mid x1 final",))),
    # -- faults on a sent completion: lost on the way, twice, late
    ("listener-lost", Row("complete", "sink", LOST("complete", "Sink: pv[0]")),
     Outcome(sent=("complete 5 to sink x0",), struck=("LostControlMessage complete sink",))),
    ("listener-twice", Row("complete", "sink", TWICE("complete", "Sink: pv[0]")),
     Outcome(sent=("complete 5 to sink x2",), struck=("DuplicatedControlMessage complete sink",))),
    ("listener-late", Row("complete", "sink", LATE("complete", "Sink: pv[0]", delay=0.25)),
     Outcome(sent=("complete 5 to sink x1 +0.25",), struck=("DelayedControlMessage complete sink",))),
    ("final-late", Row("complete", "source", LATE("complete", "Source: collection[0]", delay=0.25), final=True),
     Outcome(sent=("complete 5 to source x1 +0.25 final",), struck=("DelayedControlMessage complete source",))),
    # -- faults on an owed completion: lost is not kept, late is kept late, twice is kept once
    ("owed-lost", Row("complete", "source", LOST("complete", "Source: collection[0]")),
     Outcome(struck=("LostControlMessage complete source",))),
    ("owed-twice", Row("complete", "source", TWICE("complete", "Source: collection[0]")),
     Outcome(carried=5, struck=("DuplicatedControlMessage complete source",))),
    ("owed-late", Row("complete", "source", LATE("complete", "Source: collection[0]", delay=0.25)),
     Outcome(carried_late=5, struck=("DelayedControlMessage complete source",))),
    ("mid-lost", Row("complete", "mid", LOST("complete", "to-app[0]")),
     Outcome(struck=("LostControlMessage complete mid",))),
    # -- triggers and aborts
    ("trigger", Row("trigger", "source"), Outcome(sent=("trigger 5 to source x1",))),
    ("trigger-lost", Row("trigger", "source", LOST("trigger", "Source: collection[0]")),
     Outcome(sent=("trigger 5 to source x0",), struck=("LostControlMessage trigger source",))),
    ("trigger-twice", Row("trigger", "source", TWICE("trigger", "Source: collection[0]")),
     Outcome(sent=("trigger 5 to source x2",), struck=("DuplicatedControlMessage trigger source",))),
    ("abort-to-source", Row("abort", "source"), Outcome(sent=("abort 5 to source x1",))),
    ("abort-late", Row("abort", "mid", LATE("abort", "to-app[0]", delay=0.5)),
     Outcome(sent=("abort 5 to mid x1 +0.5",), struck=("DelayedControlMessage abort mid",))),
    # -- commit before notify; a doomed coordinator sends nothing more
    ("completion", Row("completion", "sink"), Outcome(sent=("commit 5", "complete 5 to sink x1", "completed 5"))),
    ("completion-doomed-here", Row("completion", "sink", CoordinatorCrashBeforeNotify(nth=0)),
     Outcome(sent=("crash 5",))),
    ("doomed-complete", Row("complete", "sink", doomed=True), Outcome()),
    ("doomed-owed", Row("complete", "source", doomed=True), Outcome()),
    ("doomed-trigger", Row("trigger", "source", doomed=True), Outcome()),
    ("doomed-abort", Row("abort", "sink", doomed=True), Outcome()),
    # -- no attempt runs (a failover is under way): nothing is sent, no fault spent on it
    ("no-attempt-abort", Row("abort", "sink", LOST("abort", "Sink: pv[0]"), running=False), Outcome()),
    ("no-attempt-trigger", Row("trigger", "source", running=False), Outcome()),
]


def run(row: Row) -> Outcome:
    faults = [row.fault] if row.fault is not None else []
    if row.doomed:
        faults.append(CoordinatorCrashBeforeNotify(nth=0))
    plane, transport = _plane(faults, final_id=5 if row.final else None)
    if row.doomed:
        plane.commit_checkpoint(4)
        assert transport.log == ["crash 4"] and plane.doomed
        transport.log.clear()
    if not row.running:
        plane.attempt_cancelled()
    task = TASKS[row.to]
    if row.op == "complete":
        plane.notify_complete(task, 5)
    elif row.op == "abort":
        plane.notify_aborted(task, 5, CheckpointFailureReason.DECLINED)
    elif row.op == "trigger":
        plane.trigger_source(task, 5, 1.0)
    else:
        _completion(plane, 5, [row.to])
    sent, struck = tuple(transport.log), tuple(transport.struck_by)
    if isinstance(row.fault, LOST | TWICE | LATE):  # it is spent only on a message to a running attempt
        assert plane.faults is not None and bool(plane.faults.fired) == bool(struck), (plane.faults.fired, struck)
    carried = _next_trigger(plane, transport, 6)
    transport.fire()
    return Outcome(sent, carried, _next_trigger(plane, transport, 7), struck)


def _next_trigger(plane: ControlPlane, transport: ScriptedTransport, checkpoint_id: int) -> int | None:
    """What the source's next trigger carries (the plane's own record of it; a doomed or idle one sends none)."""
    plane.faults = None  # the row's fault struck its own message only
    before = len(transport.log)
    plane.trigger_source(TASKS["source"], checkpoint_id, 2.0)
    sent = transport.log[before:]
    del transport.log[before:]
    if not sent:
        return None
    (line,) = sent
    return int(line.split(" carrying ")[1]) if " carrying " in line else None


@pytest.mark.parametrize(("row", "expected"), [(row, out) for _, row, out in TABLE], ids=[name for name, _, _ in TABLE])
def test_control_plane_table(row: Row, expected: Outcome) -> None:
    assert run(row) == expected


def test_the_final_completion_subsumes_what_a_source_was_owed() -> None:
    plane, transport = _plane(final_id=5)
    plane.notify_complete(TASKS["source"], 3)  # not the final one: owed
    plane.notify_complete(TASKS["source"], 5)
    assert transport.log == ["complete 5 to source x1 final"]
    plane.trigger_source(TASKS["source"], 6, 1.0)
    assert transport.log[-1] == "trigger 6 to source x1", "the final completion subsumed the owed one"


def test_a_late_owed_completion_of_an_ended_attempt_or_a_replaced_coordinator_is_not_kept() -> None:
    late = LATE("complete", "Source: collection[0]", delay=0.25)
    for boundary in ("failover", "new coordinator"):
        plane, transport = _plane([late])
        plane.notify_complete(TASKS["source"], 5)
        if boundary == "failover":
            plane.attempt_cancelled()
            plane.attempt_deployed(1)
        else:
            plane.attach(_coordinator(None))
        transport.fire()
        plane.trigger_source(TASKS["source"], 6, 1.0)
        assert transport.log == ["trigger 6 to source x1"], boundary


def test_every_attempt_after_the_first_restarts_the_coordinator_before_it_is_routed_to() -> None:
    """Both executors deploy an attempt through `attempt_deployed`; the coordinator starts over
    for every attempt but the first, with the job's task lists, and what it aborts doing so goes
    to no attempt."""
    transport = ScriptedTransport()
    plane = ControlPlane(GRAPH, transport)
    transport.plane = plane
    restarts: list[tuple[list[str], list[str]]] = []

    def restart(sources: Sequence[Any], tasks: Sequence[Any]) -> None:
        restarts.append(([str(t) for t in sources], [str(t) for t in tasks]))
        plane.notify_aborted(TASKS["sink"], 4, CheckpointFailureReason.TASK_FAILURE)

    coordinator = _coordinator(None)
    coordinator.restart = restart
    plane.attach(coordinator)
    plane.attempt_deployed(0)
    assert restarts == [], "the first attempt is deployed without a restart"
    plane.attempt_cancelled()
    plane.attempt_deployed(1)
    assert restarts == [([str(t) for t in GRAPH.source_task_ids()], [str(t) for t in GRAPH.task_ids()])]
    assert transport.log == [], "an abort while restarting reached a task"
    plane.attempt_cancelled()
    plane.attempt_deployed(2)
    assert len(restarts) == 2
    plane.trigger_source(TASKS["source"], 5, 1.0)
    assert transport.log == ["trigger 5 to source x1"]


@pytest.mark.parametrize("first", [0, 17])
def test_the_first_attempt_is_the_planes_first_epoch_whatever_its_number(first: int) -> None:
    """On Ray a job's epochs are numbered for the whole driver process (a reused worker drops an
    earlier job's late calls by their epoch): a job's first attempt may be epoch 17, and it is
    deployed without a restart; the next epoch restarts, as attempt 1 does on the simulator."""
    transport = ScriptedTransport()
    plane = ControlPlane(GRAPH, transport, first_epoch=first)
    transport.plane = plane
    restarts: list[int] = []
    coordinator = _coordinator(None)
    coordinator.restart = lambda sources, tasks: restarts.append(plane.epoch)
    plane.attach(coordinator)
    plane.attempt_deployed(first)
    assert restarts == [], "the job's first attempt restarted the coordinator"
    plane.attempt_cancelled()
    plane.attempt_deployed(first + 3)  # (a deployment retried after actors died skips epochs)
    assert len(restarts) == 1
    plane.trigger_source(TASKS["source"], 5, 1.0)
    assert transport.log == ["trigger 5 to source x1"]


def test_a_new_attempt_owes_nothing_and_a_new_coordinator_is_not_doomed() -> None:
    plane, transport = _plane([CoordinatorCrashBeforeNotify(nth=0)])
    plane.notify_complete(TASKS["source"], 3)
    plane.attempt_deployed(1)
    plane.trigger_source(TASKS["source"], 4, 1.0)
    assert transport.log == ["trigger 4 to source x1"]
    plane.commit_checkpoint(4)
    plane.notify_complete(TASKS["sink"], 4)
    assert transport.log[-1] == "crash 4" and plane.doomed
    plane.attach(_coordinator(None))
    plane.notify_complete(TASKS["sink"], 5)
    assert transport.log[-1] == "complete 5 to sink x1"


def test_a_coordinator_that_lost_its_process_or_its_leadership_sends_no_trigger() -> None:
    plane, transport = _plane()
    plane.notify_complete(TASKS["source"], 3)
    transport.leading = False
    plane.trigger_source(TASKS["source"], 4, 1.0)
    assert transport.log == []
    transport.leading = True
    plane.trigger_source(TASKS["source"], 5, 1.0)
    assert transport.log == ["trigger 5 to source x1 carrying 3"], "a trigger not sent took nothing"
    plane.coordinator_lost()
    plane.notify_aborted(TASKS["sink"], 5, CheckpointFailureReason.COORDINATOR_SHUTDOWN)
    plane.trigger_source(TASKS["source"], 6, 1.0)
    assert transport.log == ["trigger 5 to source x1 carrying 3"]


def test_too_many_failures_fail_the_job() -> None:
    plane, transport = _plane()
    plane.fail_job(RuntimeError("exceeded"))
    assert transport.log == ["fail exceeded"]
