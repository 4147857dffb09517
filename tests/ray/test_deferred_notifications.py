"""Tasks without a completion listener get no call of their own for a completed checkpoint: a
source learns it with its next trigger (and puts it into its barriers), any other task from
those barriers; tasks with a listener, and every task for the final checkpoint, are notified at
once (`runtime.jobmaster.coordination.completions`).

The coordinator actor runs here as the plain class (as in `test_ray_ha`), with stand-in task
handles that record what it sends: no Ray cluster is involved.
"""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace
from typing import Any

import pytest
from ray_jobs import ListeningSink, pageview_env, pageview_rows, unstageable_env

from runtime.core.graph import JobVertex, OperatorFactory
from runtime.jobmaster.coordination.completions import CompletionNotices
from runtime.ray.coordinator_actor import CoordinatorActor
from runtime.ray.task_actor import TaskActor
from runtime.records.messages import CheckpointOptions
from vocabulary.handles import TaskAcknowledgement
from vocabulary.reasons import CheckpointFailureReason

ROWS = pageview_rows(200)


class _Recorder:
    """Stands in for a task's `SlotHandle` on a worker of its own: records the control messages
    the coordinator sends it (in `control` calls to its worker), in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.trigger_source = _Method(self.calls, "trigger")
        self.notify_complete = _Method(self.calls, "complete")
        self.notify_aborted = _Method(self.calls, "aborted")
        self.worker, self.worker_index, self.task_id = SimpleNamespace(control=self), id(self), None
        self.data_transport = "ray"  # (every batch a `control` call; frames: test_data_links.py)
        self.control_calls = 0

    def remote(self, items: list[tuple[Any, str, tuple[Any, ...]]]) -> None:
        """`worker.control.remote(items)`: one call with the messages for this task."""
        self.control_calls += 1
        for _, method, args in items:
            getattr(self, method).remote(*args)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [c[1:] for c in self.calls if c[0] == kind]


def acknowledge_new_triggers(coordinator: Any, tasks: dict[Any, _Recorder], source: _Recorder,
                             acked: set[int]) -> None:
    """Every task acknowledges each checkpoint `source` was triggered for and `acked` lacks."""
    for checkpoint_id, _ in source.of("trigger"):
        if checkpoint_id not in acked:
            acked.add(checkpoint_id)
            for task in tasks:
                coordinator.report([("ack", 0, TaskAcknowledgement(task, checkpoint_id))])


class _Method:
    def __init__(self, calls: list[tuple[Any, ...]], kind: str) -> None:
        self.calls, self.kind = calls, kind

    def remote(self, epoch: int, checkpoint_id: int, *args: Any) -> None:
        if self.kind == "trigger":  # (id, completed carried along)
            self.calls.append(("trigger", checkpoint_id, args[3]))
        elif self.kind == "complete":  # (id, final)
            self.calls.append(("complete", checkpoint_id, args[0]))
        else:
            self.calls.append(("aborted", checkpoint_id))


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _deferred(graph: Any) -> set[Any]:
    return set(graph.task_ids()) - CompletionNotices(graph).direct


def test_tasks_without_a_listener_are_the_ones_not_called() -> None:
    graph = pageview_env(ROWS).get_job_graph("pv")
    assert _deferred(graph) == set(graph.task_ids())  # source -> map, count -> CollectSink: nothing listens
    chained = unstageable_env(ROWS).get_job_graph("chained")  # source -> map -> sink in one task
    assert chained.source_task_ids() and _deferred(chained) == set(chained.task_ids()), \
        "a CollectSink's commit is the global committer's: its task learns completions with its triggers"
    listening = pageview_env(ROWS, sink=ListeningSink("pv")).get_job_graph("listening")
    assert _deferred(listening) == set(listening.source_task_ids()), "a user's listening sink is told at once"
    source = graph.source_vertices[0].source
    untemplated = JobVertex("odd", 1, 8, source=source, operator_factories=[lambda: None], operator_names=["odd"])
    templated = JobVertex("plain", 1, 8, source=source,
                          operator_factories=[OperatorFactory(graph.source_vertices[0].operator_factories[0]())],
                          operator_names=["plain"])
    vertices = [untemplated, templated]
    both = _deferred(SimpleNamespace(vertices=vertices, task_ids=lambda: [t for v in vertices for t in v.task_ids()],
                                     source_task_ids=lambda: [t for v in vertices for t in v.task_ids()]))
    assert {str(t) for t in both} == {str(t) for t in templated.task_ids()}, \
        "an operator that is not built from a template must count as listening"


@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])
def test_sources_learn_of_completions_with_their_next_trigger(tmp_path, chaining: bool) -> None:
    env = pageview_env(ROWS, interval=0.02, sink=ListeningSink("pv"))
    if not chaining:  # source, to-app, count, sink: each its own task; only the (user's) sink listens
        env.disable_chaining()
    graph = env.get_job_graph("deferred")
    coordinator = CoordinatorActor("deferred", graph, ("uri", str(tmp_path)))
    tasks = {task: _Recorder() for task in graph.task_ids()}
    sources = set(graph.source_task_ids())
    first_source = tasks[graph.source_task_ids()[0]]
    acked: set[int] = set()

    def ack_everything() -> bool:
        acknowledge_new_triggers(coordinator, tasks, first_source, acked)
        return coordinator.status()["completed"] >= 4

    try:
        coordinator.deploy(0, tasks)
        _wait(ack_everything, 10, "4 completed checkpoints")
        _wait(lambda: len(first_source.of("trigger")) > len(acked), 5, "the next trigger")
        coordinator.suspend()  # no further triggers: what was sent is final
        completed = [c.id for c in coordinator.history() if c.completed]
        assert len(completed) >= 4
        for task, recorder in tasks.items():
            if task in sources:
                assert recorder.of("complete") == [], f"{task} got a notification call of its own"
                triggers = recorder.of("trigger")
                # each trigger carries the checkpoint completed since the previous one
                assert [c for _, c in triggers] == [None] + [c for c, _ in triggers[:-1]], (task, triggers)
            elif graph.vertex(task.vertex).listens_for_completion:  # the sinks: every completion at once
                assert [c for c, _ in recorder.of("complete")] == completed, task
            else:  # to-app and count, unchained: from the sources' barriers, no call of their own
                assert not chaining and recorder.of("complete") == [], task
        assert chaining or len([t for t in tasks if not graph.vertex(t.vertex).listens_for_completion]) == 6
    finally:
        coordinator.shutdown()


@pytest.mark.slow
def test_an_abort_does_not_hand_over_the_completion_a_source_was_not_told(tmp_path) -> None:
    # (it did, as a notification call of its own: the next trigger carries it, one call fewer)
    graph = pageview_env(ROWS, interval=0.3).get_job_graph("deferred-abort")
    graph.checkpoint_config = dataclasses.replace(graph.checkpoint_config, max_concurrent=2)
    coordinator = CoordinatorActor("deferred-abort", graph, ("uri", str(tmp_path)))
    tasks = {task: _Recorder() for task in graph.task_ids()}
    first_source = tasks[graph.source_task_ids()[0]]
    try:
        coordinator.deploy(0, tasks)
        _wait(lambda: len(first_source.of("trigger")) >= 2, 5, "two checkpoints in flight")
        (completes, _), (declined, _) = first_source.of("trigger")[:2]
        for task in tasks:  # the first completes while the second is still pending...
            coordinator.report([("ack", 0, TaskAcknowledgement(task, completes))])
        # ...and the second is declined before the next trigger (0.3 s apart) could carry the first
        coordinator.report([("decline", 0, graph.source_task_ids()[0], declined, CheckpointFailureReason.DECLINED)])
        _wait(lambda: len(first_source.of("trigger")) >= 3, 5, "the next trigger")
        coordinator.suspend()
        for task in graph.source_task_ids():
            calls = [c for c in tasks[task].calls if c[0] != "trigger"]
            assert calls == [("aborted", declined)], (task, tasks[task].calls)
            assert tasks[task].of("trigger")[2][1] == completes, tasks[task].calls
    finally:
        coordinator.shutdown()


def test_a_carried_completion_goes_to_the_task_with_its_trigger() -> None:
    # (`Task.trigger_source_checkpoint` applies it first and stamps it on the barrier)
    posted: list[tuple[Any, ...]] = []
    actor = TaskActor.__new__(TaskActor)  # only `trigger_source`'s mail is under test
    actor._post = lambda kind, epoch, fn, args: posted.append((fn.__name__, args))  # type: ignore[method-assign]
    actor._on_trigger = _named("_on_trigger")  # type: ignore[assignment]
    TaskActor.trigger_source(actor, 0, 7, 1.0, False, None, 6)
    TaskActor.trigger_source(actor, 0, 8, 2.0, False, None)
    options = CheckpointOptions()
    assert posted == [("_on_trigger", (7, 1.0, options, 6)), ("_on_trigger", (8, 2.0, options, None))]


def _named(name: str) -> Any:
    def fn(*args: Any) -> None:
        pass

    fn.__name__ = name
    return fn
