"""Backpressure in the style of Flink's UnalignedCheckpointTestBase: a slow keyed subtask, one
credit per channel, records with (split, seq) headers; after crashes the committed output has
no loss, no duplicate and no reordering — in every exactly-once mode."""

from __future__ import annotations

import statistics

import pytest

from runtime import FaultPlan, StreamEnvironment
from runtime.sim.costs import CostModel
from runtime.workloads.scenarios import SINK, build_backpressure_job, check_headers, header_rows
from vocabulary.options import CheckpointingMode, RestartStrategy

SPLITS, PER_SPLIT, KEYS = 4, 400, 16
ROWS = header_rows(SPLITS, PER_SPLIT, KEYS)
SLOW = CostModel(slow_tasks={"slow-count[1]": 40.0})


def run(mode: str, seed: int, crashes: int, debloat: bool = False):
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=1, buffer_timeout=0.001)
    if debloat:
        env.set_buffer_debloating(target=0.0005, period=0.0005, samples=2)
    env.enable_checkpointing(
        interval=0.01,
        mode=CheckpointingMode.EXACTLY_ONCE,
        unaligned=mode == "unaligned",
        alignment_timeout=0.002 if mode == "timeout" else None,
        tolerable_failures=1000,
    )
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001))
    build_backpressure_job(env, ROWS, SPLITS)
    return env.execute("backpressure", executor="sim", seed=seed,
                       faults=FaultPlan.random(seed=seed, crashes=crashes), costs=SLOW)


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "timeout"])
@pytest.mark.parametrize("seed", [1, 2])
def test_no_loss_duplication_or_reordering_after_recovery(mode: str, seed: int) -> None:
    result = run(mode, seed, crashes=2)
    assert result.restarts >= 1
    check = check_headers(ROWS, result.output(SINK))
    assert (check.lost, check.duplicated, check.reordered) == (0, 0, 0), result.replay


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_with_buffer_debloating_too(mode: str) -> None:
    result = run(mode, 4, crashes=2, debloat=True)
    assert result.restarts >= 1
    check = check_headers(ROWS, result.output(SINK))
    assert (check.lost, check.duplicated, check.reordered) == (0, 0, 0), result.replay
    # the slow subtask asked its senders for smaller buffers than the job's 8 records
    assert result.metrics.buffer_sizes["slow-count[1]"] < 8
    assert result.metrics.smallest_buffer_sizes["slow-count[1]"] <= result.metrics.buffer_sizes["slow-count[1]"]
    assert set(result.metrics.buffer_sizes) == {"slow-count[0]", "slow-count[1]"}


def test_unaligned_checkpoints_persist_in_flight_data_and_are_not_held_up_by_backpressure() -> None:
    aligned = [c for c in run("aligned", 3, crashes=0).checkpoints if c.completed]
    *unaligned, final = [c for c in run("unaligned", 3, crashes=0).checkpoints if c.completed]
    assert aligned and unaligned
    assert all(c.unaligned for c in unaligned) and not any(c.unaligned for c in aligned)
    # the final checkpoint is aligned whatever the mode: it holds no in-flight data
    assert not final.unaligned and final.persisted_bytes == 0
    assert sum(c.persisted_bytes for c in unaligned) > 0
    assert all(c.persisted_bytes == 0 for c in aligned)
    # virtual time: deterministic, a property of the protocol rather than of the machine
    assert statistics.median(c.duration for c in unaligned) < statistics.median(c.duration for c in aligned)


def test_alignment_timeout_turns_slow_alignments_unaligned() -> None:
    checkpoints = [c for c in run("timeout", 3, crashes=0).checkpoints if c.completed]
    assert any(c.unaligned for c in checkpoints)
    assert any(c.persisted_bytes > 0 for c in checkpoints if c.unaligned)
