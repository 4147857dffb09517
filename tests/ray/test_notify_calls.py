"""How many control calls a checkpoint costs on Ray: the coordinator actor sends a completion
notification only to tasks with a completion listener (a user's listening sink; not a
`CollectSink`, whose transactions the global committer commits: `runtime.jobmaster.coordination.completions`),
and a real run with one actor per task (`slots_per_worker=1`) makes sources + tasks + 1 calls per
checkpoint (a trigger per source, an acknowledgement per task, one global commit; with task slots,
one of each per worker: `test_ray_slots.py`). Calls are counted, not timed."""

from __future__ import annotations

import time

import pytest
from ray_jobs import ListeningSink, expected_counts, pageview_env, pageview_rows, to_app
from test_deferred_notifications import _Recorder, acknowledge_new_triggers

from runtime.ray.coordinator_actor import CoordinatorActor
from runtime.workloads.seeded import multiset


@pytest.mark.parametrize("listening", [False, True], ids=["collect-sink", "listening-sink"])
def test_only_listening_tasks_get_notify_complete_calls(tmp_path, listening: bool) -> None:
    sink = ListeningSink("pv") if listening else None
    env = pageview_env(pageview_rows(200), interval=0.02, sink=sink).disable_chaining()  # 4 vertices x 2 tasks
    graph = env.get_job_graph("calls")
    coordinator = CoordinatorActor("calls", graph, ("uri", str(tmp_path)))
    tasks = {task: _Recorder() for task in graph.task_ids()}
    first_source = tasks[graph.source_task_ids()[0]]
    acked: set[int] = set()
    try:
        coordinator.deploy(0, tasks)
        deadline = time.monotonic() + 10
        while coordinator.status()["completed"] < 5:
            assert time.monotonic() < deadline, "timed out waiting for 5 completed checkpoints"
            acknowledge_new_triggers(coordinator, tasks, first_source, acked)
            time.sleep(0.005)
        coordinator.suspend()
        completed = coordinator.status()["completed"]
        calls = {str(task): len(recorder.of("complete")) for task, recorder in tasks.items()}
        # a listening sink's two subtasks are told of every completion; nobody else of any
        listeners = {str(t): completed for t in tasks if listening and t.vertex.startswith("Sink")}
        assert calls == {str(t): listeners.get(str(t), 0) for t in tasks}, calls
    finally:
        coordinator.shutdown()


def _paced_to_app(record: dict) -> dict:
    """0.2 ms a record: the job lasts ~0.4 s on any machine, several checkpoint intervals (at full
    speed a warm run could end within two, with fewer than three checkpoints)."""
    time.sleep(0.0002)
    return to_app(record)


@pytest.mark.ray
@pytest.mark.parametrize("chaining", [True, False], ids=["chained-4-tasks", "unchained-8-tasks"])
def test_calls_per_checkpoint_on_ray(ray_session, tmp_path, chaining: bool) -> None:
    rows = pageview_rows(4000)
    env = pageview_env(rows, interval=0.05, buffer_size=16, storage=str(tmp_path), fn=_paced_to_app)
    if not chaining:
        env.disable_chaining()
    graph = env.get_job_graph("calls")
    result = env.execute("calls", executor="ray", slots_per_worker=1)
    assert multiset(result.output("pv")) == expected_counts(rows), result.replay
    calls = result.metrics.control_calls
    assert set(calls) == {str(t) for t in graph.task_ids()}, calls
    completed = len(result.completed_checkpoints)
    assert completed >= 3, result.checkpoints
    for task, kinds in calls.items():
        assert kinds.get("complete", 0) == 0, f"{task} got a notification call for a non-final checkpoint: {kinds}"
        assert kinds.get("complete_final", 0) >= 1, (task, kinds)  # the final one: a call to every task
    sources, tasks = len(graph.source_task_ids()), len(graph.task_ids())
    aborted = [c for c in result.checkpoints if not c.completed]
    if not aborted:  # (a checkpoint aborted under load adds its trigger and acks but completes nothing)
        assert result.metrics.calls_per_checkpoint(completed) == sources + tasks + 1, calls
    else:
        assert result.metrics.calls_per_checkpoint(completed) >= sources + tasks + 1, calls
