"""CheckpointedInputGate: queues, holding, release order, spilling, errors, stats."""

from __future__ import annotations

import pytest

from runtime.core.barriers import BarrierAligner, BarrierTracker
from runtime.core.barriers.handler import BarrierHandler, HandlerStats
from runtime.core.input_gate import CheckpointedInputGate
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfPartition,
)
from runtime.records.spilling import FileSpiller, MemorySpiller
from vocabulary.ports import ManualClock

from .helpers import (
    POLL,
    RecordingListener,
    barrier,
    buf,
    eop,
    expect,
    feed,
    label_of,
    make_buffer,
    run,
    setup,
)


class ScriptedBlocking(BarrierHandler):
    """A handler whose blocking the test sets by hand; counts the gate's calls."""

    def __init__(self, num_channels: int) -> None:
        self.num_channels = num_channels
        self.listener = RecordingListener()
        self.blocked: set[int] = set()
        self.events: list[tuple[int, object]] = []
        self.held: list[int] = []
        self.arrived = 0
        self.is_blocked_calls = 0
        self.block_on_barrier = True

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        self.events.append((channel, barrier))
        if self.block_on_barrier:
            self.blocked.add(channel)

    def on_cancel(self, channel: int, marker: CancelCheckpointMarker) -> None:
        self.events.append((channel, marker))
        self.blocked.clear()

    def on_end_of_partition(self, channel: int, event: EndOfPartition) -> None:
        self.events.append((channel, event))

    def on_buffer_arrived(self, channel: int, buffer: Buffer) -> None:
        self.arrived += 1

    def on_buffer_held(self, channel: int, buffer: Buffer) -> None:
        self.held.append(label_of(buffer))

    def is_blocked(self, channel: int) -> bool:
        self.is_blocked_calls += 1
        return channel in self.blocked

    def stats(self) -> HandlerStats:
        return HandlerStats(None, -1, 0, 0, 0, 0)


def push_all(gate: CheckpointedInputGate, items: list[tuple[int, object]]) -> None:
    for ch, payload in items:
        gate.push(BufferOrEvent(ch, payload))


def drain(gate: CheckpointedInputGate) -> list[object]:
    out: list[object] = []
    while (boe := gate.poll()) is not None:
        out.append(label_of(boe.payload) if boe.is_buffer else type(boe.payload).__name__)
    return out


def test_empty_gate_polls_none_and_reports_its_state() -> None:
    gate = CheckpointedInputGate(2, BarrierTracker(2, RecordingListener()))
    assert gate.poll() is None
    assert len(gate) == 0 and not gate.has_data and not gate.is_finished
    push_all(gate, [(0, make_buffer(1)), (0, EndOfPartition())])
    assert len(gate) == 2 and gate.has_data
    assert drain(gate) == [1, "EndOfPartition"]
    assert not gate.is_finished
    push_all(gate, [(1, EndOfPartition())])
    assert not gate.is_finished  # pushed, not yet delivered
    assert drain(gate) == ["EndOfPartition"]
    assert gate.is_finished


def test_global_arrival_order_and_events_reach_the_handler() -> None:
    handler = ScriptedBlocking(2)
    handler.block_on_barrier = False
    gate = CheckpointedInputGate(2, handler)
    push_all(gate, [(1, make_buffer(0)), (0, make_buffer(1)), (1, CancelCheckpointMarker(3)), (0, make_buffer(3))])
    assert handler.arrived == 3
    assert drain(gate) == [0, 1, "CancelCheckpointMarker", 3]
    assert handler.events == [(1, CancelCheckpointMarker(3))]


def test_blocked_channel_is_held_and_released_before_other_input() -> None:
    handler = ScriptedBlocking(3)
    gate = CheckpointedInputGate(3, handler)
    push_all(gate, [(0, CheckpointBarrier(1)), (0, make_buffer(1)), (1, make_buffer(2)), (0, make_buffer(3))])
    assert drain(gate) == ["CheckpointBarrier", 2]
    assert handler.held == [1, 3]
    assert len(gate) == 2 and not gate.has_data and gate.queued_buffers(0) == []
    push_all(gate, [(2, make_buffer(4)), (2, CancelCheckpointMarker(1)), (1, make_buffer(6))])
    assert drain(gate) == [4, "CancelCheckpointMarker", 1, 3, 6]


def test_released_channel_blocked_again_holds_its_released_items_again() -> None:
    handler = ScriptedBlocking(2)
    gate = CheckpointedInputGate(2, handler)
    push_all(gate, [(0, CheckpointBarrier(1)), (0, make_buffer(1)), (0, CheckpointBarrier(2)), (0, make_buffer(3))])
    push_all(gate, [(1, make_buffer(4))])
    assert drain(gate) == ["CheckpointBarrier", 4]
    handler.blocked.clear()  # e.g. a timer released channel 0
    assert gate.queued_buffers(0) == [make_buffer(1), make_buffer(3)]
    # 1 comes out, then barrier 2 blocks channel 0 again: 3 is held once more
    assert drain(gate) == [1, "CheckpointBarrier"]
    assert handler.held == [1, 3, 3]
    push_all(gate, [(1, make_buffer(5))])
    handler.blocked.clear()
    push_all(gate, [(1, make_buffer(6))])
    assert drain(gate) == [3, 5, 6]


def test_release_merges_several_channels_in_arrival_order() -> None:
    handler = ScriptedBlocking(3)
    gate = CheckpointedInputGate(3, handler)
    push_all(gate, [(0, CheckpointBarrier(1)), (1, CheckpointBarrier(1))])
    push_all(gate, [(0 if i % 3 else 1, make_buffer(i)) for i in range(2, 9)])
    assert drain(gate) == ["CheckpointBarrier", "CheckpointBarrier"]
    push_all(gate, [(2, CancelCheckpointMarker(1)), (2, make_buffer(10))])
    assert drain(gate) == ["CancelCheckpointMarker", 2, 3, 4, 5, 6, 7, 8, 10]


@pytest.mark.parametrize("spill_bound", [0, 1, 40, 10_000])
def test_spilling_keeps_order_and_loses_nothing(spill_bound: int) -> None:
    spiller = MemorySpiller()
    handler = ScriptedBlocking(2)
    gate = CheckpointedInputGate(2, handler, spill_bound_bytes=spill_bound, spiller=spiller)
    push_all(gate, [(0, CheckpointBarrier(1))])
    push_all(gate, [(0, make_buffer(i, rows=1 + i % 3)) for i in range(1, 6)])
    push_all(gate, [(0, CancelCheckpointMarker(9)), (0, make_buffer(6)), (1, make_buffer(7))])
    assert drain(gate) == ["CheckpointBarrier", 7]
    stats = gate.stats()
    held_bytes = sum(make_buffer(i, rows=1 + i % 3).size_bytes for i in range(1, 6)) + make_buffer(6).size_bytes
    assert stats.bytes_held == held_bytes == stats.bytes_held_max
    if spill_bound < held_bytes:
        assert stats.num_spills >= 1 and stats.bytes_spilled > 0 and len(spiller) == stats.num_spills
    else:
        assert stats.num_spills == 0
    handler.blocked.clear()
    assert drain(gate) == [1, 2, 3, 4, 5, "CancelCheckpointMarker", 6]
    assert len(spiller) == 0
    assert gate.stats().bytes_held == 0 and len(gate) == 0


def test_spilling_to_files_with_mixed_schemas(tmp_path) -> None:
    spiller = FileSpiller(tmp_path / "spill")
    r = setup(BarrierAligner, 2, gate_kwargs={"spill_bound_bytes": 1, "spiller": spiller})
    odd = Buffer.from_records([{"label": 99, "text": "x"}])
    feed(r, [barrier(1, 0), buf(0), buf(0, rows=3)], first_label=0)
    r.gate.push(BufferOrEvent(0, odd))
    feed(r, [buf(0)], first_label=4)
    assert len(list((tmp_path / "spill").iterdir())) == r.gate.stats().num_spills == 4
    feed(r, [barrier(1, 1)], first_label=5)
    assert r.sequence == expect(1)
    assert r.buffers == [1, 2, 99, 4]
    assert list((tmp_path / "spill").iterdir()) == []


def test_queued_views_for_handlers() -> None:
    handler = ScriptedBlocking(2)
    handler.block_on_barrier = False
    gate = CheckpointedInputGate(2, handler)
    push_all(
        gate,
        [(0, make_buffer(0)), (0, CheckpointBarrier(1)), (0, make_buffer(2)), (0, CheckpointBarrier(3)), (0, make_buffer(4))],
    )
    assert gate.queued_buffers(0) == [make_buffer(0), make_buffer(2), make_buffer(4)]
    assert gate.queued_before_barrier(0, 1) == ([make_buffer(0)], True)
    assert gate.queued_before_barrier(0, 2) == ([make_buffer(0), make_buffer(2)], True)
    assert gate.queued_before_barrier(0, 4) == ([make_buffer(0), make_buffer(2), make_buffer(4)], False)
    assert gate.queued_buffers(1) == []
    with pytest.raises(ValueError, match="no channel 2"):
        gate.queued_buffers(2)


def test_queued_view_reads_back_released_spilled_buffers() -> None:
    handler = ScriptedBlocking(1)
    gate = CheckpointedInputGate(1, handler, spill_bound_bytes=0)
    push_all(gate, [(0, CheckpointBarrier(1)), (0, make_buffer(1)), (0, make_buffer(2)), (0, EndOfPartition())])
    assert drain(gate) == ["CheckpointBarrier"]
    handler.blocked.clear()
    assert gate.queued_buffers(0) == [make_buffer(1), make_buffer(2)]
    assert len(gate.spiller) == 0
    assert drain(gate) == [1, 2, "EndOfPartition"] and gate.is_finished


def test_polls_cost_constant_handler_calls_per_item() -> None:
    handler = ScriptedBlocking(4)
    gate = CheckpointedInputGate(4, handler)
    push_all(gate, [(0, CheckpointBarrier(1))])
    drain(gate)
    n = 2000
    push_all(gate, [(i % 4, make_buffer(i)) for i in range(n)])
    for _ in range(n):
        gate.poll()
    # blocked channels are re-checked per buffer; no per-poll scan of the queue or all channels
    assert handler.is_blocked_calls <= 3 * n
    handler.blocked.clear()
    assert len(drain(gate)) == n // 4


@pytest.mark.parametrize(
    ("boe", "error", "message"),
    [
        (BufferOrEvent(2, make_buffer(0)), ValueError, "push on unknown channel 2"),
        (BufferOrEvent(-1, make_buffer(0)), ValueError, "push on unknown channel -1"),
        (BufferOrEvent(0, "not a buffer"), TypeError, "neither a Buffer nor an event"),
    ],
)
def test_bad_pushes_are_rejected(boe: BufferOrEvent, error: type, message: str) -> None:
    gate = CheckpointedInputGate(2, BarrierTracker(2, RecordingListener()))
    with pytest.raises(error, match=message):
        gate.push(boe)
    assert len(gate) == 0


def test_push_after_end_of_partition_is_rejected() -> None:
    gate = CheckpointedInputGate(2, BarrierTracker(2, RecordingListener()))
    gate.push(BufferOrEvent(1, EndOfPartition()))
    with pytest.raises(ValueError, match="push on channel 1 after its EndOfPartition"):
        gate.push(BufferOrEvent(1, make_buffer(0)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_channels": 0}, "num_channels must be a positive int"),
        ({"num_channels": 3}, "gate has 3 channels but BarrierTracker was built for 2"),
        ({"spill_bound_bytes": -1}, "spill_bound_bytes must be an int >= 0"),
    ],
)
def test_bad_gate_arguments(kwargs: dict, message: str) -> None:
    args = {"num_channels": 2} | kwargs
    with pytest.raises(ValueError, match=message):
        CheckpointedInputGate(args.pop("num_channels"), BarrierTracker(2, RecordingListener()), **args)


def test_stats_and_repr() -> None:
    clock = ManualClock()
    r = setup(BarrierAligner, 2)
    r.gate.clock = clock
    feed(r, [barrier(1, 0), buf(0), buf(1)])
    clock.advance(3.0)
    text = repr(r.gate)
    assert "CheckpointedInputGate(channels=2" in text and "held=1" in text and "blocked=[0]" in text
    assert r.gate.stats().blocked_time == pytest.approx(3.0)
    feed(r, [barrier(1, 1), POLL, eop(0), eop(1)], first_label=3)
    stats = r.gate.stats()
    assert stats.items_delivered == 6 and stats.items_queued == 0 and stats.items_held == 0
    assert stats.blocked_time == pytest.approx(3.0) and stats.num_blocked_channels == 0
    assert r.gate.is_finished and "finished=True" in repr(r.gate)


def test_close_discards_spilled_runs() -> None:
    spiller = MemorySpiller()
    r = run(BarrierAligner, 2, [barrier(1, 0), buf(0), buf(0)], gate_kwargs={"spill_bound_bytes": 0, "spiller": spiller})
    assert len(spiller) == 2
    r.gate.close()
    assert len(spiller) == 0
