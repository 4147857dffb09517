"""Per-checkpoint, per-subtask phases (Flink's checkpoint history names) on the simulator: they
follow one another from the trigger, agree with the barrier trace, and say where the time went."""

from __future__ import annotations

import pytest

from checkpoint.stats import SubtaskCheckpointStats
from runtime import StreamEnvironment
from runtime.sim.costs import CostModel
from runtime.workloads.scenarios import build_backpressure_job, header_rows
from vocabulary.options import CheckpointingMode

SPLITS, PER_SPLIT, KEYS = 2, 600, 16
ROWS = header_rows(SPLITS, PER_SPLIT, KEYS)
SLOW = CostModel(slow_tasks={"slow-count[1]": 40.0})
PHASES = ("start_delay", "alignment_duration", "sync_duration", "async_duration")


def run(mode: str):
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=4, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.01, tolerable_failures=1000, unaligned=mode == "unaligned",
                             mode=CheckpointingMode.AT_LEAST_ONCE if mode == "at-least-once"
                             else CheckpointingMode.EXACTLY_ONCE)
    build_backpressure_job(env, ROWS, SPLITS)
    return env.execute("phases", executor="sim", seed=4, costs=SLOW, trace_barriers=True)


def _event(result, kind: str, checkpoint_id: int, task: str) -> float:
    (time,) = [e[0] for e in result.trace if e[1] == kind and e[2] == checkpoint_id and e[3] == task]
    return time


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "at-least-once"])
def test_phases_follow_one_another_and_agree_with_the_barrier_trace(mode: str) -> None:
    result = run(mode)
    done = result.completed_checkpoints
    assert len(done) >= 3
    for checkpoint in done:
        # the final checkpoint (the last) is aligned whatever the mode
        unaligned = mode == "unaligned" and checkpoint is not done[-1]
        aligned = mode == "aligned" or (mode == "unaligned" and not unaligned)
        assert set(checkpoint.subtasks) == set(checkpoint.ack_delays)  # every task that acknowledged
        for task, sub in checkpoint.subtasks.items():
            assert sub.task == task and all(getattr(sub, p) >= 0 for p in PHASES)
            write_start = checkpoint.trigger_time + sub.start_delay + sub.alignment_duration + sub.sync_duration
            assert write_start == pytest.approx(_event(result, "snapshot", checkpoint.id, task), abs=1e-9)
            acked = write_start + sub.async_duration
            assert acked == pytest.approx(_event(result, "ack", checkpoint.id, task), abs=1e-9)
            assert sub.end_to_end_duration == pytest.approx(checkpoint.ack_delays[task])
            assert acked <= checkpoint.trigger_time + sub.end_to_end_duration + 1e-9
            assert sub.unaligned == unaligned
            assert sub.aligned_blocking == aligned
        assert sum(s.persisted_data for s in checkpoint.subtasks.values()) == checkpoint.persisted_bytes
        assert sum(s.checkpointed_size for s in checkpoint.subtasks.values()) == checkpoint.state_bytes


def test_under_backpressure_aligned_barriers_wait_in_the_slow_subtasks_start_delay() -> None:
    aligned, unaligned = run("aligned"), run("unaligned")
    for checkpoint in aligned.completed_checkpoints[:-1]:  # the last: the final one, input ended
        slow = checkpoint.subtasks["slow-count[1]"]
        # the barrier queued behind the in-flight data before the slow subtask could take it
        assert slow.start_delay > 0.5 * checkpoint.duration
        assert slow.persisted_data == 0
    # (the final checkpoint is aligned in every mode)
    slowest = max(c.subtasks["slow-count[1]"].start_delay for c in unaligned.completed_checkpoints[:-1])
    quickest = min(c.subtasks["slow-count[1]"].start_delay for c in aligned.completed_checkpoints[:-1])
    assert slowest < quickest / 4  # unaligned barriers overtake that data ...
    assert any(s.persisted_data > 0 for c in unaligned.completed_checkpoints for s in c.subtasks.values())
    # ... and the task keeps processing while the other barriers arrive
    assert any(s.processed_data > 0 for c in unaligned.completed_checkpoints for s in c.subtasks.values())


def test_subtask_stats_in_json_carry_flinks_names() -> None:
    checkpoint = run("aligned").completed_checkpoints[0]
    entry = checkpoint.to_json()["subtasks"][0]
    assert set(entry) == {"task", "start_delay", "alignment_duration", "sync_duration", "async_duration",
                          "processed_data", "persisted_data", "end_to_end_duration", "checkpointed_size",
                          "unaligned", "aligned_blocking",
                          "async_cpu"}  # ours, not Flink's: the write's CPU where an executor measures it
    assert isinstance(next(iter(checkpoint.subtasks.values())), SubtaskCheckpointStats)
