"""Event time on Ray: event-time timers (and a deleted one), side outputs and watermarks through a
task crash commit exactly the plain-Python reference (`runtime.workloads.event_time`), with
watermarks emitted every 20 ms of wall time and timers firing throughout the run."""

from __future__ import annotations

from collections import Counter

import pytest

from runtime import FaultPlan, StreamEnvironment, TaskCrash
from runtime.checker.output_invariants import record_key
from runtime.workloads.event_time import SINKS, build_event_time_job, event_rows, reference
from vocabulary.options import RestartStrategy

ROWS = event_rows(20_000)


@pytest.mark.ray
@pytest.mark.parametrize("unaligned", [False, True])
def test_timers_and_side_outputs_are_exactly_once_through_a_crash_on_ray(ray_session, unaligned) -> None:
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, unaligned=unaligned, tolerable_failures=1000)
    env.set_auto_watermark_interval(0.02)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    build_event_time_job(env, ROWS, splits=3)
    crash = FaultPlan.of(TaskCrash(task="buckets[0]", after_records=4_000))
    result = env.execute("et-ray", executor="ray", faults=crash)
    assert [f for f in result.failures if "TaskCrash" in f], result.failures
    for sink, records in reference(ROWS).items():
        assert Counter(map(record_key, result.output(sink))) == Counter(map(record_key, records)), sink
    assert set(SINKS) == set(result.sink_names)
    # timers fired while the job ran, not only at the end of input
    during = [txn for txn in result.committer.transactions("totals") if "end-after" not in txn]
    assert len(during) >= 2, result.committer.transactions("totals")
