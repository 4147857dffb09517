"""BarrierAligner, one scripted test per rule (`docs/semantics.md`, "Aligned checkpoints")."""

from __future__ import annotations

import pytest

from runtime.core.barriers import BarrierAligner, BarrierProtocolError
from runtime.core.barriers.states import WaitingForFirstBarrier
from runtime.records.messages import CancelCheckpointMarker, CheckpointBarrier, EndOfPartition
from vocabulary.reasons import CheckpointFailureReason as R

from .helpers import (
    POLL,
    RecordingListener,
    advance,
    barrier,
    buf,
    cancel,
    eop,
    expect,
    feed,
    make_buffer,
    run,
    setup,
)


def test_single_channel_triggers_every_barrier_at_once() -> None:
    r = run(BarrierAligner, 1, [buf(0), barrier(1, 0), buf(0), barrier(2, 0), buf(0), barrier(4, 0), buf(0)])
    assert r.sequence == expect(1, 2, 4)
    assert r.buffers == [0, 2, 4, 6]
    assert r.listener.stats[1].alignment_time == 0.0 and not r.listener.stats[1].unaligned


def test_blocks_channel_after_barrier_until_all_channels_delivered() -> None:
    steps = [buf(0), barrier(1, 0), buf(0), buf(1), barrier(1, 1), buf(1)]
    r = run(BarrierAligner, 2, steps)
    assert r.sequence == expect(1)
    # 2 arrived after channel 0's barrier: held until checkpoint 1 triggered
    assert r.buffers == [0, 3, 2, 5]


def test_trigger_sees_exactly_the_pre_barrier_data() -> None:
    r = setup(BarrierAligner, 2)
    seen_at_trigger: list[list[int]] = []
    r.listener._on_trigger = lambda b, s: seen_at_trigger.append(list(r.buffers))
    feed(r, [buf(0), barrier(1, 0), buf(0), buf(1), buf(0), barrier(1, 1), buf(1)])
    assert seen_at_trigger == [[0, 3]]
    assert r.buffers == [0, 3, 2, 4, 6]


def test_released_data_comes_first_in_arrival_order_across_channels() -> None:
    steps = [
        barrier(1, 0),  # 0
        barrier(1, 1),  # 1
        buf(0),  # 2 held
        buf(1),  # 3 held
        buf(0),  # 4 held
        buf(2),  # 5 delivered: channel 2 is not blocked
        buf(1),  # 6 held
        POLL,
        buf(2),  # 8 queued, not polled yet
        barrier(1, 2),  # 9 completes the alignment
        buf(2),  # 10
    ]
    r = run(BarrierAligner, 3, steps, eager=False)
    assert r.sequence == expect(1)
    assert r.buffers == [5, 8, 2, 3, 4, 6, 10]


def test_higher_barrier_while_aligning_subsumes_the_current_one() -> None:
    steps = [barrier(1, 0), buf(0), barrier(2, 1), buf(1), buf(0), barrier(2, 0), buf(0)]
    r = run(BarrierAligner, 2, steps)
    assert r.sequence == expect(-1, 2)
    assert r.listener.reasons[1] is R.SUBSUMED
    # 1 was released when checkpoint 1 was subsumed; 3 waited for checkpoint 2
    assert r.buffers == [1, 4, 3, 6]


def test_lower_or_settled_barrier_ids_are_ignored() -> None:
    steps = [barrier(2, 0), barrier(2, 1), barrier(1, 0), buf(0), barrier(2, 1), buf(1), barrier(3, 1), barrier(3, 0)]
    r = run(BarrierAligner, 2, steps)
    assert r.sequence == expect(2, 3)
    assert r.buffers == [3, 5]


def test_repeated_barrier_on_a_channel_is_a_protocol_error_and_changes_nothing() -> None:
    listener = RecordingListener()
    aligner = BarrierAligner(3, listener)
    aligner.on_barrier(0, CheckpointBarrier(1))
    state, stats = aligner.state, aligner.stats()
    with pytest.raises(BarrierProtocolError, match="second barrier of checkpoint 1 on channel 0"):
        aligner.on_barrier(0, CheckpointBarrier(1))
    assert aligner.state is state and aligner.stats() == stats
    assert [aligner.is_blocked(ch) for ch in range(3)] == [True, False, False]
    aligner.on_barrier(1, CheckpointBarrier(1))
    aligner.on_barrier(2, CheckpointBarrier(1))
    assert listener.sequence == expect(1)


def test_end_of_partition_is_a_closed_channel_and_completes_the_alignment() -> None:
    r = run(BarrierAligner, 2, [buf(1), barrier(1, 0), buf(0), buf(1), eop(1), buf(0)])
    assert r.sequence == expect(1)
    assert r.buffers == [0, 3, 2, 5]
    assert r.gate.stats().num_blocked_channels == 0


def test_checkpoint_still_completes_when_some_inputs_finished() -> None:
    r = run(BarrierAligner, 3, [buf(0), eop(0), barrier(1, 1), buf(1), barrier(1, 2), barrier(2, 2), barrier(2, 1)])
    assert r.sequence == expect(1, 2)
    assert r.handler.stats().num_closed_channels == 1


def test_all_remaining_channels_finishing_completes_the_alignment() -> None:
    r = run(BarrierAligner, 3, [barrier(1, 0), buf(0), eop(1), eop(2), eop(0)])
    assert r.sequence == expect(1)
    assert r.gate.is_finished


def test_cancel_marker_for_the_current_checkpoint_aborts_and_releases() -> None:
    r = run(BarrierAligner, 2, [barrier(1, 0), buf(0), cancel(1, 1), buf(0), barrier(1, 1), buf(1)])
    assert r.sequence == expect(-1)
    assert r.listener.reasons[1] is R.CANCELLED
    assert r.buffers == [1, 3, 5]


def test_newer_cancel_marker_aborts_both_and_later_barriers_up_to_it_are_ignored() -> None:
    steps = [barrier(1, 0), cancel(3, 1), barrier(2, 1), barrier(3, 0), buf(0), barrier(3, 1), barrier(4, 0), barrier(4, 1)]
    r = run(BarrierAligner, 2, steps)
    assert r.sequence == expect(-1, -3, 4)
    assert r.listener.reasons == {1: R.CANCELLED, 3: R.CANCELLED}
    assert r.buffers == [4]


def test_newer_cancel_marker_while_waiting_aborts_it() -> None:
    r = run(BarrierAligner, 2, [cancel(2, 0), barrier(1, 1), barrier(2, 1), barrier(2, 0), cancel(2, 1), barrier(3, 0), barrier(3, 1)])
    assert r.sequence == expect(-2, 3)


def test_cancel_marker_for_an_older_checkpoint_is_ignored() -> None:
    r = run(BarrierAligner, 2, [barrier(2, 0), cancel(1, 1), barrier(2, 1), cancel(2, 0)])
    assert r.sequence == expect(2)


def test_exceeding_max_held_bytes_aborts_with_buffer_full_and_releases() -> None:
    size = make_buffer(0).size_bytes
    steps = [barrier(1, 0), buf(0), buf(0), buf(0), barrier(1, 1), buf(1), barrier(2, 0), barrier(2, 1)]
    r = run(BarrierAligner, 2, steps, max_held_bytes=2 * size)
    assert r.sequence == expect(-1, 2)
    assert r.listener.reasons[1] is R.ALIGNMENT_BUFFER_FULL
    assert r.buffers == [1, 2, 3, 5]
    assert r.handler.stats().num_aborted == 1


def test_alignment_stats_come_from_the_clock() -> None:
    size = make_buffer(0).size_bytes
    steps = [advance(1.0), barrier(1, 0, ts=0.5), buf(0), buf(0), advance(2.0), barrier(1, 1, ts=0.5)]
    r = run(BarrierAligner, 2, steps)
    stats = r.listener.stats[1]
    assert stats.alignment_time == pytest.approx(2.0)
    assert stats.start_delay == pytest.approx(2.5)
    assert stats.first_barrier_at == pytest.approx(1.0)  # the per-subtask phases start here
    assert stats.bytes_buffered == 2 * size
    assert not stats.unaligned
    assert r.handler.stats().last_alignment_time == pytest.approx(2.0)
    assert r.gate.stats().last_alignment_time == pytest.approx(2.0)


def test_events_on_unknown_or_closed_channels_are_rejected() -> None:
    aligner = BarrierAligner(2, RecordingListener())
    with pytest.raises(ValueError, match="unknown channel 2"):
        aligner.on_barrier(2, CheckpointBarrier(1))
    aligner.on_end_of_partition(0, EndOfPartition())
    with pytest.raises(BarrierProtocolError, match="EndOfPartition on channel 0 after its EndOfPartition"):
        aligner.on_end_of_partition(0, EndOfPartition())
    with pytest.raises(BarrierProtocolError, match="barrier 1 on channel 0 after its EndOfPartition"):
        aligner.on_barrier(0, CheckpointBarrier(1))
    with pytest.raises(BarrierProtocolError, match="cancel marker 1 on channel 0"):
        aligner.on_cancel(0, CancelCheckpointMarker(1))
    assert isinstance(aligner.state, WaitingForFirstBarrier)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_channels": 0}, "num_channels must be a positive int"),
        ({"num_channels": True}, "num_channels must be a positive int"),
        ({"max_held_bytes": -1}, "max_held_bytes must be >= 0"),
        ({"alignment_timeout": -1.0}, "alignment_timeout must be >= 0"),
        ({"alignment_timeout": 1.0}, "alignment_timeout needs a clock"),
        ({"listener": None}, "a CheckpointListener is required"),
    ],
)
def test_bad_arguments_name_the_option(kwargs: dict, message: str) -> None:
    args = {"num_channels": 2, "listener": RecordingListener()} | kwargs
    with pytest.raises(ValueError, match=message):
        BarrierAligner(args.pop("num_channels"), args.pop("listener"), **args)


def test_repr_and_stats_show_the_key_counters() -> None:
    r = run(BarrierAligner, 2, [barrier(1, 0), buf(0)])
    text = repr(r.handler)
    assert "BarrierAligner(channels=2" in text and "pending=1" in text and "blocked=[0]" in text
    stats = r.handler.stats()
    assert stats.pending_checkpoint_id == 1 and stats.latest_checkpoint_id == 1
    assert stats.num_barriers_received == 1 and stats.num_triggered == 0
    assert r.handler.bytes_buffered == make_buffer(0).size_bytes
