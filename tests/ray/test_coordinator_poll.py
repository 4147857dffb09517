"""What the Ray driver does with a coordinator's status, without starting Ray (the poll's refs are
the status dicts themselves): with high availability, a lost leadership is handled by a new
election whatever else the status asks for."""

from __future__ import annotations

from typing import Any

import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.ray import coordinator_handover
from runtime.ray.executor import RayExecutor

SUSPENDED = "checkpoint coordinator failed: ZooKeeperSuspendedError: cannot read checkpoint counter"


class _Status:
    def __init__(self, status: dict[str, Any]) -> None:
        self.answer = status

    def remote(self) -> dict[str, Any]:
        return self.answer


class FakeCoordinator:
    """A coordinator actor handle whose `status.remote()` "ref" is the status it answers."""

    def __init__(self, **status: Any) -> None:
        self.status = _Status({"completed_files": [], **status})


@pytest.fixture
def driver(monkeypatch) -> tuple[RayExecutor, list[bool]]:
    monkeypatch.setattr(coordinator_handover.ray, "wait", lambda refs, timeout: (refs, []))
    monkeypatch.setattr(coordinator_handover.ray, "get", lambda ref: ref)
    env = StreamEnvironment(parallelism=1)
    env.enable_checkpointing(interval=0.1)
    env.set_high_availability("zookeeper", hosts="127.0.0.1:2181", cluster_id="poll")
    env.from_collection([{"key": "a"}]).sink_to(CollectSink("out"))
    executor = RayExecutor(env.get_job_graph("job"))
    elections: list[bool] = []
    monkeypatch.setattr(executor, "_await_leader", lambda first=False: elections.append(first))
    return executor, elections


def test_a_coordinator_failure_that_comes_with_a_lost_leadership_awaits_a_leader_first(driver) -> None:
    executor, elections = driver
    executor.coordinator = FakeCoordinator(fail_request=SUSPENDED, leader_lost=True)
    assert executor._poll_coordinator() == (SUSPENDED, None)
    assert elections == [False], "the failover would deploy on a coordinator that does not lead"


def test_a_lost_leadership_alone_is_a_failover_of_its_own(driver) -> None:
    executor, elections = driver
    executor.coordinator = FakeCoordinator(fail_request=None, leader_lost=True)
    assert executor._poll_coordinator() == ("checkpoint coordinator lost its ZooKeeper leadership", None)
    assert elections == [False]


def test_a_coordinator_failure_while_leading_fails_over_without_an_election(driver) -> None:
    executor, elections = driver
    executor.coordinator = FakeCoordinator(fail_request=SUSPENDED, leader_lost=False)
    assert executor._poll_coordinator() == (SUSPENDED, None)
    assert elections == []
    executor.coordinator = FakeCoordinator(fail_request=None, leader_lost=False)
    assert executor._poll_coordinator() is None
