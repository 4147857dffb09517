"""The simulator's progress watchdog, in virtual seconds (off unless `stall_timeout` is given): a
job that stops moving fails once `stall_timeout` passes with no record handled, no task finished,
no checkpoint completed and no new attempt, naming its unfinished tasks; a task stalled that long
is hung and the job fails over; a job that moves, however slowly, is never cut."""

from __future__ import annotations

import re

import pytest
from sim_jobs import EXPECTED, pageview

from operators import CollectSink, GeneratorSource
from runtime import JobFailedError, StreamEnvironment
from runtime.core.graph import JobGraphError
from runtime.sim.network import NetworkOptions
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import FaultPlan, TaskStall
from vocabulary.options import CheckpointingMode

#: every snapshot write takes 50 ms against a 5 ms checkpoint timeout: no checkpoint completes,
#: the final one neither, so the sources wait for it forever
NEVER_COMPLETES = dict(network=NetworkOptions(write_latency=0.05))


def stuck_job() -> StreamEnvironment:
    return pageview(CheckpointingMode.EXACTLY_ONCE, timeout=0.005)


def test_a_job_whose_final_checkpoint_never_completes_fails_once_nothing_moved_for_stall_timeout() -> None:
    with pytest.raises(JobFailedError) as failed:
        stuck_job().execute("stuck", executor="sim", stall_timeout=0.5, max_time=100.0, **NEVER_COMPLETES)
    message = str(failed.value)
    assert "job made no progress for" in message and "stall_timeout=0.5" in message, message
    # observed every tenth of the timeout: it fails within one observation of it
    seconds = float(re.search(r"no progress for ([0-9.]+) virtual s", message).group(1))
    assert 0.5 <= seconds <= 0.56, message
    # the sources wait for the final checkpoint: unfinished, and named
    assert "unfinished tasks ['Source: collection[0]', 'Source: collection[1]'" in message, message


@pytest.mark.parametrize("off", [{}, {"stall_timeout": None}], ids=["default", "None"])
def test_without_the_watchdog_the_same_job_runs_to_the_time_bound(off: dict) -> None:
    with pytest.raises(JobFailedError) as failed:
        stuck_job().execute("stuck", executor="sim", max_time=2.0, **off, **NEVER_COMPLETES)
    assert "did not finish within 2.0 virtual seconds" in str(failed.value), failed.value


def test_a_slow_job_that_moves_runs_far_past_stall_timeout() -> None:
    """200 records at 100 a second: two virtual seconds of a job that moves, watched at 0.1 s."""
    env = StreamEnvironment(parallelism=1, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.05)
    env.from_source(GeneratorSource(count=200, rate=100.0, fn=lambda i: {"i": i})).sink_to(CollectSink("out"))
    result = env.execute("slow", executor="sim", stall_timeout=0.1)
    assert sorted(r["i"] for r in result.output("out")) == list(range(200))
    assert result.metrics.duration > 1.9


def test_the_same_job_with_checkpoints_that_complete_is_not_cut() -> None:
    result = pageview(CheckpointingMode.EXACTLY_ONCE).execute("pv", executor="sim", stall_timeout=0.05)
    assert multiset(result.output("pv")) == EXPECTED, result.replay


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), "10", True])
def test_an_invalid_stall_timeout_is_named_before_the_job_runs(value: object) -> None:
    with pytest.raises(JobGraphError, match="stall_timeout"):
        stuck_job().execute("stuck", executor="sim", stall_timeout=value)


def test_a_task_stalled_past_stall_timeout_is_hung_and_the_job_fails_over_exactly_once() -> None:
    """A `TaskStall` is a step that does not return: with nothing else moving it counts as progress
    until it has lasted `stall_timeout`, then the task is hung and the job fails over (as for a
    function that never returns on Ray); the quiet time is watched although no event falls in it."""
    faults = FaultPlan.of(TaskStall(task="count[0]", at=0.005, duration=30.0))
    result = pageview(CheckpointingMode.EXACTLY_ONCE).execute("pv", executor="sim", faults=faults, stall_timeout=0.5)
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    assert len(result.failures) == 1, result.failures
    failure = result.failures[0]
    assert "task count[0] is hung" in failure and "stall_timeout=0.5" in failure, failure
    # hung once nothing else moved for 0.5 s either (the other subtask went on a while)
    seconds = float(re.search(r"count\[0\] for ([0-9.]+) virtual s", failure).group(1))
    assert 0.5 <= seconds <= 1.0, failure
    assert result.metrics.duration < 5.0  # not after the 30 s stall


def test_a_stall_shorter_than_stall_timeout_is_waited_out() -> None:
    faults = FaultPlan.of(TaskStall(task="count[0]", at=0.005, duration=0.3))
    result = pageview(CheckpointingMode.EXACTLY_ONCE).execute("pv", executor="sim", faults=faults, stall_timeout=0.5)
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    assert result.failures == [] and result.metrics.duration > 0.3
