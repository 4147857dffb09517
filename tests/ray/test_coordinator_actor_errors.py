"""What the coordinator raises where no caller sees it fails the job over instead of hanging it.

The coordinator actor runs the pure coordinator from its timer thread (periodic and final
triggers, timeouts) and from fire-and-forget task reports. An exception there becomes the
actor's `fail_request`, which the driver turns into a failover (logged and dropped, a final
checkpoint whose trigger raised would never be retried, and the job would wait until the driver's
`max_duration`). The actor class runs in this process: no Ray call is made."""

from __future__ import annotations

import time

import pytest
from ray_jobs import pageview_env, pageview_rows

from vocabulary.handles import TaskId


def _actor(tmp_path):
    from runtime.ray.coordinator_actor import CoordinatorActor

    graph = pageview_env(pageview_rows(10), storage=str(tmp_path / "chk"), interval=60.0).get_job_graph("errors")
    actor = CoordinatorActor("errors", graph, ("uri", str(tmp_path / "chk")))
    actor.deploy(0, {})
    return actor


def _wait_for_fail_request(actor, timeout: float = 10.0) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        request = actor.status()["fail_request"]
        if request:
            return request
        time.sleep(0.01)
    pytest.fail(f"no fail request within {timeout} s")


@pytest.mark.slow
def test_a_timer_callback_that_raises_fails_the_job_over(tmp_path) -> None:
    actor = _actor(tmp_path)
    try:
        def broken() -> None:
            raise AssertionError("raised inside Ray's wait")

        actor._timers.schedule(0.0, broken)
        assert _wait_for_fail_request(actor) == "checkpoint coordinator failed: AssertionError: raised inside Ray's wait"
    finally:
        actor.shutdown()


def test_a_task_report_the_coordinator_rejects_fails_the_job_over(tmp_path) -> None:
    actor = _actor(tmp_path)
    try:
        actor.report([("finished", 0, TaskId("count", 0))])  # not a source: the coordinator raises ValueError
        request = actor.status()["fail_request"]
        assert request is not None and "ValueError" in request and "count[0] is not a source task" in request
        actor.deploy(1, {}, False)  # the next attempt starts clean
        assert actor.status()["fail_request"] is None
    finally:
        actor.shutdown()


def test_coordinator_storage_failures_in_the_actor_count_on_in_a_replacement(tmp_path) -> None:
    """`CoordinatorStorageFailure` in the actor: `arm_faults` arms it on the actor's storage, and
    a replacement armed with its predecessor's `fault_counts` counts on; its own recovery of the
    id counter (in its constructor, before arming) is not counted, as on the simulator."""
    from runtime import FaultPlan
    from vocabulary.fault_plan import CoordinatorStorageFailure
    from vocabulary.reasons import CheckpointFailureReason

    plan = FaultPlan.of(CoordinatorStorageFailure(nth=1, what="counter"))
    first = _actor(tmp_path)
    try:
        first.arm_faults(plan, {})
        with first._lock:
            assert first.coordinator.trigger_checkpoint(force=True) == 1  # counter write 0
        counts = first.fault_counts()
    finally:
        first.shutdown()
    second = _actor(tmp_path)
    try:
        second.arm_faults(plan, counts)
        with second._lock:
            refused = second.coordinator.trigger_checkpoint(force=True)  # counter write 1
            assert refused is CheckpointFailureReason.STORAGE_FAILURE
            assert second.coordinator.trigger_checkpoint(force=True) == 3
        assert second._faults.fired == [0]
    finally:
        second.shutdown()
