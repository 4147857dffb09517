"""How many completion notifications the coordinator actor sends per checkpoint: one per task
with a completion listener (the sinks), none to the others (`runtime.jobmaster.completions`).
The coordinator actor runs as the plain class with recording task handles (no Ray cluster)."""

from __future__ import annotations

import time

from ray_jobs import pageview_env, pageview_rows
from test_deferred_notifications import _Recorder

from checkpoint.handles import TaskAcknowledgement
from runtime.ray.coordinator_actor import CoordinatorActor


def test_only_listening_tasks_get_notify_complete_calls(tmp_path) -> None:
    env = pageview_env(pageview_rows(200), interval=0.02).disable_chaining()  # 4 vertices x 2 tasks
    graph = env.get_job_graph("calls")
    coordinator = CoordinatorActor("calls", graph, ("uri", str(tmp_path)))
    tasks = {task: _Recorder() for task in graph.task_ids()}
    first_source = tasks[graph.source_task_ids()[0]]
    acked: set[int] = set()
    try:
        coordinator.deploy(0, tasks, True)
        deadline = time.monotonic() + 10
        while coordinator.status()["completed"] < 5:
            assert time.monotonic() < deadline, "timed out waiting for 5 completed checkpoints"
            for checkpoint_id, _ in first_source.of("trigger"):
                if checkpoint_id not in acked:
                    acked.add(checkpoint_id)
                    for task in tasks:
                        coordinator.acknowledge(0, TaskAcknowledgement(task, checkpoint_id))
            time.sleep(0.005)
        coordinator.suspend()
        completed = coordinator.status()["completed"]
        calls = {str(task): len(recorder.of("complete")) for task, recorder in tasks.items()}
        # two sink subtasks, each told of every completion; 6 listener-less tasks, told of none
        assert calls == {str(t): completed if t.vertex.startswith("Sink") else 0 for t in tasks}, calls
    finally:
        coordinator.shutdown()
