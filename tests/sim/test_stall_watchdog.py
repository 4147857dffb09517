"""The simulator's progress watchdog, in virtual seconds: a job that stops moving fails once
`stall_timeout` passes with no record handled, no task finished, no checkpoint completed and no
new attempt, naming its unfinished tasks; a job that moves, however slowly, is never cut."""

from __future__ import annotations

import re

import pytest

from operators import CollectSink, GeneratorSource
from runtime import JobFailedError, StreamEnvironment
from runtime.core.graph import JobGraphError
from runtime.sim.network import NetworkOptions
from runtime.workloads.seeded import multiset
from tests.sim.sim_jobs import EXPECTED, pageview
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


def test_without_the_watchdog_the_same_job_runs_to_the_time_bound() -> None:
    with pytest.raises(JobFailedError) as failed:
        stuck_job().execute("stuck", executor="sim", stall_timeout=None, max_time=2.0, **NEVER_COMPLETES)
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
