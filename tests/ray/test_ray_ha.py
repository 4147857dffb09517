"""High availability on Ray with a real ZooKeeper: leader coordinator killed, ZooKeeper restarted,
session expiry. The server is started once per module and never skipped."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from ray_jobs import expected_counts, pageview_env, pageview_rows

from checkpoint.io.zookeeper_client import close_session
from checkpoint.io.zookeeper_server import ZooKeeperServer
from runtime import FaultPlan
from runtime.ray.coordinator_actor import CoordinatorActor
from runtime.ray.executor import RayExecutor
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import CoordinatorCrash

pytestmark = pytest.mark.zookeeper

#: a killed leader's session expires after this; long enough that a coordinator starved of CPU on
#: a loaded machine keeps its session (and its leadership)
SESSION_TIMEOUT = 6.0
ROWS = pageview_rows(4000)


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(data_dir=tmp_path_factory.mktemp("zookeeper-ray"))
    server.start()  # a RuntimeError here fails the tests: never a skip
    yield server
    server.stop()


def slow_app(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.0008)  # keeps the job running for a few seconds, long enough for a failover
    return {"app": record["app"]}


def ha_env(zk: ZooKeeperServer, rows: list[dict[str, Any]] = ROWS) -> Any:
    env = pageview_env(rows, fn=slow_app, interval=0.05)
    env.set_high_availability("zookeeper", hosts=zk.hosts, cluster_id=f"ray-{uuid.uuid4().hex[:10]}",
                              session_timeout=SESSION_TIMEOUT)
    return env


def assert_ids_strictly_increase(checkpoints: list[Any]) -> None:
    ids = [c.id for c in checkpoints]
    assert ids == sorted(set(ids)), f"checkpoint ids not strictly increasing: {ids}"


@pytest.mark.ray
def test_killing_the_leader_coordinator_elects_the_standby_which_recovers(ray_session, zk_server) -> None:
    graph = ha_env(zk_server).get_job_graph("ha-kill")
    executor = RayExecutor(graph, faults=FaultPlan([CoordinatorCrash(at_fraction=0.4)]))
    result = executor.run()

    assert multiset(result.output("pv")) == expected_counts(ROWS), "not exactly-once"
    assert len(executor.coordinators.crash_times) == 1 and result.coordinator_crashes == 1
    assert len(executor.coordinators.promotion_times) == 1, "the standby was not promoted"
    assert result.failures == ["coordinator crash (standby took over)"], result.failures  # the simulator's words
    killed = executor.coordinators.crash_times[0]
    before = [c for c in result.checkpoints if c.completed and c.end_time < killed]
    after = [c for c in result.checkpoints if c.completed and c.trigger_time > killed]
    assert before and after, "need completed checkpoints on both sides of the failover"
    recovered = executor.coordinators.recovered_checkpoints[0]
    assert recovered is not None and recovered >= before[-1].id, (recovered, before[-1].id)
    assert min(c.id for c in after) > recovered
    assert_ids_strictly_increase(result.checkpoints)


@pytest.mark.ray
def test_zookeeper_restart_mid_job_loses_no_completed_checkpoint(ray_session, zk_server) -> None:
    graph = ha_env(zk_server).get_job_graph("ha-zk-restart")
    executor = RayExecutor(graph)
    seen: list[int] = []
    restarted = []

    def progress(info: dict[str, Any]) -> None:
        status = executor._coord_status
        if status.get("latest_id") is not None:
            seen.append(status["latest_id"])
        if not restarted and info["checkpoints completed"] >= 3:
            restarted.append(max(seen) if seen else None)
            zk_server.restart()  # same port and data dir: persistent znodes survive

    executor.progress = progress
    result = executor.run()

    assert restarted and restarted[0] is not None, "ZooKeeper was never restarted mid-job"
    assert multiset(result.output("pv")) == expected_counts(ROWS), "not exactly-once"
    completed_ids = [c.id for c in result.checkpoints if c.completed]
    assert completed_ids and max(completed_ids) > restarted[0]
    for recovered in executor.coordinators.recovered_checkpoints:  # a failover restored no older checkpoint
        assert recovered is not None and recovered >= restarted[0]
    assert_ids_strictly_increase(result.checkpoints)
    assert zk_server.is_running


@pytest.mark.ray
def test_the_leaders_session_expiring_mid_job_elects_the_standby_which_recovers(ray_session, zk_server) -> None:
    """The leader coordinator lives on but ZooKeeper ends its session (as after a long GC pause or
    a partition): it must step down, the standby lead, and the job finish exactly-once from a
    checkpoint no older than the last one completed before."""
    graph = ha_env(zk_server).get_job_graph("ha-session-expiry")
    executor = RayExecutor(graph)
    expired: list[int] = []

    def progress(info: dict[str, Any]) -> None:
        status = executor._coord_status
        if not expired and info["checkpoints completed"] >= 3 and status.get("zk_session"):
            expired.append(status["latest_id"])
            close_session(zk_server.hosts, status["zk_session"])  # a forced expiry of a live leader

    executor.progress = progress
    result = executor.run()

    assert expired, "the leader's session was never expired mid-job"
    assert multiset(result.output("pv")) == expected_counts(ROWS), "not exactly-once"
    assert len(executor.coordinators.promotion_times) >= 1, "no contender was promoted after the expiry"
    # the revocation, or a trigger that met the lost session first; when that trigger's failover
    # starts before the revocation lands, the revocation is one more failover (never forgotten)
    assert 1 <= len(result.failures) <= 2 and all("ZooKeeper" in f for f in result.failures), result.failures
    completed_ids = [c.id for c in result.checkpoints if c.completed]
    assert max(completed_ids) > expired[0], "no checkpoint completed after the failover"
    for recovered in executor.coordinators.recovered_checkpoints:
        assert recovered is not None and recovered >= expired[0]
    assert_ids_strictly_increase(result.checkpoints)


class _FakeTask:
    """Stands in for a task's `SlotHandle` on a worker of its own: records the triggers the
    coordinator sends (in `control` calls to the worker)."""

    def __init__(self) -> None:
        self.triggers: list[int] = []
        self.worker, self.worker_index, self.task_id = SimpleNamespace(control=self), 0, None
        self.data_transport = "ray"  # (every batch a `control` call; frames: test_data_links.py)

    def remote(self, items: list[tuple[Any, str, tuple[Any, ...]]]) -> None:
        self.triggers += [args[1] for _, method, args in items if method == "trigger_source"]


def _expire(client: KazooClient, hosts: str) -> None:
    """Force a real session expiry: a second client takes over the session and closes it."""
    old = client.client_id[0]
    thief = KazooClient(hosts=hosts, client_id=client.client_id, timeout=SESSION_TIMEOUT)
    thief.start(timeout=10)
    thief.stop()
    thief.close()
    deadline = time.monotonic() + 10
    while not (client.state == KazooState.CONNECTED and client.client_id[0] != old):
        assert time.monotonic() < deadline, "the leader's client never got a new session"
        time.sleep(0.01)


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_session_expiry_makes_the_leader_coordinator_step_down(zk_server, tmp_path) -> None:
    graph = ha_env(zk_server).get_job_graph("ha-expiry")
    source = graph.source_task_ids()[0]
    leader = CoordinatorActor("ha-expiry", graph, ("uri", str(tmp_path)), "coordinator-0")
    standby = None
    try:
        assert leader.promote(10.0)
        standby = CoordinatorActor("ha-expiry", graph, ("uri", str(tmp_path)), "coordinator-1")
        assert not standby.promote(0.3), "the standby must not lead while the leader's session lives"
        task = _FakeTask()
        leader.deploy(0, {source: task})
        _wait(lambda: len(task.triggers) >= 1, 5, "the leader to trigger")

        _expire(leader.ha_factory.client, zk_server.hosts)
        _wait(lambda: leader.status()["leader_lost"], 5, "the leader to notice it lost leadership")
        assert standby.promote(5.0), "the standby was not elected after the leader's session expired"
        assert not leader.is_leader(), "the old leader rejoined behind the standby"
        count = len(task.triggers)
        time.sleep(0.3)  # 6 trigger intervals
        assert len(task.triggers) == count, "a deposed leader kept triggering checkpoints"
        status = standby.status()
        assert status["leader"] and not status["leader_lost"]
    finally:
        leader.shutdown()
        if standby is not None:
            standby.shutdown()


def test_a_lost_leadership_stays_reported_through_a_deploy_until_the_next_promotion(zk_server, tmp_path) -> None:
    """A failover begun for another reason (a trigger that found ZooKeeper suspended fails the
    coordinator before its revocation lands) deploys the next attempt: the loss must still be
    reported, or the driver never awaits a leader and the job waits for triggers that never come."""
    graph = ha_env(zk_server).get_job_graph("ha-lost-deploy")
    source = graph.source_task_ids()[0]
    leader = CoordinatorActor("ha-lost-deploy", graph, ("uri", str(tmp_path)), "coordinator-0")
    try:
        assert leader.promote(10.0)
        task = _FakeTask()
        leader.deploy(0, {source: task})
        _expire(leader.ha_factory.client, zk_server.hosts)
        _wait(lambda: leader.status()["leader_lost"], 5, "the leader to notice it lost leadership")

        leader.suspend()
        leader.deploy(1, {source: task})
        assert leader.status()["leader_lost"], "deploying the next attempt erased the lost leadership"

        assert leader.promote(10.0), "the only contender was not elected again"
        status = leader.status()
        assert status["leader"] and not status["leader_lost"]
        count = len(task.triggers)
        _wait(lambda: len(task.triggers) > count, 5, "the re-elected leader to trigger")
    finally:
        leader.shutdown()
