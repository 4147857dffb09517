"""UnalignedBarrierHandler, one scripted test per rule."""

from __future__ import annotations

import pytest

from runtime.core.barriers import BarrierProtocolError, UnalignedBarrierHandler
from runtime.core.barriers.states import WaitingForFirstBarrier
from runtime.records.messages import (
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfPartition,
)
from vocabulary.reasons import CheckpointFailureReason as R

from .helpers import POLL, RecordingListener, barrier, buf, cancel, eop, expect, feed, make_buffer, run, setup


def test_first_barrier_triggers_at_once_and_overtakes_queued_data() -> None:
    r = setup(UnalignedBarrierHandler, 2)
    feed(r, [buf(0), buf(1), buf(0), barrier(1, 0)], eager=False)
    assert r.sequence == expect(1)
    assert r.listener.stats[1].unaligned and r.listener.stats[1].alignment_time == 0.0
    # the triggering channel's queued buffers are complete channel state right away
    assert r.listener.state_labels(1) == {0: [0, 2]}
    feed(r, [buf(1), POLL, buf(1), barrier(1, 1), buf(1), buf(0)], eager=False, first_label=4)
    assert r.listener.state_labels(1) == {0: [0, 2], 1: [1, 4, 6]}
    assert r.listener.finished == [1]
    r.drain()
    # every buffer is still delivered, in arrival order; barriers never come out of the gate
    assert r.delivered == [0, 1, 2, 4, 6, 8, 9]


def test_never_blocks() -> None:
    r = setup(UnalignedBarrierHandler, 3)
    feed(r, [barrier(1, 0), buf(0), buf(1), barrier(2, 1), buf(1)], eager=False)
    assert not any(r.handler.is_blocked(ch) for ch in range(3))
    r.drain()
    assert r.buffers == [1, 2, 4]
    assert r.gate.stats().bytes_held_max == 0


def test_higher_barrier_subsumes_the_checkpoint_in_progress() -> None:
    r = run(UnalignedBarrierHandler, 2, [buf(1), barrier(1, 0), buf(1), barrier(2, 1), buf(0), barrier(2, 0)], eager=False)
    assert r.sequence == expect(1, -1, 2)
    assert r.listener.reasons[1] is R.SUBSUMED
    assert r.listener.finished == [2]
    assert r.listener.state_labels(1) == {}
    assert r.listener.state_labels(2) == {1: [0, 2], 0: [4]}


def test_lower_barrier_ids_are_ignored() -> None:
    r = run(UnalignedBarrierHandler, 2, [barrier(3, 0), barrier(2, 1), buf(1), barrier(3, 1), barrier(3, 0)], eager=False)
    assert r.sequence == expect(3)
    assert r.listener.state_labels(3) == {1: [2]}


def test_repeated_barrier_on_a_channel_is_a_protocol_error_and_changes_nothing() -> None:
    r = setup(UnalignedBarrierHandler, 2)
    feed(r, [barrier(1, 0), buf(1)], eager=False)
    state, stats, size = r.handler.state, r.handler.stats(), len(r.gate)
    with pytest.raises(BarrierProtocolError, match="second barrier of checkpoint 1 on channel 0"):
        r.gate.push(BufferOrEvent(0, CheckpointBarrier(1)))
    assert r.handler.state is state and r.handler.stats() == stats and len(r.gate) == size
    feed(r, [barrier(1, 1)], first_label=5)
    assert r.listener.finished == [1]


def test_cancel_marker_aborts_in_channel_order() -> None:
    r = run(UnalignedBarrierHandler, 2, [barrier(1, 0), buf(1), cancel(1, 1), barrier(2, 0), cancel(3, 1)])
    assert r.sequence == expect(1, -1, 2, -2, -3)
    assert r.listener.reasons == {1: R.CANCELLED, 2: R.CANCELLED, 3: R.CANCELLED}
    assert r.listener.finished == []


def test_end_of_partition_closes_the_channel_and_completes_the_checkpoint() -> None:
    r = run(UnalignedBarrierHandler, 3, [buf(1), eop(2), buf(1), barrier(1, 0), buf(1), eop(1)], eager=False)
    assert r.sequence == expect(1)
    assert r.listener.state_labels(1) == {1: [0, 2, 4]}
    assert r.listener.finished == [1]
    assert r.handler.stats().num_closed_channels == 2


def test_single_channel_records_its_queued_buffers_and_finishes_at_once() -> None:
    r = setup(UnalignedBarrierHandler, 1)
    feed(r, [buf(0), buf(0), barrier(1, 0), buf(0)], eager=False)
    assert r.sequence == expect(1)
    assert r.listener.state_labels(1) == {0: [0, 1]}
    assert r.listener.finished == [1]
    assert isinstance(r.handler.state, WaitingForFirstBarrier)


def test_direct_use_without_a_gate_reports_only_arrivals() -> None:
    listener = RecordingListener()
    handler = UnalignedBarrierHandler(2, listener)
    handler.on_barrier(0, CheckpointBarrier(1))
    handler.on_buffer_arrived(1, make_buffer(7))
    handler.on_cancel(1, CancelCheckpointMarker(0))  # older: ignored
    handler.on_barrier(1, CheckpointBarrier(1))
    assert listener.state_labels(1) == {1: [7]} and listener.finished == [1]
    handler.on_end_of_partition(0, EndOfPartition())
    assert "UnalignedBarrierHandler(channels=2, closed=1" in repr(handler)


def test_the_unaligned_handler_never_times_out() -> None:
    handler = UnalignedBarrierHandler(2, RecordingListener())
    assert not handler.is_timed_out(CheckpointBarrier(1, -100.0))
    handler.end_alignment()  # nothing to release
    assert not handler.is_blocked(0) and not handler.handles_on_arrival(EndOfPartition())


def test_a_forced_aligned_barrier_aligns_with_no_channel_state() -> None:
    # the final checkpoint: an overtaking barrier left in-flight records as channel state, which
    # reached the sinks after the checkpoint and were committed again by a rescaled restore
    r = setup(UnalignedBarrierHandler, 2, start_time=10.0)
    forced = CheckpointBarrier(1, 0.0, CheckpointOptions(forced_aligned=True))
    assert not r.handler.handles_on_arrival(forced) and not r.handler.is_timed_out(forced)
    feed(r, [buf(0), barrier(1, 0, forced_aligned=True), buf(0), buf(1)], eager=False)
    assert r.sequence == [] and r.delivered == []  # queued in channel order, behind buffer 0
    feed(r, [POLL], first_label=4)
    assert r.buffers == [0, 3] and r.handler.is_blocked(0)  # buffer 2 came after the barrier: held
    feed(r, [buf(1), barrier(1, 1, forced_aligned=True), POLL], first_label=5)
    assert r.sequence == expect(1) and not r.listener.stats[1].unaligned
    assert r.listener.channel_state == {} and r.listener.finished == []
    r.drain()
    assert r.buffers == [0, 3, 5, 2] and not r.handler.is_blocked(0)
    # an unaligned barrier after it overtakes again
    feed(r, [buf(0), barrier(2, 0)], eager=False, first_label=8)
    assert r.sequence == expect(1, 2) and r.listener.state_labels(2) == {0: [8]}
