"""The Ray driver's share of `TaskCrashDuringRecovery`, without starting Ray (no actor is built):
a failover the restart strategy refuses is no recovery, as on the simulator (the job master's rule)."""

from __future__ import annotations

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.ray.executor import RayExecutor
from vocabulary.fault_plan import FaultPlan, TaskCrashDuringRecovery
from vocabulary.options import RestartStrategy


def test_a_failover_that_fails_the_job_for_good_fires_no_recovery_fault_on_ray() -> None:
    env = StreamEnvironment(parallelism=1)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection([{"key": "a"}]).sink_to(CollectSink("out"))
    executor = RayExecutor(env.get_job_graph("job"), faults=FaultPlan.of(TaskCrashDuringRecovery(nth=0)))
    executor.master.failover("task failed", RuntimeError("boom"))  # no restart left: fails for good
    assert executor.master.error is not None
    # it counted the recovery (and fired the fault) before the budget check; the simulator did not
    assert executor.schedule.fired == [] and executor._recovery_crashes == []
