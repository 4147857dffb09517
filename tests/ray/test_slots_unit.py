"""Task slots without a Ray cluster: the packing, the option's validation, and when a worker's
batched reports go to the coordinator (`runtime.ray.slots`, `runtime.ray.worker_actor`)."""

from __future__ import annotations

import pickle
import time
from types import SimpleNamespace
from typing import Any

import pytest
from ray_jobs import pageview_env, pageview_rows

from runtime.ray import worker_actor
from runtime.ray.data_links import link_to
from runtime.ray.executor import RayExecutor
from runtime.ray.slots import PIPELINE, SlotHandle, SlotsError, assign_slots
from runtime.ray.worker_actor import WorkerReports
from vocabulary.handles import TaskAcknowledgement, TaskId
from vocabulary.reasons import CheckpointFailureReason


def test_subtasks_are_packed_pipeline_by_pipeline() -> None:
    graph = pageview_env(pageview_rows(10)).disable_chaining().get_job_graph("slots")
    names = [[str(t) for t in group] for group in assign_slots(graph.task_ids(), 2)]
    assert names == [["Source: collection[0]", "to-app[0]"], ["count[0]", "Sink: pv[0]"],
                     ["Source: collection[1]", "to-app[1]"], ["count[1]", "Sink: pv[1]"]]
    assert [len(g) for g in assign_slots(graph.task_ids(), 3)] == [3, 3, 2]
    assert assign_slots(graph.task_ids(), 1) == [[t] for t in sorted(graph.task_ids(), key=lambda t: t.subtask)]


def test_the_default_is_one_worker_per_pipeline_whatever_the_parallelisms() -> None:
    graph = pageview_env(pageview_rows(10)).disable_chaining().get_job_graph("slots")
    names = [[str(t) for t in group] for group in assign_slots(graph.task_ids(), PIPELINE)]
    assert names == [["Source: collection[0]", "to-app[0]", "count[0]", "Sink: pv[0]"],
                     ["Source: collection[1]", "to-app[1]", "count[1]", "Sink: pv[1]"]]
    # a source of parallelism 1 before a vertex of 3: worker i holds subtask i of each vertex
    src, count = [TaskId("src", 0)], [TaskId("count", i) for i in range(3)]
    assert assign_slots(src + count, PIPELINE) == [[src[0], count[0]], [count[1]], [count[2]]]
    assert RayExecutor(graph).groups == assign_slots(graph.task_ids(), PIPELINE)  # (Ray is not started)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None, "pipelines", "Pipeline"])
def test_an_invalid_slots_per_worker_is_refused_naming_the_option(bad: Any) -> None:
    env = pageview_env(pageview_rows(10))
    with pytest.raises(SlotsError, match=r"slots_per_worker must be an int >= 1 .* or 'pipeline' .*got"):
        env.execute("slots", executor="ray", slots_per_worker=bad)


class _Worker:
    """Stands in for a worker actor's handle: records the Ray calls a `SlotHandle` makes on it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        for method in ("call", "send", "deploy"):
            setattr(self, method, SimpleNamespace(remote=lambda *args, m=method: self.calls.append((m, args))))


def test_data_path_calls_go_packed_in_one_argument_and_the_rest_as_calls() -> None:
    worker, task = _Worker(), TaskId("count", 1)
    handle = SlotHandle(worker, 0, task, data_transport="ray")
    handle.push.remote(3, 0, 7, ["buffer"])
    handle.add_credits.remote(3, {0: 2}, None)
    handle.heartbeat.remote()
    assert worker.calls == [("send", ((task, "push", (3, 0, 7, ["buffer"])),)),
                            ("send", ((task, "add_credits", (3, {0: 2}, None)),)),
                            ("call", (task, "heartbeat"))]
    assert pickle.loads(pickle.dumps(SlotHandle("w", 0, task))).task_id == task  # it travels in deployments


def test_with_sockets_the_data_calls_go_to_the_link_of_their_worker_and_the_rest_as_calls() -> None:
    worker, task = _Worker(), TaskId("count", 1)
    worker._actor_id = "actor-1"
    handle = SlotHandle(worker, 0, task)  # sockets: the default
    assert handle.push._send == link_to(worker).send and handle.add_credits._send == link_to(worker).send
    assert link_to(worker) is link_to(worker), "one link per worker in a process"
    handle.heartbeat.remote()
    assert worker.calls == [("call", (task, "heartbeat"))]
    travelled = pickle.loads(pickle.dumps(SlotHandle("w", 0, task)))
    assert travelled.data_transport == "socket"


def test_a_handle_makes_its_data_path_callers_once_and_travels_without_them() -> None:
    worker, task = _Worker(), TaskId("count", 1)
    handle = SlotHandle(worker, 0, task, data_transport="ray")
    assert handle.push is handle.push and handle.add_credits is handle.add_credits
    handle.push.remote(3, 0, 7, ["buffer"])
    assert worker.calls == [("send", ((task, "push", (3, 0, 7, ["buffer"])),))]
    handle.worker = "w"  # (its lambdas would not pickle: the test worker is not a Ray handle)
    travelled = pickle.loads(pickle.dumps(handle))
    assert vars(travelled) == {"worker": "w", "worker_index": 0, "task_id": task, "data_transport": "ray"}


def test_a_worker_refuses_to_send_to_a_method_that_has_a_result() -> None:
    actor = worker_actor.WorkerActor.__new__(worker_actor.WorkerActor)
    actor.index = 4
    with pytest.raises(AttributeError, match="worker 4: no subtask method 'heartbeat' to send"):
        actor.send((TaskId("count", 1), "heartbeat", ()))
    assert worker_actor.WorkerActor.send.__ray_num_returns__ == 0  # Ray makes no result object per data call


class _Coordinator:
    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, ...]]] = []
        self.causes: list[str] = []
        self.report = self

    def remote(self, items: list[tuple[Any, ...]], cause: str) -> None:
        self.calls.append(items)
        self.causes.append(cause)


def _wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_worker_sends_its_subtasks_acknowledgements_of_a_checkpoint_in_one_call(monkeypatch) -> None:
    monkeypatch.setattr(worker_actor, "ACK_FLUSH_DELAY", 0.2)
    a, b = TaskId("a", 0), TaskId("b", 0)
    reports, coordinator = WorkerReports([a, b]), _Coordinator()
    reports.ack(coordinator, 3, TaskAcknowledgement(a, 1))
    time.sleep(0.05)
    assert coordinator.calls == []  # held for b
    reports.ack(coordinator, 3, TaskAcknowledgement(b, 1))  # the set is complete: sent at once
    _wait_for(lambda: len(coordinator.calls) == 1)
    assert [(kind, epoch, ack.task_id) for kind, epoch, ack in coordinator.calls[0]] == [("ack", 3, a), ("ack", 3, b)]
    assert reports.calls == 1 and coordinator.causes == ["all acked"]


def test_a_held_acknowledgement_goes_after_the_flush_delay_or_with_a_decline(monkeypatch) -> None:
    monkeypatch.setattr(worker_actor, "ACK_FLUSH_DELAY", 0.1)
    a, b = TaskId("a", 0), TaskId("b", 0)
    reports, coordinator = WorkerReports([a, b]), _Coordinator()
    reports.ack(coordinator, 0, TaskAcknowledgement(a, 1))  # b never acknowledges checkpoint 1
    _wait_for(lambda: len(coordinator.calls) == 1)
    reports.ack(coordinator, 0, TaskAcknowledgement(a, 2))
    reports.decline(coordinator, 0, b, 2, CheckpointFailureReason.DECLINED)  # sent at once, after the held ack
    _wait_for(lambda: len(coordinator.calls) == 2)
    assert [item[0] for item in coordinator.calls[1]] == ["ack", "decline"]
    reports.ack(coordinator, 0, TaskAcknowledgement(a, 3))
    reports.ack(coordinator, 1, TaskAcknowledgement(b, 3))  # a new attempt: the old one's held ack is void
    _wait_for(lambda: len(coordinator.calls) == 3)
    assert [(item[1], item[2].task_id) for item in coordinator.calls[2]] == [(1, b)]
    assert coordinator.causes == ["timer", "at once", "timer"]
