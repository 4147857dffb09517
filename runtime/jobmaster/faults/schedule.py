"""`FaultSchedule`: a `FaultPlan` resolved against one job, once per run — the plan's one meaning
on every executor.

The simulator and the Ray executor both build one `FaultSchedule` when a run starts and keep it
for the whole run, across every execution attempt (failover), so the same plan breaks the same
things at the same logical points on both:

* Targets. A fault that names no task gets one drawn from the *plan's* seed (`FaultPlan.seed`;
  the executor's `seed` plays no part), in plan order: a "trigger" control fault draws among the
  sources, a `ChannelDelay` among the tasks with input channels (and then its channel).
* Record points. `TaskCrash(after_records=N)` fires when its task has handled N records, counted
  over the run (records handled again after a restore count again); `TaskCrash(at_fraction=f)`
  is `after_records = max(1, int(f * expected))`, `expected` the records the task handles in a
  failure-free run (`expected_records`), or the end of the task's input, whichever comes first:
  `expected` spreads every source record over the task's vertex, so a task behind a filter (or
  one whose keys or splits are skewed) may never handle that many; it then crashes once its
  input ended (a source read its splits; another task took the final checkpoint's barrier,
  which follows every record), before it reports it (`crash_due(input_ended=True)`). An
  explicit `after_records` is a number of records and never fires early. A task has at most one
  crash pending: a second one waits until the first fired.
* Progress points. Every other `at_fraction` fault (`CoordinatorCrash`, `ChannelStall`,
  `TaskStall`, `SlowStorage`, `ChannelDelay`, `ProcessKill`) starts when the job's sources have read
  `max(1, int(f * total))` records, counted over the run (`total`: what they read in a
  failure-free run). Records, not time: a simulator's virtual second and a Ray wall second are
  not the same amount of work. `due()` answers which are due.
* Times. `at=` stays seconds since the job started: virtual seconds on the simulator, wall
  seconds on Ray (since the first deployment) — the one field whose logical point differs
  between executors; `timed()` lists them for the executor to schedule.
* Occurrences. The `nth` of `LostAcknowledgement`, `StorageWriteFailure`, `TornWrite` and the
  control-message faults counts the acknowledgements, state writes or control messages of its
  task over the whole run, across attempts: an executor that sees each occurrence asks
  `control()` / `write()`; one whose processes count them (Ray's task actors) takes `upcoming()`
  when an attempt starts and reports what was counted with `advance()` when it ends.
  `CoordinatorStorageFailure` counts the coordinator's storage writes of its kind over the run
  (`coordinator_write()`; "any": every counter and metadata write), task None: a replaced
  coordinator continues the count the same way (`counts()` / `advance()`).
* Once. Each fault fires at most once per run (`fired`).

Pure: no I/O, no clock (the executor passes its time in), no executor imports.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vocabulary.fault_plan import (
    ChannelDelay,
    ChannelStall,
    CoordinatorCrash,
    CoordinatorCrashBeforeNotify,
    CoordinatorStorageFailure,
    DelayedControlMessage,
    DuplicatedControlMessage,
    Fault,
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
    resolve_task,
)
from vocabulary.handles import TaskId

_CONTROL = (LostControlMessage, DuplicatedControlMessage, DelayedControlMessage)
#: the kinds an `at_fraction` starts at a point of the sources' progress
_PROGRESS = (CoordinatorCrash, ChannelStall, TaskStall, SlowStorage, ChannelDelay, ProcessKill)


@dataclass(frozen=True)
class ControlEffect:
    """What happens to one control message: `lost`, or `copies` deliveries `delay` seconds late."""

    lost: bool = False
    copies: int = 1
    delay: float = 0.0
    faults: tuple[Fault, ...] = ()


DELIVER = ControlEffect()


@dataclass(frozen=True)
class WriteEffect:
    """What happens to one state write."""

    fail: bool = False
    tear: TornWrite | None = None


def expected_records(graph: Any) -> dict[TaskId, int]:
    """Records each task of `graph` handles in a failure-free run, roughly: all the sources'
    records spread over the task's vertex (fault placement only)."""
    total = expected_source_records(graph)
    return {t: max(1, total // max(1, graph.vertex(t.vertex).parallelism)) for t in graph.task_ids()}


def expected_source_records(graph: Any) -> int:
    """Records the sources of `graph` read in a failure-free run."""
    return sum(v.source.expected_records() for v in graph.vertices if v.source is not None)


class FaultSchedule:
    """One plan resolved against one job for one run; the fired faults and occurrence counters
    live as long as the run, across attempts. See the module docstring.

    Args:
        plan: the faults.
        task_ids: every task of the job.
        source_ids: the source tasks (the only ones a "trigger" message goes to).
        num_inputs: input channels per task (a `ChannelDelay` needs one).
        expected: records each task handles in a failure-free run (`expected_records`).
        source_total: records the sources read in a failure-free run.

    Raises:
        ValueError: a fault names an unknown task, a "trigger" fault a task that is no source, or a
            `ChannelDelay` a task without input channels or a channel it does not have.
    """

    def __init__(self, plan: FaultPlan, task_ids: Sequence[TaskId], source_ids: Sequence[TaskId],
                 num_inputs: Mapping[TaskId, int], expected: Mapping[TaskId, int], source_total: int) -> None:
        self.plan = plan
        #: whether a `ChannelDelay` is planned (asked at every send)
        self.delays_channels = any(isinstance(f, ChannelDelay) for f in plan.faults)
        #: indices (in `plan.faults`) of the faults that fired, in firing order
        self.fired: list[int] = []
        self._fired: set[int] = set()
        rng = random.Random(plan.seed)
        names = [str(t) for t in task_ids]
        sources = [str(t) for t in source_ids]
        with_inputs = [str(t) for t in task_ids if num_inputs.get(t, 0) > 0]
        self._targets: dict[int, TaskId] = {}
        self._channels: dict[int, int] = {}
        self._crashes: dict[TaskId, list[tuple[int, int]]] = {}  # task -> [(records, index)]
        #: indices of the crashes placed `at_fraction`: the end of the task's input bounds them
        self._bounded: set[int] = set()
        self._progress: list[tuple[int, int]] = []  # [(source records, index)]
        self._timed: list[tuple[float, int]] = []
        self._windows: dict[int, float] = {}  # index -> start (SlowStorage, ChannelDelay)
        self._occurrences: dict[tuple[str, TaskId | None], list[int]] = {}  # (what, task) -> [index]
        self._counts: dict[tuple[str, TaskId | None], int] = {}
        self._notify_crashes: dict[int, int] = {}  # nth completion -> index
        self._last_completed: int | None = None
        self._recovery_crashes: dict[int, list[int]] = {}
        self._recoveries = 0
        for index, fault in enumerate(plan.faults):
            if hasattr(fault, "task"):
                candidates = names
                if isinstance(fault, ChannelDelay):
                    candidates = with_inputs
                elif isinstance(fault, _CONTROL) and fault.kind == "trigger":
                    candidates = sources
                target = TaskId.parse(resolve_task(fault.task, names, rng) if fault.task is not None
                                      else rng.choice(sorted(candidates)) if candidates
                                      else resolve_task(None, names, rng))
                self._targets[index] = target
                _check_target(fault, target, candidates)
            if isinstance(fault, ChannelDelay):
                target = self._targets[index]
                channel = fault.channel if fault.channel is not None else rng.randrange(num_inputs[target])
                if not 0 <= channel < num_inputs[target]:
                    raise ValueError(f"{fault!r} names input channel {channel} of task {target}, which has "
                                     f"channels 0..{num_inputs[target] - 1}")
                self._channels[index] = channel
            if isinstance(fault, TaskCrash) and fault.at is None:
                after = fault.after_records
                if after is None:
                    after = max(1, int(_fraction(fault) * expected.get(self._targets[index], 1)))
                    self._bounded.add(index)
                self._crashes.setdefault(self._targets[index], []).append((after, index))
            elif isinstance(fault, (TaskCrash, *_PROGRESS)):
                if fault.at is not None:
                    self._timed.append((fault.at, index))
                    if isinstance(fault, SlowStorage | ChannelDelay):
                        self._windows[index] = fault.at
                else:
                    self._progress.append((max(1, int(_fraction(fault) * source_total)), index))
            elif isinstance(fault, LostAcknowledgement):
                self._occurrences.setdefault(("ack", self._targets[index]), []).append(index)
            elif isinstance(fault, _CONTROL):
                self._occurrences.setdefault((fault.kind, self._targets[index]), []).append(index)
            elif isinstance(fault, StorageWriteFailure | TornWrite):
                self._occurrences.setdefault(("write", self._targets[index]), []).append(index)
            elif isinstance(fault, CoordinatorCrashBeforeNotify):
                self._notify_crashes.setdefault(fault.nth, index)
            elif isinstance(fault, TaskCrashDuringRecovery):
                self._recovery_crashes.setdefault(fault.nth, []).append(index)
            elif isinstance(fault, CoordinatorStorageFailure):
                self._occurrences.setdefault((_coordinator_write(fault.what), None), []).append(index)
        self._progress.sort()

    @classmethod
    def for_graph(cls, plan: FaultPlan, graph: Any) -> FaultSchedule:
        """The schedule of `plan` on job graph `graph` (what both executors build)."""
        task_ids = graph.task_ids()
        sources = [t for t in task_ids if graph.vertex(t.vertex).source is not None]
        num_inputs = {t: len(graph.input_channels(t.vertex, t.subtask)) for t in task_ids}
        return cls(plan, task_ids, sources, num_inputs, expected_records(graph), expected_source_records(graph))

    # ------------------------------------------------------------------ resolution

    def target(self, fault: Fault | int) -> TaskId:
        """The task `fault` (or the fault at that index) strikes."""
        return self._targets[self._index(fault)]

    def channel(self, fault: Fault | int) -> int:
        """The input channel a `ChannelDelay` strikes."""
        return self._channels[self._index(fault)]

    def _index(self, fault: Fault | int) -> int:
        if isinstance(fault, int):
            return fault
        return next(i for i, f in enumerate(self.plan.faults) if f is fault)

    def fire(self, index: int) -> bool:
        """Mark the fault at `index` fired; False if it had fired already (it fires once a run)."""
        if index in self._fired:
            return False
        self._fired.add(index)
        self.fired.append(index)
        return True

    def timed(self) -> list[tuple[float, int, Fault]]:
        """The faults placed at a time (`at=`, seconds since the job started): (at, index, fault)."""
        return [(at, i, self.plan.faults[i]) for at, i in self._timed]

    def due(self, source_records: int, now: float) -> list[tuple[int, Fault]]:
        """The progress-placed faults due once the sources read `source_records` over the run, each
        returned once, marked fired; a `SlowStorage` / `ChannelDelay` window opens at `now`."""
        out = []
        while self._progress and self._progress[0][0] <= source_records:
            _, index = self._progress.pop(0)
            if self.fire(index):
                if isinstance(self.plan.faults[index], SlowStorage | ChannelDelay):
                    self._windows[index] = now
                out.append((index, self.plan.faults[index]))
        return out

    # ------------------------------------------------------------------ task crashes after records

    def next_crash(self, task_id: TaskId) -> int | None:
        """The record count (over the run) at which `task_id` crashes next (None: no crash pending)."""
        pending = self._crashes.get(task_id)
        return min(pending)[0] if pending else None

    def crash_at_end_of_input(self, task_id: TaskId) -> bool:
        """Whether the next crash of `task_id` also fires at the end of its input (`at_fraction`)."""
        pending = self._crashes.get(task_id)
        return bool(pending) and min(pending)[1] in self._bounded

    def crash_due(self, task_id: TaskId, records: int, input_ended: bool = False) -> int | None:
        """`task_id` has handled `records` over the run (`input_ended`: and its input ended): the
        crash point reached (marked fired), or None."""
        pending = self._crashes.get(task_id)
        if not pending:
            return None
        after, index = min(pending)
        if records < after and not (input_ended and index in self._bounded):
            return None
        pending.remove((after, index))
        self.fire(index)
        return after

    # ------------------------------------------------------------------ occurrences

    def count(self, what: str, task_id: TaskId | None) -> int:
        """Occurrences of `what` ("ack", "write", "trigger", "complete", "abort"; with task None:
        "completion", completed checkpoints announced, and "coordinator-counter" /
        "coordinator-metadata" / "coordinator-any", the coordinator's storage writes) of `task_id`
        so far."""
        return self._counts.get((what, task_id), 0)

    def _occur(self, what: str, task_id: TaskId | None) -> list[Fault]:
        """One more occurrence: the faults it triggers (marked fired)."""
        key = (what, task_id)
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        hits = [i for i in self._occurrences.get(key, ()) if self.plan.faults[i].nth == n]
        for i in hits:
            self.fire(i)
        return [self.plan.faults[i] for i in hits]

    def upcoming(self, what: str, task_id: TaskId) -> list[tuple[int, Fault]]:
        """For an attempt that counts occurrences itself: the faults still ahead for `task_id`, as
        (offset from the attempt's first occurrence, fault); report the count with `advance`."""
        base = self.count(what, task_id)
        return [(self.plan.faults[i].nth - base, self.plan.faults[i])
                for i in self._occurrences.get((what, task_id), ()) if self.plan.faults[i].nth >= base]

    def advance(self, what: str, task_id: TaskId | None, n: int) -> None:
        """An attempt counted `n` occurrences of `what` of `task_id` itself (see `upcoming`); the
        faults among them fired there."""
        for _ in range(n):
            if what == "completion":
                index = self._notify_crashes.get(self.count(what, None))
                self._counts[(what, None)] = self.count(what, None) + 1
                if index is not None:
                    self.fire(index)
            else:
                self._occur(what, task_id)

    def control(self, kind: str, task_id: TaskId) -> ControlEffect:
        """A control message of `kind` is about to go to `task_id` ("ack": from it)."""
        return control_effect(self._occur(kind, task_id))

    def upcoming_control(self, kind: str, task_id: TaskId) -> dict[int, ControlEffect]:
        """`upcoming` for control messages: offset in the attempt -> what happens to that message."""
        hits: dict[int, list[Fault]] = {}
        for n, fault in self.upcoming(kind, task_id):
            hits.setdefault(n, []).append(fault)
        return {n: control_effect(faults) for n, faults in hits.items()}

    def counts(self) -> dict[tuple[str, TaskId | None], int]:
        """Every occurrence count so far: (what, task) -> count."""
        return dict(self._counts)

    def write(self, task_id: TaskId) -> WriteEffect:
        """`task_id` starts a state write."""
        hits = self._occur("write", task_id)
        fail = any(isinstance(f, StorageWriteFailure) for f in hits)
        tear = next((f for f in hits if isinstance(f, TornWrite)), None)
        return WriteEffect(fail=fail, tear=tear)

    def coordinator_write(self, what: str) -> bool:
        """The coordinator starts a storage write of `what` ("counter": the id counter's persist;
        "metadata": a completed checkpoint's metadata): True if it fails (`CoordinatorStorageFailure`).

        Raises:
            ValueError: `what` is neither "counter" nor "metadata".
        """
        if what not in ("counter", "metadata"):
            raise ValueError(f"coordinator_write: what must be 'counter' or 'metadata', got {what!r}")
        hits = self._occur(_coordinator_write(what), None) + self._occur(_coordinator_write("any"), None)
        return bool(hits)

    # ------------------------------------------------------------------ windows

    def write_slowdown(self, now: float) -> float:
        """How many times longer a state write started at `now` takes (1.0: normal)."""
        factor = 1.0
        for index, start in self._windows.items():
            fault = self.plan.faults[index]
            if isinstance(fault, SlowStorage) and start <= now < start + fault.duration:
                factor = max(factor, fault.factor)
        return factor

    def channel_delay(self, receiver: TaskId, channel: int, now: float) -> float:
        """Extra seconds for a message entering input `channel` of `receiver` at `now`."""
        extra = 0.0
        for index, start in self._windows.items():
            fault = self.plan.faults[index]
            if (isinstance(fault, ChannelDelay) and self._targets[index] == receiver
                    and self._channels[index] == channel and start <= now < start + fault.duration):
                extra = max(extra, fault.delay)
        return extra

    # ------------------------------------------------------------------ coordinator and recovery

    def completion_announced(self, checkpoint_id: int) -> bool:
        """The coordinator is about to commit `checkpoint_id` and tell tasks it completed (asked
        once per completion; a repeat of the same id is not counted). True: it crashes instead."""
        if checkpoint_id == self._last_completed:
            return False
        self._last_completed = checkpoint_id
        n = self.count("completion", None)
        self._counts[("completion", None)] = n + 1
        index = self._notify_crashes.get(n)
        return index is not None and self.fire(index)

    def recovery_started(self) -> list[tuple[TaskId, TaskCrashDuringRecovery]]:
        """A recovery (failover) begins: the crashes due during it, with their targets."""
        n = self._recoveries
        self._recoveries += 1
        due = [i for i in self._recovery_crashes.get(n, ()) if self.fire(i)]
        return [(self._targets[i], self.plan.faults[i]) for i in due]


def control_effect(hits: Sequence[Fault]) -> ControlEffect:
    """What the faults striking one control message do to it together."""
    if not hits:
        return DELIVER
    if any(isinstance(f, LostAcknowledgement | LostControlMessage) for f in hits):
        return ControlEffect(lost=True, faults=tuple(hits))
    copies = 1 + sum(1 for f in hits if isinstance(f, DuplicatedControlMessage))
    delay = sum(f.delay for f in hits if isinstance(f, DelayedControlMessage))
    return ControlEffect(copies=copies, delay=delay, faults=tuple(hits))


def _coordinator_write(what: str) -> str:
    """The occurrence key of the coordinator's storage writes of `what` (task None)."""
    return f"coordinator-{what}"


def _fraction(fault: Any) -> float:
    return fault.at_fraction if fault.at_fraction is not None else 0.5


def _check_target(fault: Fault, target: TaskId, candidates: list[str]) -> None:
    if str(target) in candidates:
        return
    if isinstance(fault, ChannelDelay):
        raise ValueError(f"{fault!r} names task {target}, which has no input channels "
                         f"(tasks with inputs: {', '.join(sorted(candidates))})")
    raise ValueError(f"{fault!r} names task {target}, which is not a source: only sources are triggered "
                     f"(sources: {', '.join(sorted(candidates))})")
