"""The Ray driver kills a coordinator for an injected crash once, without starting Ray (no actor is
built): Ray's kill is asynchronous, and the killed actor may still answer a status poll that says
it is doomed."""

from __future__ import annotations

from typing import Any

import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.ray import coordinator_handover
from runtime.ray.executor import RayExecutor
from vocabulary.fault_plan import CoordinatorCrashBeforeNotify, FaultPlan


class _Call:
    def __init__(self, name: str) -> None:
        self.name = name

    def remote(self, *args: Any) -> tuple[str, tuple[Any, ...]]:
        return self.name, args


class FakeCoordinator:
    """A coordinator actor handle: each `method.remote(...)` is a (method, args) "ref"."""

    def __getattr__(self, name: str) -> _Call:
        return _Call(name)


def answer(ref: Any, timeout: float | None = None) -> Any:
    if isinstance(ref, list):
        return [answer(r) for r in ref]
    return {"history": [], "fault_counts": {}, "call_counts": {}, "process_cpu": 0.0}[ref[0]]


@pytest.fixture
def driver(monkeypatch) -> tuple[RayExecutor, list[Any]]:
    killed: list[Any] = []
    monkeypatch.setattr(coordinator_handover.ray, "get", answer)
    monkeypatch.setattr(coordinator_handover.ray, "kill", lambda handle, no_restart: killed.append(handle))
    env = StreamEnvironment(parallelism=1)
    env.enable_checkpointing(interval=0.1)
    env.from_collection([{"key": "a"}]).sink_to(CollectSink("out"))
    executor = RayExecutor(env.get_job_graph("job"), faults=FaultPlan.of(CoordinatorCrashBeforeNotify(nth=0)))
    executor._resolve_faults()
    return executor, killed


def test_a_doomed_coordinator_answering_after_its_kill_is_not_killed_again(driver) -> None:
    executor, killed = driver
    doomed = FakeCoordinator()
    executor.coordinator = doomed
    executor.running_since = 0.0
    executor._coord_status = {"doomed": True}
    assert executor._inject_faults(1.0)
    # the kill has not landed yet: a status poll answered by the same actor still says doomed
    executor._coord_status = {"doomed": True}
    executor._inject_faults(1.1)
    assert killed == [doomed] and len(executor.master.coordinators.crash_times) == 1
    # its replacement is a coordinator of its own: a crash planned for it kills it
    replacement = FakeCoordinator()
    executor.coordinator = replacement
    executor._coord_status = {"doomed": True}
    executor._inject_faults(1.2)
    assert killed == [doomed, replacement] and len(executor.master.coordinators.crash_times) == 2


def test_the_status_a_killed_coordinator_gave_does_not_doom_its_replacement(driver, monkeypatch) -> None:
    """The doomed actor answers once more before its kill lands, then the poll finds it dead and
    replaces it: that last status is the dead one's, and its crash is made — the replacement, with
    no crash planned for it, lives."""
    from ray.exceptions import RayActorError

    executor, killed = driver
    doomed, replacement = FakeCoordinator(), FakeCoordinator()
    executor.coordinator = doomed
    executor.running_since = 0.0
    executor._coord_status = {"doomed": True}
    assert executor._inject_faults(1.0)
    executor._coord_status = {"doomed": True}  # its answer to a poll sent before the kill
    monkeypatch.setattr(executor, "_new_coordinator", lambda: replacement)
    failure = executor._coordinator_died(RayActorError())
    assert failure[0] == "coordinator crash" and executor.coordinator is replacement
    executor._inject_faults(1.1)
    assert replacement not in killed and len(executor.master.coordinators.crash_times) == 1
