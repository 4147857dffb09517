"""Scripted input for barrier-handler tests, in the style of Flink's `CheckpointBarrierTrackerTest`.

A script is a list of steps: `buf(ch)`, `barrier(id, ch)`, `cancel(id, ch)`, `eop(ch)`, plus
`POLL` (poll until nothing comes) and `advance(dt)` (move the manual clock and fire timers).
`run()` pushes the steps into a `CheckpointedInputGate` and records what comes out:

* `result.sequence`: triggers and aborts, compact: `expect(1, -2, 3)` (negative = abort);
* `result.buffers`: the step index of every buffer the gate returned, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.core.barriers import AlignmentStats, BarrierHandler
from runtime.core.input_gate import CheckpointedInputGate
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfPartition,
)
from vocabulary.ports import ManualClock, ManualTimers
from vocabulary.reasons import CheckpointFailureReason


class RecordingListener:
    """A `CheckpointListener` that records every call."""

    def __init__(self, on_trigger: Callable[[CheckpointBarrier, AlignmentStats], None] | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.sequence: list[int] = []
        self.reasons: dict[int, CheckpointFailureReason] = {}
        self.stats: dict[int, AlignmentStats] = {}
        self.channel_state: dict[int, dict[int, list[Buffer]]] = {}
        self.finished: list[int] = []
        self._on_trigger = on_trigger

    def trigger_checkpoint(self, barrier: CheckpointBarrier, stats: AlignmentStats) -> None:
        assert stats.checkpoint_id == barrier.id
        self.calls.append(("trigger", barrier.id))
        self.sequence.append(barrier.id)
        self.stats[barrier.id] = stats
        if self._on_trigger is not None:
            self._on_trigger(barrier, stats)

    def abort_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.calls.append(("abort", checkpoint_id, reason))
        self.sequence.append(-checkpoint_id)
        self.reasons[checkpoint_id] = reason

    def add_input_channel_state(self, checkpoint_id: int, channel: int, buffers: Sequence[Buffer]) -> None:
        assert buffers, "empty channel state should not be reported"
        self.calls.append(("state", checkpoint_id, channel, len(buffers)))
        self.channel_state.setdefault(checkpoint_id, {}).setdefault(channel, []).extend(buffers)

    def finish_input_channel_state(self, checkpoint_id: int) -> None:
        self.calls.append(("finish", checkpoint_id))
        self.finished.append(checkpoint_id)

    def state_labels(self, checkpoint_id: int) -> dict[int, list[int]]:
        """Channel state of a checkpoint as step labels per channel."""
        return {ch: labels(bufs) for ch, bufs in sorted(self.channel_state.get(checkpoint_id, {}).items())}


def expect(*ids: int) -> list[int]:
    """Expected trigger/abort sequence; negative values are aborts."""
    return list(ids)


def make_buffer(label: int, rows: int = 1) -> Buffer:
    return Buffer.from_records([{"label": label, "row": r} for r in range(rows)])


def label_of(buffer: Buffer) -> int:
    return buffer.batch.column("label")[0].as_py()


def labels(buffers: Sequence[Buffer]) -> list[int]:
    return [label_of(b) for b in buffers]


@dataclass(frozen=True)
class Step:
    kind: str
    channel: int = -1
    id: int = 0
    timestamp: float = 0.0
    rows: int = 1
    alignment_timeout: float | None = None
    dt: float = 0.0
    forced_aligned: bool = False


def buf(ch: int, rows: int = 1) -> Step:
    return Step("buf", ch, rows=rows)


def barrier(checkpoint_id: int, ch: int, ts: float = 0.0, alignment_timeout: float | None = None, *,
            forced_aligned: bool = False) -> Step:
    return Step("barrier", ch, checkpoint_id, ts, alignment_timeout=alignment_timeout, forced_aligned=forced_aligned)


def cancel(checkpoint_id: int, ch: int) -> Step:
    return Step("cancel", ch, checkpoint_id)


def eop(ch: int) -> Step:
    return Step("eop", ch)


def advance(dt: float) -> Step:
    return Step("advance", dt=dt)


POLL = Step("poll")


def to_boe(index: int, step: Step) -> BufferOrEvent:
    if step.kind == "buf":
        return BufferOrEvent(step.channel, make_buffer(index, step.rows))
    if step.kind == "barrier":
        return BufferOrEvent(
            step.channel,
            CheckpointBarrier(step.id, step.timestamp, CheckpointOptions(alignment_timeout=step.alignment_timeout,
                                                                         forced_aligned=step.forced_aligned)),
        )
    if step.kind == "cancel":
        return BufferOrEvent(step.channel, CancelCheckpointMarker(step.id))
    if step.kind == "eop":
        return BufferOrEvent(step.channel, EndOfPartition())
    raise ValueError(f"not an input step: {step}")


@dataclass
class Result:
    gate: CheckpointedInputGate
    handler: BarrierHandler
    listener: RecordingListener
    clock: ManualClock
    timers: ManualTimers
    #: everything the gate returned: buffer labels (ints) and events
    delivered: list[Any] = field(default_factory=list)

    @property
    def sequence(self) -> list[int]:
        return self.listener.sequence

    @property
    def buffers(self) -> list[int]:
        return [x for x in self.delivered if isinstance(x, int)]

    def drain(self) -> None:
        while (boe := self.gate.poll()) is not None:
            self.delivered.append(label_of(boe.payload) if isinstance(boe.payload, Buffer) else boe.payload)


HandlerFactory = Callable[..., BarrierHandler]


def setup(
    factory: HandlerFactory,
    num_channels: int,
    *,
    start_time: float = 0.0,
    gate_kwargs: dict[str, Any] | None = None,
    **handler_kwargs: Any,
) -> Result:
    clock = ManualClock(start_time)
    timers = ManualTimers(clock)
    listener = RecordingListener()
    handler = factory(num_channels, listener, clock=clock, timers=timers, **handler_kwargs)
    gate = CheckpointedInputGate(num_channels, handler, **(gate_kwargs or {}))
    return Result(gate, handler, listener, clock, timers)


def run(
    factory: HandlerFactory,
    num_channels: int,
    steps: Sequence[Step],
    *,
    eager: bool = True,
    start_time: float = 0.0,
    gate_kwargs: dict[str, Any] | None = None,
    **handler_kwargs: Any,
) -> Result:
    """Push `steps` (labelled by their index) into a fresh gate.

    With `eager` the gate is polled dry after every push (the task keeps up); otherwise only at
    `POLL` steps. The gate is always polled dry at the end.
    """
    result = setup(factory, num_channels, start_time=start_time, gate_kwargs=gate_kwargs, **handler_kwargs)
    feed(result, steps, eager=eager)
    result.drain()
    return result


def feed(result: Result, steps: Sequence[Step], *, eager: bool = True, first_label: int = 0) -> None:
    for index, step in enumerate(steps, start=first_label):
        if step.kind == "poll":
            result.drain()
        elif step.kind == "advance":
            result.timers.advance(step.dt)
        else:
            result.gate.push(to_boe(index, step))
            if eager:
                result.drain()
