"""Coordinator unit tests, one behaviour each, driven by a ManualClock and a recording gateway.

Outcomes are written Flink-style: `+id` completed, `-id` aborted, in event order.
"""

from __future__ import annotations

import pytest
from ckpt_testkit import JOB, SINK, SRC, TASKS, FailingBlobStore, make_harness

from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.failure_manager import CheckpointFailureLimitError
from checkpoint.ids import StandaloneCheckpointIDCounter
from checkpoint.pending import AckResult
from checkpoint.storage.layout import MemoryBlobStore
from checkpoint.storage.store import StandaloneCompletedCheckpointStore
from vocabulary.handles import TaskId
from vocabulary.options import CheckpointConfig, CheckpointingMode
from vocabulary.ports import ManualClock, ManualTimers
from vocabulary.reasons import CheckpointFailureReason as R


def trigger_times(h) -> list[tuple[int, float]]:
    return sorted({(cid, ts) for _, cid, ts, *_ in h.gateway.triggers})


def test_periodic_trigger_ack_and_complete() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, timeout=10.0))
    h.coordinator.start()
    h.advance(0.99)
    assert h.gateway.triggers == []
    h.advance(0.01)
    assert h.gateway.triggers == [(SRC[0], 1, 1.0, False, None), (SRC[1], 1, 1.0, False, None)]
    assert h.coordinator.pending_ids == [1]
    h.advance(0.25)
    h.ack(SRC[0], 1, alignment_time=0.1)
    h.ack(SRC[1], 1)
    assert h.coordinator.pending_ids == [1]
    h.advance(0.25)
    assert h.ack(SINK, 1, persisted_bytes=5) is AckResult.SUCCESS
    assert h.coordinator.pending_ids == []
    assert h.gateway.events[-5:] == [
        ("commit", 1), ("complete", "sink[0]", 1), ("complete", "src[0]", 1), ("complete", "src[1]", 1), ("completed", 1),
    ]
    latest = h.coordinator.latest_completed()
    assert latest.checkpoint_id == 1 and latest.metadata_path == f"{JOB}/chk-1/_metadata"
    assert latest.task_ids == sorted(TASKS) and latest.properties["mode"] == "EXACTLY_ONCE"
    stats = h.coordinator.stats.history[0]
    assert stats.completed and stats.duration == 0.5 and stats.alignment_time == 0.1
    assert stats.ack_delays == {"sink[0]": 0.5, "src[0]": 0.25, "src[1]": 0.25} and stats.persisted_bytes == 5
    h.advance(1.5)  # tick at 2.0 triggers 2; tick at 3.0 finds 2 still pending (max_concurrent=1)
    assert trigger_times(h) == [(1, 1.0), (2, 2.0)]


def test_trigger_passes_unaligned_and_alignment_timeout() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, unaligned=True))
    h.coordinator.trigger_checkpoint()
    assert {t[3:] for t in h.gateway.triggers} == {(True, None)}
    h = make_harness(CheckpointConfig(interval=1.0, alignment_timeout=0.2))
    h.coordinator.trigger_checkpoint(now=0.5)
    assert {t[2:] for t in h.gateway.triggers} == {(0.5, False, 0.2)}
    h = make_harness(CheckpointConfig(interval=1.0, mode=CheckpointingMode.AT_LEAST_ONCE))
    h.coordinator.trigger_checkpoint()
    assert {t[3:] for t in h.gateway.triggers} == {(False, None)}


def test_periodic_interval_keeps_ticking_and_stop_halts_it() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, timeout=0.5, tolerable_failures=100))
    h.coordinator.start()
    h.coordinator.start()  # idempotent
    h.advance(3.0)
    assert trigger_times(h) == [(1, 1.0), (2, 2.0), (3, 3.0)]
    h.coordinator.stop()
    h.advance(5.0)
    assert h.gateway.triggered_ids() == [1, 2, 3] and not h.coordinator.is_periodic_triggering


def test_timeout_aborts_notifies_and_discards_files() -> None:
    h = make_harness(CheckpointConfig(timeout=5.0, tolerable_failures=5))
    assert h.coordinator.trigger_checkpoint() == 1
    h.ack(SRC[0], 1)
    assert h.storage.list_checkpoint_files(JOB, 1) != []
    h.advance(4.99)
    assert h.coordinator.pending_ids == [1]
    h.advance(0.01)
    assert h.coordinator.pending_ids == []
    assert [e for e in h.gateway.events if e[0] == "abort"] == [
        ("abort", str(t), 1, R.TIMEOUT) for t in sorted(TASKS)
    ]
    stats = h.coordinator.stats.get(1)
    assert stats.failure_reason is R.TIMEOUT and stats.duration == 5.0 and stats.num_acknowledged == 1
    assert h.storage.list_checkpoint_files(JOB, 1) == []
    assert h.coordinator.consecutive_failures == 1


def test_min_pause_delays_the_next_periodic_trigger() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, min_pause=3.0, timeout=100.0))
    h.coordinator.start()
    h.advance(1.0)
    h.advance(0.5)
    h.ack_all(1)  # completes at 1.5: nothing may start before 4.5
    assert h.coordinator.trigger_checkpoint() is R.MIN_PAUSE
    h.advance(2.9)
    assert h.gateway.triggered_ids() == [1]
    h.advance(0.1)
    assert trigger_times(h) == [(1, 1.0), (2, 4.5)]
    assert h.coordinator.stats.summary().refused_by_reason["minimum pause not elapsed"] >= 2


def test_force_ignores_min_pause_and_max_concurrent() -> None:
    h = make_harness(CheckpointConfig(min_pause=10.0, max_concurrent=1))
    h.coordinator.trigger_checkpoint()
    assert h.coordinator.trigger_checkpoint() is R.TOO_MANY_CHECKPOINTS
    assert h.coordinator.trigger_checkpoint(force=True) == 2
    h.ack_all(2)
    assert h.gateway.outcome() == [-1, 2]
    assert h.coordinator.trigger_checkpoint() is R.MIN_PAUSE
    assert h.coordinator.trigger_checkpoint(force=True) == 3


def test_max_concurrent_defers_periodic_trigger_until_a_slot_frees() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, max_concurrent=2, timeout=100.0))
    h.coordinator.start()
    h.advance(5.5)
    assert trigger_times(h) == [(1, 1.0), (2, 2.0)]
    assert h.coordinator.trigger_checkpoint() is R.TOO_MANY_CHECKPOINTS
    assert len(h.coordinator.pending_ids) == 2
    h.ack_all(1)  # frees a slot at 5.5: the waiting periodic trigger runs at once
    h.advance(0.0)
    assert trigger_times(h) == [(1, 1.0), (2, 2.0), (3, 5.5)]
    h.advance(1.0)  # and the interval restarts from there (but both slots are full again)
    assert h.gateway.triggered_ids() == [1, 2, 3]
    h.ack_all(2)
    h.advance(0.0)
    assert trigger_times(h)[-1] == (4, 6.5)


def test_completion_subsumes_older_pending_checkpoints() -> None:
    h = make_harness(CheckpointConfig(max_concurrent=3, timeout=100.0))
    for expected in (1, 2, 3):
        assert h.coordinator.trigger_checkpoint() == expected
    h.ack(SRC[0], 2)
    h.ack_all(3)
    assert h.gateway.outcome() == [-1, -2, 3]
    assert h.gateway.aborted() == {1: R.SUBSUMED, 2: R.SUBSUMED}
    assert h.coordinator.consecutive_failures == 0  # subsumption is not a failure
    assert h.ack(SRC[1], 2) is AckResult.DISCARDED  # late ack for a subsumed checkpoint
    assert h.coordinator.counters["acks_for_unknown_checkpoint"] == 1
    h.advance(200.0)  # their timeouts were cancelled
    assert h.gateway.outcome() == [-1, -2, 3]


def test_tolerable_failures_fail_job_exactly_when_exceeded() -> None:
    h = make_harness(CheckpointConfig(timeout=1.0, tolerable_failures=2))
    for _ in range(2):
        h.coordinator.trigger_checkpoint()
        h.advance(1.0)
    assert h.gateway.failures == [] and h.coordinator.consecutive_failures == 2
    h.coordinator.trigger_checkpoint()
    h.coordinator.receive_decline(SINK, 3)  # declines count too
    assert len(h.gateway.failures) == 1
    error = h.gateway.failures[0]
    assert isinstance(error, CheckpointFailureLimitError)
    assert "3 consecutive failures (tolerable_failures=2)" in str(error) and "checkpoint 3" in str(error)
    assert h.gateway.events[-1] == ("fail_job",)  # after the abort notifications
    assert h.coordinator.consecutive_failures == 0 and h.coordinator.num_job_failures == 1


def test_completion_resets_consecutive_failures() -> None:
    h = make_harness(CheckpointConfig(timeout=1.0, tolerable_failures=1))
    h.coordinator.trigger_checkpoint()
    h.advance(1.0)
    h.ack_all(h.coordinator.trigger_checkpoint())
    assert h.coordinator.consecutive_failures == 0
    h.coordinator.trigger_checkpoint()
    h.advance(1.0)
    assert h.gateway.failures == []
    h.coordinator.trigger_checkpoint()
    h.advance(1.0)
    assert len(h.gateway.failures) == 1


def test_uncounted_reasons_never_fail_the_job() -> None:
    h = make_harness(CheckpointConfig(timeout=100.0, tolerable_failures=0, max_concurrent=5))
    h.coordinator.trigger_checkpoint()
    h.coordinator.receive_decline(SRC[0], 1, R.CANCELLED)
    h.coordinator.trigger_checkpoint()
    h.coordinator.abort_all_pending(R.TASK_FAILURE)
    assert h.gateway.failures == [] and h.gateway.aborted() == {1: R.CANCELLED, 2: R.TASK_FAILURE}


def test_decline_aborts_with_its_reason() -> None:
    h = make_harness(CheckpointConfig(timeout=100.0, tolerable_failures=9))
    h.coordinator.trigger_checkpoint()
    assert h.coordinator.receive_decline(SINK, 1, R.ALIGNMENT_BUFFER_FULL)
    assert h.gateway.aborted() == {1: R.ALIGNMENT_BUFFER_FULL}
    assert h.coordinator.stats.get(1).failure_reason is R.ALIGNMENT_BUFFER_FULL
    assert not h.coordinator.receive_decline(SINK, 1)  # already aborted
    assert not h.coordinator.receive_decline(SINK, 99)
    h.coordinator.trigger_checkpoint()
    assert not h.coordinator.receive_decline(TaskId("stranger", 0), 2)
    assert h.coordinator.counters["declines_ignored"] == 3
    with pytest.raises(TypeError, match="CheckpointFailureReason"):
        h.coordinator.receive_decline(SINK, 2, "nope")  # type: ignore[arg-type]


def test_duplicate_unknown_task_and_late_acks_are_ignored() -> None:
    h = make_harness(CheckpointConfig(timeout=1.0, tolerable_failures=9))
    h.coordinator.trigger_checkpoint()
    assert h.ack(SRC[0], 1) is AckResult.SUCCESS
    assert h.ack(SRC[0], 1) is AckResult.DUPLICATE
    assert h.ack(TaskId("ghost", 0), 1) is AckResult.UNKNOWN_TASK
    h.advance(1.0)
    assert h.ack(SRC[1], 1, write=False) is AckResult.DISCARDED
    assert h.ack(SINK, 42, write=False) is AckResult.DISCARDED
    assert h.coordinator.counters == {
        "acks_for_unknown_checkpoint": 2, "acks_duplicate": 1, "acks_unknown_task": 1, "declines_ignored": 0,
        "final_notifications_repeated": 0,
    }
    assert h.gateway.completed == []


def test_retained_store_keeps_n_and_deletes_the_rest() -> None:
    h = make_harness(CheckpointConfig(retained=2, timeout=100.0))
    for checkpoint_id in (1, 2, 3, 4):
        h.ack_all(h.coordinator.trigger_checkpoint())
        assert h.coordinator.latest_completed().checkpoint_id == checkpoint_id
    assert [c.checkpoint_id for c in h.store.get_all_checkpoints()] == [3, 4]
    assert h.storage.list_checkpoint_ids(JOB) == [3, 4]


def test_storage_failure_aborts_and_the_next_checkpoint_completes() -> None:
    blob = FailingBlobStore(MemoryBlobStore())
    h = make_harness(CheckpointConfig(timeout=100.0, tolerable_failures=3), blob_store=blob)
    h.coordinator.trigger_checkpoint()
    blob.fail_writes(1, matching="_metadata")
    h.ack_all(1)
    assert h.gateway.aborted() == {1: R.STORAGE_FAILURE} and h.gateway.completed == []
    assert h.store.get_all_checkpoints() == [] and h.storage.list_checkpoint_ids(JOB) == []
    assert h.coordinator.consecutive_failures == 1
    h.ack_all(h.coordinator.trigger_checkpoint())
    assert h.gateway.outcome() == [-1, 2] and h.coordinator.consecutive_failures == 0


def test_each_completed_checkpoint_is_committed_once_before_any_task_hears_of_it() -> None:
    # the global commit hangs on one call per completion, not on every task's notification
    h = make_harness(CheckpointConfig(interval=1.0, timeout=100.0, max_concurrent=2, tolerable_failures=9))
    first, second, third = (h.coordinator.trigger_checkpoint() for _ in range(3))
    h.ack_all(second)  # subsumes the first: aborted, never committed
    h.coordinator.receive_decline(SINK, third)
    h.ack_all(fourth := h.coordinator.trigger_checkpoint())
    assert h.gateway.committed_ids() == [second, fourth]
    for checkpoint_id in (second, fourth):
        commit = h.gateway.events.index(("commit", checkpoint_id))
        told = [i for i, e in enumerate(h.gateway.events) if e[0] == "complete" and e[2] == checkpoint_id]
        assert len(told) == len(TASKS) and commit < min(told)
        assert h.gateway.events.index(("completed", checkpoint_id)) > max(told)
    assert first not in h.gateway.committed_ids() and third not in h.gateway.committed_ids()


def test_final_checkpoint_after_all_sources_finished() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, timeout=100.0, tolerable_failures=9))
    h.coordinator.start()
    h.advance(0.5)
    h.coordinator.source_finished(SRC[0])
    h.advance(0.0)
    assert h.coordinator.final_checkpoint_id is None and h.gateway.triggers == []
    h.coordinator.source_finished(SRC[1])
    h.coordinator.source_finished(SRC[1])  # repeated: no effect
    h.advance(0.0)  # at once, not at the next interval
    assert trigger_times(h) == [(1, 0.5)] and h.coordinator.final_checkpoint_id == 1
    h.advance(0.2)
    h.coordinator.receive_decline(SINK, 1)  # the final checkpoint fails: retried
    h.advance(0.3)  # no periodic tick once every source finished
    assert trigger_times(h) == [(1, 0.5)] and not h.coordinator.is_periodic_triggering
    h.advance(0.7)  # the retry timer (0.7 + final_retry_delay = interval) triggers 2
    assert trigger_times(h) == [(1, 0.5), (2, 1.7)] and h.coordinator.final_checkpoint_id == 2
    assert h.coordinator.get_pending(2).properties["final"] is True
    h.advance(3.0)  # candidate 2 in flight: nothing else
    assert h.gateway.triggered_ids() == [1, 2]
    h.ack_all(2)
    assert h.coordinator.is_final_checkpoint_complete and h.coordinator.final_checkpoint_id == 2
    h.advance(10.0)
    assert h.gateway.triggered_ids() == [1, 2] and not h.coordinator.is_periodic_triggering
    assert h.coordinator.trigger_checkpoint() is R.JOB_FINISHED


@pytest.mark.parametrize("unaligned, alignment_timeout", [(True, None), (False, 0.0)])
def test_the_final_checkpoint_is_forced_aligned_whatever_the_mode(unaligned: bool,
                                                                   alignment_timeout: float | None) -> None:
    # an unaligned final checkpoint held in-flight records that the sinks committed at end of
    # input; restored at another parallelism they reached other sink subtasks: committed twice
    h = make_harness(CheckpointConfig(interval=1.0, timeout=100.0, unaligned=unaligned,
                                      alignment_timeout=alignment_timeout))
    h.coordinator.start()
    h.advance(1.0)
    assert h.coordinator.get_pending(1).properties["unaligned"] is unaligned
    h.ack_all(1)
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    assert h.gateway.triggered_ids() == [1, 2] and h.coordinator.final_checkpoint_id == 2
    assert {t[1:] for t in h.gateway.triggers} == {(1, 1.0, unaligned, alignment_timeout), (2, 1.0, False, None)}
    assert h.gateway.forced_aligned == {1: False, 2: True}
    assert h.coordinator.get_pending(2).properties["unaligned"] is False


def test_one_final_candidate_at_a_time_even_with_max_concurrent() -> None:
    # regression: periodic triggers after the final one staged sink transactions nothing committed
    h = make_harness(CheckpointConfig(interval=0.1, timeout=100.0, max_concurrent=3))
    h.coordinator.start()
    h.advance(0.1)
    assert h.gateway.triggered_ids() == [1]
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    assert h.gateway.triggered_ids() == [1, 2] and h.coordinator.final_checkpoint_id == 2
    h.advance(1.0)  # ten intervals: no periodic trigger, and no second candidate
    assert h.gateway.triggered_ids() == [1, 2] and not h.coordinator.is_periodic_triggering
    assert h.coordinator.trigger_checkpoint() is R.TOO_MANY_CHECKPOINTS
    h.ack_all(2)
    assert h.coordinator.is_final_checkpoint_complete and h.gateway.aborted() == {1: R.SUBSUMED}
    assert h.coordinator.latest_completed().properties["final"] is True
    h.coordinator.start()  # a late start() does not resume ticking either
    h.advance(1.0)
    assert h.gateway.triggered_ids() == [1, 2]


def test_a_restored_final_checkpoint_is_final_again_without_a_new_checkpoint() -> None:
    # regression: after a failover past the final (unaligned) checkpoint, the replayed in-flight
    # records were staged under a new checkpoint although some sinks had committed them already
    h = make_harness(CheckpointConfig(interval=0.1, timeout=100.0))
    h.coordinator.start()
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    h.ack_all(1)
    final = h.coordinator.latest_completed()
    assert final.properties["final"] is True
    h.coordinator.stop()
    h.coordinator.abort_all_pending(R.TASK_FAILURE)
    h.coordinator.restart(SRC, TASKS)
    h.coordinator.restored_from(final)
    h.coordinator.start()
    h.advance(1.0)  # sources not finished yet: still no trigger, periodic or manual
    assert h.gateway.triggered_ids() == [1] and h.coordinator.trigger_checkpoint() is R.JOB_FINISHED
    events = len(h.gateway.events)
    for source in SRC:
        h.coordinator.source_finished(source)
    assert h.coordinator.is_final_checkpoint_complete and h.coordinator.final_checkpoint_id == 1
    # committed once more (idempotent) before the tasks hear of it: a new run restoring a final
    # checkpoint may not have committed it
    assert h.gateway.events[events:] == [("commit", 1)] + [("complete", str(t), 1) for t in sorted(TASKS)]
    assert h.gateway.triggered_ids() == [1]


def test_the_final_completion_is_repeated_until_the_coordinator_stops() -> None:
    # regression: a lost notification of the final checkpoint left its source waiting forever
    h = make_harness(CheckpointConfig(interval=0.1, timeout=100.0), final_retry_delay=0.5)
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    h.ack_all(1)
    notified = [e for e in h.gateway.events if e[0] == "complete"]
    h.advance(1.0)
    assert [e for e in h.gateway.events if e[0] == "complete"] == notified * 3
    assert h.gateway.committed_ids() == [1]  # the repeats are notifications only
    assert h.coordinator.counters["final_notifications_repeated"] == 2
    h.coordinator.stop()  # the job ended
    h.advance(5.0)
    assert h.coordinator.counters["final_notifications_repeated"] == 2
    assert h.gateway.triggered_ids() == [1]


def test_a_restored_checkpoint_that_was_not_final_checkpoints_as_usual() -> None:
    h = make_harness(CheckpointConfig(interval=0.1, timeout=100.0))
    h.coordinator.trigger_checkpoint()
    h.ack_all(1)
    h.coordinator.restart(SRC, TASKS)
    h.coordinator.restored_from(h.coordinator.latest_completed())
    h.coordinator.start()
    h.advance(0.1)
    assert h.gateway.triggered_ids() == [1, 2]


def test_final_checkpoint_waits_for_slot_and_ignores_min_pause() -> None:
    h = make_harness(CheckpointConfig(interval=100.0, min_pause=50.0, timeout=1000.0))
    h.coordinator.trigger_checkpoint()  # 1 started before the sources finished
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(1.0)
    assert h.gateway.triggered_ids() == [1]  # max_concurrent=1: wait
    h.ack_all(1)
    assert not h.coordinator.is_final_checkpoint_complete  # 1 started before: not final
    h.advance(0.0)
    assert trigger_times(h) == [(1, 0.0), (2, 1.0)]  # despite min_pause
    h.ack_all(2)
    assert h.coordinator.is_final_checkpoint_complete and h.coordinator.final_checkpoint_id == 2


def test_final_checkpoint_retries_after_abort_without_periodic_triggering() -> None:
    h = make_harness(CheckpointConfig(timeout=2.0, tolerable_failures=9), final_retry_delay=0.5)
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    h.advance(2.0)  # times out
    assert h.gateway.aborted() == {1: R.TIMEOUT}
    h.advance(0.49)
    assert h.gateway.triggered_ids() == [1]
    h.advance(0.01)
    assert trigger_times(h) == [(1, 0.0), (2, 2.5)]
    h.ack_all(2)
    assert h.coordinator.is_final_checkpoint_complete


def test_source_finished_rejects_non_sources() -> None:
    h = make_harness()
    with pytest.raises(ValueError, match=r"sink\[0\] is not a source task of job 'job-1'"):
        h.coordinator.source_finished(SINK)


def test_ids_strictly_increase_across_restart() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, max_concurrent=2, timeout=100.0))
    h.coordinator.start()
    h.advance(2.0)
    h.ack_all(1)
    new_sources = [TaskId("src2", 0)]
    new_tasks = [*new_sources, TaskId("sink2", 0)]
    h.coordinator.restart(new_sources, new_tasks)
    assert h.gateway.aborted() == {2: R.TASK_FAILURE} and h.coordinator.pending_ids == []
    assert h.coordinator.consecutive_failures == 0
    h.advance(1.0)
    assert h.gateway.triggers[-1][:2] == (new_sources[0], 3)
    h.ack_all(3, new_tasks)
    assert h.coordinator.latest_completed().checkpoint_id == 3


def test_ids_continue_above_recovered_store_after_coordinator_failover() -> None:
    h = make_harness(CheckpointConfig(timeout=100.0))
    h.ack_all(h.coordinator.trigger_checkpoint())
    h.ack_all(h.coordinator.trigger_checkpoint())
    store = StandaloneCompletedCheckpointStore(h.storage, JOB)
    store.recover()
    clock = ManualClock()
    fresh = CheckpointCoordinator(
        JOB, CheckpointConfig(timeout=100.0), clock=clock, timers=ManualTimers(clock), gateway=h.gateway,
        store=store, id_counter=StandaloneCheckpointIDCounter(), source_tasks=SRC, all_tasks=TASKS,
    )
    assert fresh.latest_completed().checkpoint_id == 2
    assert fresh.trigger_checkpoint() == 3


def test_shutdown_aborts_pending_and_refuses_triggers() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, max_concurrent=2, timeout=100.0))
    h.coordinator.start()
    h.advance(2.0)
    h.coordinator.shutdown()
    h.coordinator.shutdown()
    assert h.gateway.aborted() == {1: R.COORDINATOR_SHUTDOWN, 2: R.COORDINATOR_SHUTDOWN}
    assert h.coordinator.trigger_checkpoint(force=True) is R.COORDINATOR_SHUTDOWN
    h.advance(5.0)
    assert h.gateway.triggered_ids() == [1, 2]
    with pytest.raises(RuntimeError, match="shut down"):
        h.coordinator.start()


def test_fail_job_reentering_the_coordinator_stays_consistent() -> None:
    h = make_harness(CheckpointConfig(timeout=1.0, max_concurrent=3, tolerable_failures=0))
    h.gateway.fail_job = lambda error: h.coordinator.abort_all_pending(R.TASK_FAILURE)  # type: ignore[method-assign]
    h.coordinator.trigger_checkpoint()
    h.advance(0.5)
    h.coordinator.trigger_checkpoint()
    h.coordinator.trigger_checkpoint()
    h.advance(0.5)  # 1 times out -> fail_job -> the executor aborts everything else
    assert h.gateway.aborted() == {1: R.TIMEOUT, 2: R.TASK_FAILURE, 3: R.TASK_FAILURE}
    assert h.coordinator.pending_ids == []
    h.advance(5.0)  # no stale timers fire
    assert len(h.coordinator.stats.history) == 3


@pytest.mark.parametrize(
    ("sources", "tasks", "message"),
    [
        ([], TASKS, "at least one task in source_tasks"),
        (SRC, [SRC[0], SRC[0], *SRC], r"all_tasks repeats src\[0\]"),
        ([TaskId("other", 0)], TASKS, r"source tasks other\[0\] are not in all_tasks"),
        (["src[0]"], TASKS, "must hold TaskIds"),
    ],
)
def test_task_lists_are_validated(sources, tasks, message) -> None:
    clock = ManualClock()
    h = make_harness()
    with pytest.raises(ValueError, match=message):
        CheckpointCoordinator(
            JOB, CheckpointConfig(), clock=clock, timers=ManualTimers(clock), gateway=h.gateway,
            store=h.store, id_counter=StandaloneCheckpointIDCounter(), source_tasks=sources, all_tasks=tasks,
        )


def test_stop_pauses_the_final_checkpoint_until_start() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, timeout=100.0, tolerable_failures=9))
    h.coordinator.start()
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    assert h.gateway.triggered_ids() == [1]
    h.coordinator.stop()  # a failover begins
    h.coordinator.abort_all_pending(R.TASK_FAILURE)
    h.advance(5.0)
    assert h.gateway.triggered_ids() == [1] and h.coordinator.is_suspended
    h.coordinator.start()
    h.advance(0.0)
    assert trigger_times(h) == [(1, 0.0), (2, 5.0)]
    h.ack_all(2)
    assert h.coordinator.is_final_checkpoint_complete


def test_failover_sequence_resets_the_final_checkpoint() -> None:
    h = make_harness(CheckpointConfig(interval=1.0, timeout=100.0))
    h.coordinator.start()
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    h.coordinator.stop()
    h.coordinator.abort_all_pending(R.TASK_FAILURE)
    h.coordinator.restart(SRC, TASKS)
    h.coordinator.start()
    assert not h.coordinator.all_sources_finished and h.coordinator.final_checkpoint_id is None
    h.advance(0.5)
    assert h.gateway.triggered_ids() == [1]  # nothing until the interval or the sources finish again
    h.advance(0.5)
    assert trigger_times(h) == [(1, 0.0), (2, 1.0)]
    assert not h.coordinator.is_final_checkpoint_complete


def test_a_source_declining_synchronously_stops_the_trigger_loop() -> None:
    h = make_harness(CheckpointConfig(timeout=100.0, tolerable_failures=9))
    record = h.gateway.trigger_source

    def trigger_and_decline(task_id, checkpoint_id, *args):
        record(task_id, checkpoint_id, *args)
        h.coordinator.receive_decline(task_id, checkpoint_id, R.INPUT_FINISHED)

    h.gateway.trigger_source = trigger_and_decline  # type: ignore[method-assign]
    assert h.coordinator.trigger_checkpoint() == 1
    assert [t[0] for t in h.gateway.triggers] == [SRC[0]]  # src[1] was never asked
    assert h.gateway.aborted() == {1: R.INPUT_FINISHED} and h.coordinator.pending_ids == []


def test_counter_behind_the_store_is_advanced() -> None:
    h = make_harness(CheckpointConfig(timeout=100.0))
    h.ack_all(h.coordinator.trigger_checkpoint())
    h.ack_all(h.coordinator.trigger_checkpoint())
    h.counter.set_count(1)  # e.g. a counter restored from a stale snapshot
    assert h.coordinator.trigger_checkpoint() == 3
    assert h.counter.get() == 4


def test_failure_limit_error_pickles() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(CheckpointFailureLimitError(3, 2, 7, R.TIMEOUT)))
    assert (error.failures, error.tolerable, error.checkpoint_id, error.reason) == (3, 2, 7, R.TIMEOUT)
    assert "checkpoint 7 aborted (timeout)" in str(error)


def _failing_counter_harness(tolerable_failures: int):
    """A started coordinator whose id counter persists to a blob store that fails on demand."""
    from checkpoint.ids import StorageCheckpointIDCounter

    def counter_on(storage):
        counter = StorageCheckpointIDCounter(storage, JOB)
        counter.start()
        return counter

    blob = FailingBlobStore(MemoryBlobStore())
    h = make_harness(CheckpointConfig(interval=1.0, timeout=100.0, tolerable_failures=tolerable_failures),
                     blob_store=blob, id_counter=counter_on)
    h.coordinator.start()
    return h, blob


def test_a_periodic_trigger_whose_id_cannot_be_stored_is_refused_and_ticking_goes_on() -> None:
    # regression: the id counter's write raised out of the timer callback; on Ray the timer
    # thread logged it and nothing triggered again
    h, blob = _failing_counter_harness(5)
    blob.fail_writes(1, matching="_checkpoint_counter")
    h.advance(1.0)
    assert h.gateway.triggers == [] and h.coordinator.pending_ids == []
    assert h.coordinator.stats.summary().refused_by_reason == {R.STORAGE_FAILURE.value: 1}
    assert h.coordinator.consecutive_failures == 1 and h.coordinator.is_periodic_triggering
    h.advance(1.0)  # the next interval triggers as usual, above the id the failed write took
    assert h.gateway.triggered_ids() == [2]
    h.ack_all(2)
    assert h.coordinator.consecutive_failures == 0


def test_trigger_failures_count_against_tolerable_failures() -> None:
    h, blob = _failing_counter_harness(1)
    blob.fail_writes(2, matching="_checkpoint_counter")
    h.advance(2.0)
    assert len(h.gateway.failures) == 1 and isinstance(h.gateway.failures[0], CheckpointFailureLimitError)
    assert "could not be triggered (storage failure)" in str(h.gateway.failures[0])


def test_a_final_trigger_whose_id_cannot_be_stored_is_retried() -> None:
    # regression (CI hang, Ray): the final checkpoint's trigger raised once and was never retried,
    # so the sources waited for a final checkpoint forever
    h, blob = _failing_counter_harness(5)
    h.advance(0.5)
    blob.fail_writes(1, matching="_checkpoint_counter")
    for source in SRC:
        h.coordinator.source_finished(source)
    h.advance(0.0)
    assert h.gateway.triggers == [] and not h.coordinator.is_periodic_triggering
    h.advance(1.0)  # final_retry_delay (= interval): the candidate goes out
    assert h.gateway.triggered_ids() == [2] and h.coordinator.get_pending(2).properties["final"] is True
    h.ack_all(2)
    assert h.coordinator.is_final_checkpoint_complete and h.coordinator.final_checkpoint_id == 2


def test_the_coordinator_keeps_a_bounded_stats_history(monkeypatch) -> None:
    # a long job checkpointing every 100 ms: the statistics of the latest DEFAULT_MAX_HISTORY
    # checkpoints are kept, the counts cover all
    import checkpoint.coordinator as coordinator_module

    monkeypatch.setattr(coordinator_module, "DEFAULT_MAX_HISTORY", 5)
    h = make_harness(CheckpointConfig(interval=1.0, timeout=10.0))
    h.coordinator.start()
    for checkpoint_id in range(1, 9):
        h.advance(1.0)
        h.ack_all(checkpoint_id)
    assert [s.id for s in h.coordinator.stats.history] == [4, 5, 6, 7, 8]
    assert h.coordinator.stats.summary().num_completed == 8
