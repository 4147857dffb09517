"""BarrierTracker (at-least-once), after Flink's `CheckpointBarrierTrackerTest`."""

from __future__ import annotations

import pytest

from runtime.core.barriers import MAX_CHECKPOINTS_TO_TRACK, BarrierProtocolError, BarrierTracker
from runtime.records.messages import CheckpointBarrier
from vocabulary.reasons import CheckpointFailureReason as R

from .helpers import RecordingListener, advance, barrier, buf, cancel, eop, expect, run


def test_single_channel_triggers_every_newer_barrier_at_once() -> None:
    r = run(BarrierTracker, 1, [buf(0), barrier(1, 0), buf(0), barrier(2, 0), barrier(4, 0), barrier(3, 0), buf(0)])
    assert r.sequence == expect(1, 2, 4)
    assert r.buffers == [0, 2, 6]


def test_multi_channel_triggers_when_every_channel_delivered() -> None:
    steps = [
        buf(0), buf(1), barrier(1, 0), barrier(1, 1), buf(0),
        barrier(2, 1), buf(1), barrier(2, 0),
        barrier(3, 0), barrier(3, 1),
    ]  # fmt: skip
    r = run(BarrierTracker, 2, steps)
    assert r.sequence == expect(1, 2, 3)


def test_the_stats_say_when_the_first_barrier_came_though_nothing_was_blocked() -> None:
    r = run(BarrierTracker, 2, [advance(1.0), barrier(1, 0, ts=0.5), buf(1), advance(2.0), barrier(1, 1, ts=0.5)])
    stats = r.listener.stats[1]
    assert stats.first_barrier_at == pytest.approx(1.0)
    assert stats.alignment_time == 0.0 and stats.start_delay == pytest.approx(2.5)


def test_never_blocks_or_holds_data() -> None:
    steps = [barrier(1, 0), buf(0), buf(1), buf(0), barrier(1, 1), buf(1)]
    r = run(BarrierTracker, 2, steps, eager=False)
    assert r.buffers == [1, 2, 3, 5]
    assert r.gate.stats().bytes_held_max == 0
    assert not any(r.handler.is_blocked(ch) for ch in range(2))


def test_completing_a_checkpoint_aborts_older_pending_ones_as_subsumed() -> None:
    steps = [barrier(1, 0), barrier(2, 0), barrier(3, 0), barrier(2, 1), barrier(3, 1), barrier(1, 1)]
    r = run(BarrierTracker, 2, steps)
    assert r.sequence == expect(-1, 2, 3)
    assert r.listener.reasons[1] is R.SUBSUMED


def test_first_barrier_is_tracked_only_if_newer_than_the_latest_seen() -> None:
    steps = [barrier(3, 0), barrier(2, 1), barrier(2, 0), barrier(3, 1)]
    r = run(BarrierTracker, 2, steps)
    assert r.sequence == expect(3)
    assert r.handler.stats().num_barriers_received == 4


def test_pending_checkpoints_are_bounded_and_the_oldest_dropped() -> None:
    n = MAX_CHECKPOINTS_TO_TRACK
    steps = [barrier(i, 0) for i in range(1, n + 2)]
    r = run(BarrierTracker, 2, steps)
    assert r.sequence == expect(-1)
    assert r.handler.pending_checkpoint_ids == list(range(2, n + 2))
    r2 = run(BarrierTracker, 2, [*steps, barrier(1, 1), barrier(n + 1, 1)])
    assert r2.sequence == expect(-1, *[-i for i in range(2, n + 1)], n + 1)


def test_cancel_marker_aborts_its_checkpoint_and_all_older_pending() -> None:
    steps = [barrier(1, 0), barrier(2, 0), barrier(3, 0), cancel(2, 1), barrier(2, 1), barrier(3, 1)]
    r = run(BarrierTracker, 2, steps)
    assert r.sequence == expect(-1, -2, 3)
    assert r.listener.reasons == {1: R.CANCELLED, 2: R.CANCELLED}


def test_cancel_marker_newer_than_any_seen_aborts_it_and_later_barriers_are_ignored() -> None:
    steps = [barrier(1, 0), cancel(5, 1), barrier(5, 0), barrier(5, 1), cancel(4, 0), barrier(6, 1), barrier(6, 0)]
    r = run(BarrierTracker, 2, steps)
    assert r.sequence == expect(-1, -5, 6)


def test_end_of_partition_completes_pending_checkpoints_in_ascending_order() -> None:
    steps = [barrier(1, 0), barrier(1, 1), barrier(2, 0), barrier(2, 1), barrier(3, 0), eop(2), barrier(4, 0), eop(1)]
    r = run(BarrierTracker, 3, steps)
    assert r.sequence == expect(1, 2, 3, 4)
    assert r.handler.stats().pending_checkpoint_id is None


def test_repeated_barrier_on_a_channel_is_a_protocol_error_and_changes_nothing() -> None:
    listener = RecordingListener()
    tracker = BarrierTracker(3, listener)
    tracker.on_barrier(1, CheckpointBarrier(4))
    stats = tracker.stats()
    with pytest.raises(BarrierProtocolError, match="second barrier of checkpoint 4 on channel 1"):
        tracker.on_barrier(1, CheckpointBarrier(4))
    assert tracker.stats() == stats and tracker.pending_checkpoint_ids == [4]
    assert "BarrierTracker(channels=3" in repr(tracker) and "tracking=[4]" in repr(tracker)
