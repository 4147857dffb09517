"""Alignment timeout: an aligned checkpoint that waits too long turns unaligned for this task."""

from __future__ import annotations

import pytest

from runtime.core.barriers import BarrierAligner
from runtime.core.barriers.states import CollectingChannelState, WaitingForFirstBarrier
from runtime.core.input_gate import CheckpointedInputGate
from runtime.records.messages import BufferOrEvent, CheckpointBarrier, CheckpointOptions
from vocabulary.reasons import CheckpointFailureReason as R

from .helpers import (
    POLL,
    RecordingListener,
    advance,
    barrier,
    buf,
    eop,
    expect,
    feed,
    make_buffer,
    run,
    setup,
)


def test_timer_firing_while_aligning_triggers_unaligned_with_channel_state() -> None:
    steps = [
        barrier(1, 0, ts=0.0),  # 0: channel 0 blocked
        buf(0),  # 1: after the barrier: held, not channel state
        buf(1),  # 2: delivered before the timeout: processed before the snapshot
        POLL,
        buf(1),  # 4: queued at the timeout: channel state
        advance(1.0),  # 5: timeout
        buf(1),  # 6: arrives before channel 1's barrier: channel state
        barrier(1, 1, ts=0.0),  # 7: overtakes the queued data
        buf(1),  # 8: after the barrier
    ]
    r = run(BarrierAligner, 2, steps, eager=False, alignment_timeout=1.0)
    assert r.sequence == expect(1)
    stats = r.listener.stats[1]
    assert stats.unaligned and stats.alignment_time == pytest.approx(1.0)
    assert stats.bytes_buffered == make_buffer(0).size_bytes
    assert r.listener.state_labels(1) == {1: [4, 6]}
    assert r.listener.finished == [1]
    assert r.buffers == [2, 1, 4, 6, 8]
    assert r.handler.num_timeouts == 1
    assert isinstance(r.handler.state, WaitingForFirstBarrier)


def test_barrier_already_past_the_timeout_triggers_unaligned_at_once() -> None:
    steps = [buf(1), barrier(1, 0, ts=0.0), buf(0), buf(1), barrier(1, 1, ts=0.0), buf(1)]
    r = run(BarrierAligner, 2, steps, eager=False, start_time=5.0, alignment_timeout=1.0)
    assert r.sequence == expect(1)
    assert r.listener.stats[1].unaligned
    # buffer 0 was processed before channel 0's barrier; buffer 3 is before channel 1's queued barrier
    assert r.buffers == [0, 2, 3, 5]
    assert r.listener.state_labels(1) == {1: [3]}
    assert r.listener.finished == [1]


def test_barrier_already_queued_at_the_timeout_completes_that_channel_state_at_once() -> None:
    r = setup(BarrierAligner, 3, alignment_timeout=1.0)
    feed(r, [barrier(1, 0), POLL], eager=False)
    # channel 1: 2 buffers, its barrier and a post-barrier buffer, all still queued
    feed(r, [buf(1), buf(1), barrier(1, 1), buf(1), buf(2)], eager=False, first_label=10)
    r.timers.advance(2.0)
    assert r.sequence == expect(1)
    assert r.listener.state_labels(1) == {1: [10, 11]}
    assert isinstance(r.handler.state, CollectingChannelState)
    assert r.handler.state.awaiting == {1} and set(r.handler.state.recording) == {2}
    feed(r, [buf(2), barrier(1, 2)], eager=False, first_label=20)
    assert r.listener.state_labels(1) == {1: [10, 11], 2: [14, 20]}
    # channel 1's barrier is still queued, but its channel state is known: complete now, without
    # waiting for the backlog in front of that barrier to be processed
    assert r.listener.finished == [1]
    r.drain()  # the queued barrier, when it reaches the head, is an old one: ignored
    assert r.listener.finished == [1] and r.sequence == expect(1)
    assert r.buffers == [10, 11, 13, 14, 20]


def test_timer_is_cancelled_when_the_checkpoint_triggers_or_aborts() -> None:
    r = run(BarrierAligner, 2, [barrier(1, 0), barrier(1, 1)], alignment_timeout=1.0)
    assert r.sequence == expect(1) and r.timers.pending == 0
    feed(r, [barrier(2, 0)])
    assert r.timers.pending == 1
    feed(r, [barrier(3, 1)])  # subsumes 2: its timer goes, 3's timer comes
    assert r.timers.pending == 1
    r.timers.advance(5.0)
    assert r.sequence == expect(1, -2, 3)
    assert r.listener.stats[3].unaligned


def test_barrier_option_overrides_the_handler_timeout() -> None:
    r = run(BarrierAligner, 2, [barrier(1, 0, alignment_timeout=0.5), advance(0.5), barrier(1, 1)])
    assert r.sequence == expect(1)
    assert r.listener.stats[1].unaligned
    assert r.listener.finished == [1]


def test_timeout_zero_means_unaligned_from_the_first_barrier() -> None:
    r = run(BarrierAligner, 2, [buf(1), barrier(1, 0), buf(0), buf(1), barrier(1, 1)], eager=False, alignment_timeout=0.0)
    assert r.listener.stats[1].unaligned
    assert r.gate.stats().bytes_held_max == 0


def test_a_forced_aligned_barrier_never_times_out() -> None:
    # the final checkpoint, taken aligned whatever the mode: no in-flight records in it
    steps = [buf(1), barrier(1, 0, forced_aligned=True), buf(0), buf(1), advance(5.0), barrier(1, 1, forced_aligned=True)]
    r = run(BarrierAligner, 2, steps, eager=False, start_time=5.0, alignment_timeout=0.0)
    assert r.sequence == expect(1) and not r.listener.stats[1].unaligned
    assert r.listener.channel_state == {} and r.handler.num_timeouts == 0
    assert r.buffers == [0, 3, 2]


def test_barrier_timeout_without_a_clock_is_a_clear_error() -> None:
    aligner = BarrierAligner(2, RecordingListener())
    gate = CheckpointedInputGate(2, aligner)
    with pytest.raises(ValueError, match="barrier 1 asks for alignment_timeout=1.0 but this BarrierAligner has no clock"):
        # raised when the barrier arrives (its announcement would start the timer)
        gate.push(BufferOrEvent(0, CheckpointBarrier(1, 0.0, CheckpointOptions(alignment_timeout=1.0))))


def test_without_timers_the_timeout_is_checked_when_barriers_arrive() -> None:
    r = setup(BarrierAligner, 3, alignment_timeout=1.0)
    r.handler.timers = None
    feed(r, [barrier(1, 0), advance(3.0), buf(0)])
    assert r.sequence == expect()
    feed(r, [barrier(1, 1)], first_label=10)
    assert r.sequence == expect(1) and r.listener.stats[1].unaligned


def test_timed_out_checkpoint_subsumed_by_a_newer_barrier() -> None:
    steps = [barrier(1, 0), advance(2.0), buf(1), barrier(2, 0, ts=2.0), barrier(2, 1, ts=2.0)]
    r = run(BarrierAligner, 2, steps, alignment_timeout=1.0)
    assert r.sequence == expect(1, -1, 2)
    assert r.listener.reasons[1] is R.SUBSUMED
    # buffer 2 was being recorded for checkpoint 1, subsumed before channel 1 delivered barrier 1
    assert r.listener.state_labels(1) == {}
    assert not r.listener.stats[2].unaligned
    assert r.listener.finished == []


def test_end_of_partition_finishes_the_channel_state() -> None:
    steps = [barrier(1, 0), buf(1), advance(2.0), buf(1), eop(1)]
    r = run(BarrierAligner, 2, steps, eager=False, alignment_timeout=1.0)
    assert r.listener.state_labels(1) == {1: [1, 3]}
    assert r.listener.finished == [1]
    assert r.gate.stats().bytes_held == 0
    assert len(r.gate) == 0
