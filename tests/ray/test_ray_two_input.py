"""Two-input operators on Ray: a keyed co-process with event-time timers and an interval join,
through a task crash with unaligned checkpoints (in-flight data of both inputs as channel state),
commit exactly the plain-Python reference (`runtime.workloads.two_input`)."""

from __future__ import annotations

from collections import Counter

import pytest

from runtime import FaultPlan, StreamEnvironment, TaskCrash
from runtime.checker.output_invariants import record_key
from runtime.workloads.two_input import SINKS, build_two_input_job, reference, two_input_rows
from vocabulary.options import RestartStrategy

LEFT_ROWS, RIGHT_ROWS = two_input_rows(8_000)


@pytest.mark.ray
def test_co_process_and_interval_join_are_exactly_once_through_a_crash_on_ray(ray_session) -> None:
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, unaligned=True, tolerable_failures=1000)
    env.set_auto_watermark_interval(0.02)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    build_two_input_job(env, LEFT_ROWS, RIGHT_ROWS, splits=3)
    crash = FaultPlan.of(TaskCrash(task="pair[0]", after_records=3_000))
    result = env.execute("two-ray", executor="ray", faults=crash)
    assert [f for f in result.failures if "TaskCrash" in f], result.failures
    assert set(SINKS) == set(result.sink_names)
    for sink, records in reference(LEFT_ROWS, RIGHT_ROWS).items():
        assert Counter(map(record_key, result.output(sink))) == Counter(map(record_key, records)), sink
