"""Windows on Ray: tumbling, sliding and session windows with late data through a task crash
commit exactly the plain-Python reference for the regular rows, and every probe once, in its
window or the late output (`runtime.workloads.windows`), with watermarks every 20 ms of wall time."""

from __future__ import annotations

from collections import Counter

import pytest

from runtime import FaultPlan, StreamEnvironment, TaskCrash
from runtime.checker.output_invariants import record_key
from runtime.workloads.windows import build_windows_job, check_probes, reference, window_rows, without_probes
from vocabulary.options import RestartStrategy

ROWS = window_rows(20_000)


@pytest.mark.ray
def test_windows_are_exactly_once_through_a_crash_on_ray(ray_session) -> None:
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, tolerable_failures=1000)
    env.set_auto_watermark_interval(0.02)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    build_windows_job(env, ROWS, splits=3)
    crash = FaultPlan.of(TaskCrash(task="sessions[0]", after_records=4_000))
    result = env.execute("win-ray", executor="ray", faults=crash)
    assert [f for f in result.failures if "TaskCrash" in f], result.failures
    for sink, records in reference(ROWS).items():
        got = Counter(map(record_key, without_probes(result.output(sink))))
        assert got == Counter(map(record_key, records)), sink
    check_probes(ROWS, result.output("tumbling"), result.output("late"))
    # windows fired while the job ran, not only at the end of input
    during = [txn for txn in result.committer.transactions("sessions") if "end-after" not in txn]
    assert len(during) >= 2, result.committer.transactions("sessions")
