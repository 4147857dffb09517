"""PendingCheckpoint, CompletedCheckpoint, CheckpointStats(Tracker) and the ID counter."""

from __future__ import annotations

import threading

import pytest

from checkpoint.completed import CheckpointMetadataError, CompletedCheckpoint
from checkpoint.ids import StandaloneCheckpointIDCounter
from checkpoint.pending import AckResult, CheckpointStateError, PendingCheckpoint, PendingStatus
from checkpoint.stats import CheckpointStatsTracker
from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId
from vocabulary.reasons import CheckpointFailureReason as R

A, B, C = TaskId("a", 0), TaskId("b", 0), TaskId("b", 1)


def ack(task: TaskId, checkpoint_id: int = 7, **kw) -> TaskAcknowledgement:
    return TaskAcknowledgement(task, checkpoint_id, **kw)


def pending(tasks=(C, A, B)) -> PendingCheckpoint:
    return PendingCheckpoint(7, 10.0, set(tasks), job_id="j", properties={"unaligned": False})


def test_acknowledge_results() -> None:
    p = pending()
    assert p.tasks == (A, B, C) and not p.is_fully_acknowledged
    assert p.acknowledge(ack(B), 10.5) is AckResult.SUCCESS
    assert p.acknowledge(ack(B), 10.6) is AckResult.DUPLICATE
    assert p.acknowledge(ack(TaskId("x", 0)), 10.6) is AckResult.UNKNOWN_TASK
    assert p.not_yet_acknowledged == [A, C] and p.num_acknowledged == 1
    assert p.acknowledge(ack(A), 11.0) is AckResult.SUCCESS
    assert p.acknowledge(ack(C), 12.0) is AckResult.SUCCESS
    assert p.is_fully_acknowledged
    assert p.ack_times == {A: 11.0, B: 10.5, C: 12.0}
    with pytest.raises(ValueError, match="checkpoint 8 delivered to checkpoint 7"):
        p.acknowledge(ack(A, 8), 12.0)


def test_finalize_only_when_fully_acknowledged() -> None:
    p = pending()
    p.acknowledge(ack(A, state_bytes=5), 11.0)
    with pytest.raises(CheckpointStateError, match=r"still waits for b\[0\], b\[1\]"):
        p.finalize(12.0)
    p.acknowledge(ack(B, state_bytes=6, persisted_bytes=3), 11.0)
    p.acknowledge(ack(C, state_bytes=7), 11.5)
    completed = p.finalize(12.0)
    assert (completed.checkpoint_id, completed.trigger_time, completed.completion_time) == (7, 10.0, 12.0)
    assert completed.duration == 2.0 and completed.state_bytes == 18 and completed.persisted_bytes == 3
    assert completed.task_ids == [A, B, C] and completed.job_id == "j"
    assert p.status is PendingStatus.FINALIZED and p.is_disposed
    assert p.acknowledge(ack(A), 13.0) is AckResult.DISCARDED
    with pytest.raises(CheckpointStateError, match="finalized"):
        p.finalize(13.0)
    p.abort(R.STORAGE_FAILURE, 13.0)  # storing it failed
    assert p.failure_reason is R.STORAGE_FAILURE


def test_abort() -> None:
    p = pending()
    p.acknowledge(ack(A), 11.0)
    p.abort(R.TIMEOUT, 20.0)
    assert p.status is PendingStatus.ABORTED and p.failure_reason is R.TIMEOUT and p.end_time == 20.0
    assert p.acknowledge(ack(B), 21.0) is AckResult.DISCARDED
    with pytest.raises(CheckpointStateError, match="already aborted"):
        p.abort(R.SUBSUMED)
    with pytest.raises(TypeError, match="CheckpointFailureReason"):
        pending().abort("timeout")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="checkpoint id"):
        PendingCheckpoint(0, 0.0, [A])


def test_completed_checkpoint_json_round_trip_and_lookup() -> None:
    handle = StateHandle("j/chk-7/taskowned/a", 3, "00" * 32)
    acks = {B: ack(B), A: ack(A, handles={"keyed": (handle,)}, unaligned=True)}
    completed = CompletedCheckpoint("j", 7, 1.0, 2.0, acks, {"mode": "EXACTLY_ONCE"})
    assert list(completed.acks) == [A, B]
    again = CompletedCheckpoint.from_json(completed.to_json())
    assert again == completed and again.to_json_bytes() == completed.to_json_bytes()
    assert completed.referenced_paths() == ["j/chk-7/taskowned/a"]
    assert completed.task_state(A).unaligned
    with pytest.raises(KeyError, match=r"task x\[0\] has no state in checkpoint 7"):
        completed.task_state(TaskId("x", 0))
    with pytest.raises(ValueError, match="filed under"):
        CompletedCheckpoint("j", 7, 1.0, 2.0, {A: ack(B)})


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("job_id"),
        lambda d: d.update(checkpoint_id="7"),
        lambda d: d.update(trigger_time=True),
        lambda d: d.update(properties=[]),
        lambda d: d["acks"].append(d["acks"][0]),
        lambda d: d["acks"][0].pop("task_id"),
    ],
)
def test_completed_checkpoint_from_malformed_json(mutate) -> None:
    data = CompletedCheckpoint("j", 7, 1.0, 2.0, {A: ack(A)}).to_json()
    mutate(data)
    with pytest.raises(CheckpointMetadataError, match="malformed checkpoint metadata"):
        CompletedCheckpoint.from_json(data)


def test_stats_of_completed_and_aborted() -> None:
    tracker = CheckpointStatsTracker()
    p = pending()
    p.acknowledge(ack(A, alignment_time=0.5, bytes_buffered=10, state_bytes=1), 10.5)
    p.acknowledge(ack(B, alignment_time=0.25, persisted_bytes=4, unaligned=True, state_bytes=2), 11.0)
    p.acknowledge(ack(C), 12.0)
    p.finalize(12.0)
    stats = tracker.report_completed(p, 12.0)
    assert stats.completed and stats.failure_reason is None and stats.duration == 2.0
    assert (stats.alignment_time, stats.bytes_buffered, stats.persisted_bytes, stats.state_bytes) == (0.5, 10, 4, 3)
    assert stats.unaligned and stats.ack_delays == {"a[0]": 0.5, "b[0]": 1.0, "b[1]": 2.0}
    assert (stats.num_acknowledged, stats.num_tasks, stats.end_time) == (3, 3, 12.0)

    q = PendingCheckpoint(6, 9.0, [A, B])
    q.acknowledge(ack(A, 6), 9.5)
    q.abort(R.TIMEOUT, 19.0)
    aborted = tracker.report_aborted(q, R.TIMEOUT, 19.0)
    assert aborted.aborted and aborted.failure_reason is R.TIMEOUT and aborted.duration == 10.0
    assert (aborted.num_acknowledged, aborted.num_tasks, aborted.unaligned) == (1, 2, False)
    assert [s.id for s in tracker.history] == [6, 7]
    assert aborted.to_json()["failure_reason"] == "timeout"
    with pytest.raises(ValueError, match="already reported"):
        tracker.report_aborted(q, R.TIMEOUT, 19.0)


def test_stats_summary_and_bounded_history() -> None:
    tracker = CheckpointStatsTracker(max_history=3)
    for checkpoint_id, duration in [(1, 4.0), (2, 1.0), (3, 2.0), (4, 3.0)]:
        p = PendingCheckpoint(checkpoint_id, 0.0, [A])
        p.acknowledge(ack(A, checkpoint_id), duration)
        tracker.report_completed(p, duration)
    for checkpoint_id, reason in [(5, R.TIMEOUT), (6, R.SUBSUMED), (7, R.TIMEOUT)]:
        tracker.report_aborted(PendingCheckpoint(checkpoint_id, 0.0, [A]), reason, 1.0)
    tracker.report_refused(R.MIN_PAUSE)
    summary = tracker.summary()
    assert [s.id for s in tracker.history] == [5, 6, 7]
    assert summary.num_completed == 4 and summary.num_aborted == 3
    assert summary.aborted_by_reason == {"subsumed": 1, "timeout": 2}
    assert summary.refused_by_reason == {"minimum pause not elapsed": 1}
    assert summary.duration_p50 is None and summary.latest_completed_id == 4
    full = CheckpointStatsTracker()
    for checkpoint_id, duration in [(1, 4.0), (2, 1.0), (3, 2.0), (4, 3.0)]:
        p = PendingCheckpoint(checkpoint_id, 0.0, [A])
        full.report_completed(p, duration)
    assert (full.summary().duration_p50, full.summary().duration_max) == (2.5, 4.0)
    assert full.summary().to_json()["num_completed"] == 4


def test_standalone_id_counter() -> None:
    counter = StandaloneCheckpointIDCounter()
    counter.start()
    assert counter.get() == 1 and counter.get_and_increment() == 1 and counter.get() == 2
    counter.set_count(10)
    assert counter.get_and_increment() == 10
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="integer >= 1"):
            counter.set_count(bad)  # type: ignore[arg-type]
    counter.shutdown()


def test_standalone_id_counter_is_atomic() -> None:
    counter = StandaloneCheckpointIDCounter()
    seen: list[int] = []

    def take() -> None:
        seen.extend(counter.get_and_increment() for _ in range(2000))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(1, 8001))


def test_a_coordinator_keeps_a_bounded_history_of_checkpoint_stats() -> None:
    # a job checkpointing every 100 ms for days must not keep every record
    from checkpoint.stats import DEFAULT_MAX_HISTORY

    tracker = CheckpointStatsTracker(max_history=DEFAULT_MAX_HISTORY)
    total = DEFAULT_MAX_HISTORY + 2_500
    for checkpoint_id in range(1, total + 1):
        # out of id order, as with max_concurrent >= 2 (a later one ends first)
        reported = checkpoint_id + 1 if checkpoint_id % 2 else checkpoint_id - 1
        reported = min(reported, total)
        if tracker.get(reported) is None:
            tracker.report_aborted(PendingCheckpoint(reported, 0.0, [A]), R.TIMEOUT, 1.0)
    if tracker.get(total) is None:
        tracker.report_aborted(PendingCheckpoint(total, 0.0, [A]), R.TIMEOUT, 1.0)
    kept = [s.id for s in tracker.history]
    assert len(kept) == DEFAULT_MAX_HISTORY
    assert kept == list(range(total - DEFAULT_MAX_HISTORY + 1, total + 1))  # the oldest ids went first
    assert tracker.summary().num_aborted == total  # counts cover every checkpoint

