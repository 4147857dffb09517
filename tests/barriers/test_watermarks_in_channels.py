"""Watermarks as in-band data: held with their channel's data while it is blocked, channel state
(in order, through the state files) when an unaligned barrier overtakes them; a source's
per-split watermarks and their checkpoint."""

from __future__ import annotations

import math

from operators.watermarks import WatermarkStrategy
from runtime.core.barriers import BarrierAligner, UnalignedBarrierHandler
from runtime.core.input_gate import CheckpointedInputGate
from runtime.core.source_watermarks import SourceWatermarks
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CheckpointBarrier,
    CheckpointOptions,
    Watermark,
    WatermarkStatus,
    channel_state_batch,
    channel_state_item,
)
from state.serialization import buffers_from_bytes, buffers_to_bytes
from vocabulary.ports import ManualClock

from .helpers import RecordingListener, make_buffer


def gate_with(handler_cls, channels: int = 2):
    listener = RecordingListener()
    handler = handler_cls(channels, listener, clock=ManualClock())
    return CheckpointedInputGate(channels, handler), listener


def drain(gate: CheckpointedInputGate) -> list:
    out = []
    while (boe := gate.poll()) is not None:
        out.append((boe.channel, boe.payload))
    return out


def test_a_blocked_channel_holds_its_watermarks_back_with_its_data():
    gate, listener = gate_with(BarrierAligner)
    gate.push(BufferOrEvent(0, CheckpointBarrier(1)))
    gate.push(BufferOrEvent(0, Watermark(10)))
    gate.push(BufferOrEvent(1, Watermark(5)))
    out = drain(gate)
    assert out == [(0, CheckpointBarrier(1)), (1, Watermark(5))]  # channel 0 is blocked: its watermark waits
    gate.push(BufferOrEvent(1, CheckpointBarrier(1)))
    assert drain(gate) == [(1, CheckpointBarrier(1)), (0, Watermark(10))]
    assert listener.sequence == [1]


def test_watermarks_an_unaligned_barrier_overtakes_are_channel_state_in_order():
    gate, listener = gate_with(UnalignedBarrierHandler)
    data = make_buffer(1)
    gate.push(BufferOrEvent(0, data))
    gate.push(BufferOrEvent(0, Watermark(10)))
    gate.push(BufferOrEvent(1, Watermark(3)))
    unaligned = CheckpointOptions(unaligned=True)
    gate.push(BufferOrEvent(0, CheckpointBarrier(1, options=unaligned)))
    gate.push(BufferOrEvent(1, WatermarkStatus(True)))
    gate.push(BufferOrEvent(1, CheckpointBarrier(1, options=unaligned)))
    state = listener.channel_state[1]
    assert state[0] == [data, Watermark(10)]
    assert state[1] == [Watermark(3), WatermarkStatus(True)]
    assert listener.finished == [1]


def test_channel_state_files_keep_watermark_events_in_order():
    items = [make_buffer(1), Watermark(10), WatermarkStatus(True), make_buffer(2), Watermark(math.inf)]
    blob = buffers_to_bytes({0: [channel_state_batch(i) for i in items]})
    assert [channel_state_item(b) for b in buffers_from_bytes(blob)[0]] == items
    assert isinstance(channel_state_item(items[0].batch), Buffer)


def _sources(restored=None, idleness=None):
    clock = ManualClock()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_assigner(lambda r, p: r["t"])
    if idleness is not None:
        strategy = strategy.with_idleness(idleness)
    return SourceWatermarks(strategy, ["a", "b"], clock, restored or {}, "Source: s"), clock


def test_a_source_emits_the_minimum_over_its_live_splits_never_backwards():
    sources, _ = _sources()
    data, events = sources.on_read("a", [{"t": 10}])
    assert data == [{"t": 10, "__timestamp": 10}] and events == []
    assert sources.on_periodic_emit(False) == []  # split b has none yet
    sources.on_read("b", [{"t": 4}])
    assert sources.on_periodic_emit(False) == [Watermark(3)]
    sources.split_finished("b")
    assert sources.on_periodic_emit(False) == [Watermark(9)]
    assert sources.end_of_input() == [Watermark(math.inf)]
    assert sources.snapshot() == {"a": 9, "b": 3}


def test_a_restored_split_starts_from_its_checkpointed_watermark():
    sources, _ = _sources(restored={"a": 50, "b": 40})
    assert sources.on_periodic_emit(False) == [Watermark(40)]  # before reading anything
    sources.on_read("b", [{"t": 30}])  # a record that was late already before the failure
    assert sources.on_periodic_emit(False) == []
    assert sources.snapshot() == {"a": 50, "b": 40}


def test_only_the_split_being_read_goes_idle_and_backpressure_is_not_idleness():
    sources, clock = _sources(idleness=1.0)
    sources.on_read("a", [{"t": 10}])
    for now in (0.0, 0.5, 1.0, 2.0, 4.0):  # b waits for its turn: not idle, it holds the watermark back
        clock.set(now)
        assert sources.on_periodic_emit(False, reading="a") == []
    sources.split_finished("a")
    sources.on_read("b", [{"t": 20}])
    for now in (5.0, 5.5, 6.0):
        clock.set(now)
        sources.on_periodic_emit(False, reading="b")
    for now in (7.0, 9.0):  # quiet, but backpressured: not idle
        clock.set(now)
        assert sources.on_periodic_emit(True, reading="b") == []
    clock.set(11.0)
    assert sources.on_periodic_emit(False, reading="b") == [WatermarkStatus(True)]  # every live split idle
    data, events = sources.on_read("b", [{"t": 30}])
    assert events == [WatermarkStatus(False)]
    assert sources.on_periodic_emit(False, reading="b") == [Watermark(29)]


def test_time_scheduled_before_the_first_step_is_armed_by_it():
    """A task deployed but not started must not be driven by a timer (on Ray its peers may not be
    deployed yet: a source's periodic watermark, an operator's restored timer)."""
    from runtime.core.task_time import TaskTime
    from vocabulary.ports import ManualTimers

    clock = ManualClock()
    timers = ManualTimers(clock)
    woken = []
    time = TaskTime(clock, timers, lambda: woken.append(clock.now()), channel_inputs=[0], watermarks=True,
                    interval=0.2)
    time.schedule(0.5, "operator")
    timers.advance(1.0)
    assert timers.pending == 0 and woken == [] and time.has_due  # nothing armed yet, but work to do
    assert time.take_due() == []  # the first step arms it (already due: at once)
    timers.advance(0.0)
    assert woken == [1.0] and time.take_due() == ["operator"]
    time.schedule(2.0, "later")
    assert timers.pending == 1  # started: armed at once
