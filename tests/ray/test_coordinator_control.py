"""The coordinator actor carries out the job master's `ControlPlane`: a coordinator doomed by
`CoordinatorCrashBeforeNotify` sends nothing more — no notification, and no completed checkpoint
for the driver's listeners either, as on the simulator.

The coordinator actor runs here as the plain class, with stand-in task handles that record what
it sends: no Ray cluster is involved."""

from __future__ import annotations

import time
from typing import Any

from ray_jobs import ListeningSink, pageview_env, pageview_rows
from test_deferred_notifications import _Recorder, acknowledge_new_triggers

from runtime import FaultPlan
from runtime.ray.coordinator_actor import CoordinatorActor
from vocabulary.fault_plan import CoordinatorCrashBeforeNotify


def test_a_doomed_coordinator_notifies_no_task_and_no_listener(tmp_path) -> None:
    graph = pageview_env(pageview_rows(200), interval=0.02, sink=ListeningSink("pv")).get_job_graph("doomed")
    coordinator = CoordinatorActor("doomed", graph, ("uri", str(tmp_path)), capture_completed=True)
    tasks = {task: _Recorder() for task in graph.task_ids()}
    first_source = tasks[graph.source_task_ids()[0]]
    captured: list[int] = []
    acked: set[int] = set()

    def status() -> dict[str, Any]:
        state = coordinator.status()
        captured.extend(completed.checkpoint_id for completed, _ in state["completed_files"])
        return state

    try:
        coordinator.arm_faults(FaultPlan.of(CoordinatorCrashBeforeNotify(nth=1)), {})
        coordinator.deploy(0, tasks)
        deadline = time.monotonic() + 20
        while not status()["doomed"]:
            assert time.monotonic() < deadline, "timed out waiting for the second completion"
            acknowledge_new_triggers(coordinator, tasks, first_source, acked)
            time.sleep(0.005)
        completed = [c.id for c in coordinator.history() if c.completed]
        assert len(completed) == 2, completed
        first, doomed = completed
        sinks = [recorder for task, recorder in tasks.items() if graph.vertex(task.vertex).listens_for_completion]
        assert sinks and all([c for c, _ in sink.of("complete")] == [first] for sink in sinks)
        assert captured == [first], f"the listeners got checkpoint {doomed}, which its coordinator died announcing"
    finally:
        coordinator.shutdown()


def test_a_coordinator_serving_the_next_job_drops_the_acknowledgements_of_the_last(tmp_path) -> None:
    """A coordinator kept between jobs (`runtime.ray.worker_pool`) is built anew by `serve`; an
    acknowledgement of the earlier job (its epoch) arriving late completes nothing of the next."""
    from runtime.ray.worker_pool import next_epoch
    from vocabulary.handles import TaskAcknowledgement

    graph = pageview_env(pageview_rows(200), interval=0.02).get_job_graph("first")
    earlier, later = next_epoch(), next_epoch()
    coordinator = CoordinatorActor("first", graph, ("uri", str(tmp_path)), first_epoch=earlier)
    coordinator.deploy(earlier, {task: _Recorder() for task in graph.task_ids()})
    coordinator.shutdown()
    coordinator.serve("second", graph, ("uri", str(tmp_path)), "coordinator", None, None, 1, False, later)
    tasks = {task: _Recorder() for task in graph.task_ids()}
    source = tasks[graph.source_task_ids()[0]]
    try:
        coordinator.deploy(later, tasks)
        deadline = time.monotonic() + 20
        while not source.of("trigger"):
            assert time.monotonic() < deadline, "the second job's coordinator never triggered"
            time.sleep(0.005)
        checkpoint_id = source.of("trigger")[0][0]
        for task in tasks:
            coordinator.report([("ack", earlier, TaskAcknowledgement(task, checkpoint_id))])
        assert coordinator.status()["completed"] == 0, "the earlier job's acknowledgements completed a checkpoint"
        for task in tasks:
            coordinator.report([("ack", later, TaskAcknowledgement(task, checkpoint_id))])
        assert coordinator.status()["completed"] == 1
    finally:
        coordinator.shutdown()
