"""`FaultInjector`: which fault of a `FaultPlan` applies to what the simulator does next.

The simulator asks it at the points a fault can strike — a control message about to be sent, a
state write about to start, a message about to enter a channel, a checkpoint's completion about
to be announced, a recovery beginning — and it answers from the plan: targets resolved once from
the plan's seed, per-task counters for the `nth`-occurrence kinds, time windows for the others.
It never schedules anything and keeps no simulator state; the executor applies the effects.
Timed faults (`TaskCrash` at a time, `CoordinatorCrash`, `ChannelStall`, `TaskStall`) are
scheduled by the executor from `timed()`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint.handles import TaskId
from runtime.faults import (
    ChannelDelay,
    CoordinatorCrashBeforeNotify,
    DelayedControlMessage,
    DuplicatedControlMessage,
    Fault,
    FaultPlan,
    LostAcknowledgement,
    LostControlMessage,
    SlowStorage,
    StorageWriteFailure,
    TaskCrashDuringRecovery,
    TornWrite,
    resolve_task,
)

_CONTROL = (LostControlMessage, DuplicatedControlMessage, DelayedControlMessage)


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


class FaultInjector:
    """Answers "does a fault strike here?" for one run of one plan.

    Args:
        plan: the faults.
        task_ids: every task of the job.
        source_ids: the source tasks (the only ones a "trigger" message goes to).
        num_inputs: input channels per task (a `ChannelDelay` needs one).
        expected_duration: virtual seconds of a failure-free run, roughly (places `at_fraction`).

    Raises:
        ValueError: a fault names an unknown task, a "trigger" fault a task that is no source, or a
            `ChannelDelay` a task without input channels or a channel it does not have.
    """

    def __init__(self, plan: FaultPlan, task_ids: Sequence[TaskId], source_ids: Sequence[TaskId],
                 num_inputs: dict[TaskId, int], expected_duration: float) -> None:
        self.plan = plan
        self.expected_duration = expected_duration
        rng = random.Random(plan.seed)
        names = [str(t) for t in task_ids]
        sources = [str(t) for t in source_ids]
        with_inputs = [str(t) for t in task_ids if num_inputs.get(t, 0) > 0]
        self._targets: dict[int, TaskId] = {}
        self._control: dict[tuple[str, TaskId], list[Fault]] = {}
        self._control_counts: dict[tuple[str, TaskId], int] = {}
        self._writes: dict[TaskId, list[Fault]] = {}
        self._write_counts: dict[TaskId, int] = {}
        self._slow: list[tuple[float, float, float]] = []
        self._channel_delays: dict[tuple[TaskId, int], list[tuple[float, float, float]]] = {}
        self._notify_crashes: set[int] = set()
        self._completions = 0
        self._last_completed: int | None = None
        self._recovery_crashes: dict[int, list[TaskCrashDuringRecovery]] = {}
        self._recoveries = 0
        for fault in plan.faults:
            if hasattr(fault, "task"):
                candidates = names
                if isinstance(fault, ChannelDelay):
                    candidates = with_inputs
                elif isinstance(fault, _CONTROL) and fault.kind == "trigger":
                    candidates = sources
                target = TaskId.parse(resolve_task(fault.task, names, rng) if fault.task is not None
                                      else rng.choice(sorted(candidates)) if candidates
                                      else resolve_task(None, names, rng))
                self._targets[id(fault)] = target
                self._check_target(fault, target, candidates)
            if isinstance(fault, LostAcknowledgement):
                self._control.setdefault(("ack", self.target(fault)), []).append(fault)
            elif isinstance(fault, _CONTROL):
                self._control.setdefault((fault.kind, self.target(fault)), []).append(fault)
            elif isinstance(fault, StorageWriteFailure | TornWrite):
                self._writes.setdefault(self.target(fault), []).append(fault)
            elif isinstance(fault, SlowStorage):
                start = self.moment(fault)
                self._slow.append((start, start + fault.duration, fault.factor))
            elif isinstance(fault, ChannelDelay):
                target = self.target(fault)
                channel = fault.channel if fault.channel is not None else rng.randrange(num_inputs[target])
                if not 0 <= channel < num_inputs[target]:
                    raise ValueError(f"{fault!r} names input channel {channel} of task {target}, which has "
                                     f"channels 0..{num_inputs[target] - 1}")
                start = self.moment(fault)
                self._channel_delays.setdefault((target, channel), []).append(
                    (start, start + fault.duration, fault.delay))
            elif isinstance(fault, CoordinatorCrashBeforeNotify):
                self._notify_crashes.add(fault.nth)
            elif isinstance(fault, TaskCrashDuringRecovery):
                self._recovery_crashes.setdefault(fault.nth, []).append(fault)

    @staticmethod
    def _check_target(fault: Fault, target: TaskId, candidates: list[str]) -> None:
        if str(target) in candidates:
            return
        if isinstance(fault, ChannelDelay):
            raise ValueError(f"{fault!r} names task {target}, which has no input channels "
                             f"(tasks with inputs: {', '.join(sorted(candidates))})")
        raise ValueError(f"{fault!r} names task {target}, which is not a source: only sources are triggered "
                         f"(sources: {', '.join(sorted(candidates))})")

    def target(self, fault: Fault) -> TaskId:
        """The task `fault` strikes (resolved from the plan's seed when it names none)."""
        return self._targets[id(fault)]

    def moment(self, fault: Fault) -> float:
        """When a timed fault starts: its `at`, else its `at_fraction` of the expected run."""
        at = getattr(fault, "at", None)
        if at is not None:
            return at
        fraction = getattr(fault, "at_fraction", None)
        return (fraction if fraction is not None else 0.5) * self.expected_duration

    # ------------------------------------------------------------------ questions

    def control(self, kind: str, task_id: TaskId) -> ControlEffect:
        """A control message of `kind` is about to go to `task_id` ("ack": from it)."""
        key = (kind, task_id)
        n = self._control_counts.get(key, 0)
        self._control_counts[key] = n + 1
        faults = self._control.get(key)
        if not faults:
            return DELIVER
        hits = tuple(f for f in faults if f.nth == n)
        if not hits:
            return DELIVER
        if any(isinstance(f, LostAcknowledgement | LostControlMessage) for f in hits):
            return ControlEffect(lost=True, faults=hits)
        copies = 1 + sum(1 for f in hits if isinstance(f, DuplicatedControlMessage))
        delay = sum(f.delay for f in hits if isinstance(f, DelayedControlMessage))
        return ControlEffect(copies=copies, delay=delay, faults=hits)

    def write(self, task_id: TaskId) -> WriteEffect:
        """`task_id` starts a state write."""
        n = self._write_counts.get(task_id, 0)
        self._write_counts[task_id] = n + 1
        faults = self._writes.get(task_id)
        if not faults:
            return WriteEffect()
        fail = any(isinstance(f, StorageWriteFailure) and f.nth == n for f in faults)
        tear = next((f for f in faults if isinstance(f, TornWrite) and f.nth == n), None)
        return WriteEffect(fail=fail, tear=tear)

    def write_slowdown(self, now: float) -> float:
        """How many times longer a state write started at `now` takes (1.0: normal)."""
        factor = 1.0
        for start, end, slower in self._slow:
            if start <= now < end:
                factor = max(factor, slower)
        return factor

    @property
    def delays_channels(self) -> bool:
        return bool(self._channel_delays)

    def channel_delay(self, receiver: TaskId, channel: int, now: float) -> float:
        """Extra seconds for a message entering input `channel` of `receiver` at `now`."""
        spikes = self._channel_delays.get((receiver, channel))
        if not spikes:
            return 0.0
        return max((delay for start, end, delay in spikes if start <= now < end), default=0.0)

    def completion_announced(self, checkpoint_id: int) -> bool:
        """The coordinator is about to tell tasks that `checkpoint_id` completed (asked once per
        task; counted once per checkpoint). True: it crashes instead."""
        if checkpoint_id != self._last_completed:
            self._last_completed = checkpoint_id
            self._completions += 1
            return self._completions - 1 in self._notify_crashes
        return False

    def recovery_started(self) -> list[tuple[TaskId, TaskCrashDuringRecovery]]:
        """A recovery (failover) begins: the crashes due during it, with their targets."""
        n = self._recoveries
        self._recoveries += 1
        return [(self.target(f), f) for f in self._recovery_crashes.get(n, ())]


class TearingBlobStore:
    """Wraps the simulator's blob store for `TornWrite`: once armed, the next `put` stores only the
    first `keep` fraction of its bytes (`garble`: the rest zeroed, same length) and returns as if
    it had written them all. Everything else passes through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._armed: tuple[float, bool] | None = None
        self._torn: str | None = None

    def tear_next(self, keep: float, garble: bool) -> None:
        self._armed, self._torn = (keep, garble), None

    def stop(self) -> str | None:
        """Disarm; the path torn since `tear_next` (None: nothing was written)."""
        self._armed = None
        return self._torn

    def put(self, path: str, data: bytes) -> None:
        if self._armed is not None:
            keep, garble = self._armed
            self._armed, self._torn = None, path
            data = _torn(bytes(data), keep, garble)
        self.inner.put(path, data)

    def get(self, path: str) -> bytes:
        return self.inner.get(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def list_temporary(self, prefix: str) -> list[str]:
        return self.inner.list_temporary(prefix)

    def where(self, path: str) -> str:
        return self.inner.where(path)


def _torn(data: bytes, keep: float, garble: bool) -> bytes:
    """`data` as a torn write leaves it: at least its last byte lost (truncated) or wrong (garbled)."""
    if not data:
        return data
    cut = min(int(len(data) * keep), len(data) - 1)
    if not garble:
        return data[:cut]
    torn = data[:cut] + bytes(len(data) - cut)
    if torn == data:  # the lost part was zeros already
        torn = data[:cut] + bytes([data[cut] ^ 0xFF]) + data[cut + 1:]
    return torn
