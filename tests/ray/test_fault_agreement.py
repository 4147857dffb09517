"""One `FaultPlan`, one meaning: the same job and plan on the simulator and on Ray crash the same
tasks at the same logical points, restart as often, fire the same faults and commit the same
output (issue 21, item 3).

The plan is one whose outcome does not depend on timing: crashes after a number of records (the
job's record flow decides them, not a clock), the nth acknowledgement lost and the nth state
write failed (they abort a checkpoint, never restart the job). The rate-limited source makes the
job last about a second on both executors (virtual and wall), so each takes ~10 checkpoints.
"""

from __future__ import annotations

from typing import Any

import pytest

from checkpoint.options import RestartStrategy
from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from runtime.faults import LostAcknowledgement, StorageWriteFailure, TaskCrash
from runtime.sim.executor import SimExecutor
from runtime.sim.workloads import CountPerKey, multiset

ROWS = 3000

#: count[0] crashes at its first record (so it has written nothing yet: its write 1 falls in the
#: second attempt, which the Ray executor used to leave unbroken), count[1] at its 500th record
#: over the run (it handles 750 in a failure-free run), count[1]'s third acknowledgement is lost
PLAN = FaultPlan.of(
    TaskCrash(task="count[0]", after_records=1),
    TaskCrash(task="count[1]", after_records=500),
    StorageWriteFailure(task="count[0]", nth=1),
    LostAcknowledgement(task="count[1]", nth=2),
)


def page_view(i: int) -> dict[str, Any]:
    return {"app": f"app{(i * 7919) % 8}", "i": i}


def to_app(record: dict[str, Any]) -> dict[str, Any]:
    return {"app": record["app"]}


def agreement_env() -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.1, timeout=0.3, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=5, delay=0.01))
    (env.generate(count=ROWS, rate=3000, fn=page_view).map(to_app, name="to-app").key_by("app")
        .process(CountPerKey("app"), name="count").sink_to(CollectSink("pv")))
    return env


def expected_output() -> Any:
    counts: dict[str, int] = {}
    out = []
    for i in range(ROWS):
        app = page_view(i)["app"]
        counts[app] = counts.get(app, 0) + 1
        out.append({"app": app, "count": counts[app]})
    return multiset(out)


@pytest.mark.ray
def test_the_same_plan_breaks_the_same_things_on_the_simulator_and_on_ray(ray_session) -> None:
    from runtime.ray.executor import RayExecutor

    graph = agreement_env().get_job_graph("agree")
    sim = SimExecutor(graph, seed=0, faults=PLAN)
    on_sim = sim.run()
    ray_executor = RayExecutor(graph, faults=PLAN)
    on_ray = ray_executor.run()

    assert on_sim.failures == on_ray.failures == [
        "task count[0] failed: injected fault: TaskCrash after 1 records of task count[0]",
        "task count[1] failed: injected fault: TaskCrash after 500 records of task count[1]",
    ], (on_sim.failures, on_ray.failures)
    assert on_sim.restarts == on_ray.restarts == 2
    # every fault fired, once (the write and the ack in an attempt after the first)
    assert sorted(sim.injector.fired) == sorted(ray_executor.schedule.fired) == [0, 1, 2, 3]
    for schedule in (sim.injector, ray_executor.schedule):
        assert [str(schedule.target(i)) for i in range(4)] == ["count[0]", "count[1]", "count[0]", "count[1]"]
    assert multiset(on_sim.output("pv")) == multiset(on_ray.output("pv")) == expected_output()
