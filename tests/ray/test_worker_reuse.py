"""Workers and services kept between the jobs of one driver process (`runtime.ray.worker_pool`):
the next job runs on them, each job commits every record once, a late call of an earlier job
changes nothing, one that died while idle is replaced, and a job that failed or opted out leaves
none behind."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from ray_jobs import expected_counts, pageview_env, pageview_rows

from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment, TaskCrash
from runtime.jobmaster.result import JobFailedError
from runtime.ray.services import BlobStoreService, CommitterService
from runtime.ray.worker_actor import WorkerActor
from runtime.ray.worker_pool import IDLE_SERVICES, IdleActors, next_epoch
from runtime.records.messages import Buffer
from runtime.workloads.seeded import multiset
from vocabulary.handles import TaskId
from vocabulary.options import RestartStrategy

# ---------------------------------------------------------------------------- without Ray


def test_idle_actors_are_taken_by_their_key_up_to_the_capacity_per_key_in_their_own_session() -> None:
    session = ["ray-1"]
    idle = IdleActors(capacity=2, session=lambda: session[0])
    assert idle.keep("cpus=0.01", ["w1", "w2"]) == []
    assert idle.keep("cpus=1", ["w3", "w4", "w7"]) == ["w7"], "over the capacity: returned to be killed"
    assert idle.take("cpus=0.5") is None
    assert idle.take("cpus=1") == "w3"
    assert [idle.take("cpus=0.01"), idle.take("cpus=0.01"), idle.take("cpus=0.01")] == ["w1", "w2", None]
    idle.keep("cpus=0.01", ["w5"])
    session[0] = "ray-2"  # Ray shut down and started again: that worker is gone with the old one
    assert idle.take("cpus=0.01") is None and len(idle) == 0
    idle.keep("cpus=0.01", ["w6"])
    assert idle.actors() == ["w6"] and idle.clear() == ["w6"] and len(idle) == 0


def test_epochs_never_repeat_in_a_process() -> None:
    drawn = [next_epoch() for _ in range(5)]
    assert drawn == sorted(set(drawn))


# ---------------------------------------------------------------------------- on Ray


def _actor_ids(workers: list[Any]) -> list[str]:
    return sorted(w._actor_id.hex() for w in workers)


@pytest.mark.ray
def test_the_next_job_runs_on_the_workers_the_last_one_left_and_each_commits_every_record_once(no_idle_workers) -> None:
    rows = pageview_rows(3_000)
    first = pageview_env(rows).execute("reuse-1", executor="ray")
    assert first.restarts == 0, first.failures
    kept = _actor_ids(no_idle_workers.actors())
    assert len(kept) == 2, "a clean end keeps its two workers"
    services = _actor_ids(IDLE_SERVICES.actors())
    assert len(services) == 3, "a clean end keeps its coordinator, committer and in-memory storage"
    # the second job crashes a task mid-run: the failover replaces that worker and the survivors
    # host the new epoch, as on fresh workers
    crash = FaultPlan.of(TaskCrash(task="count[1]", after_records=700))
    second = pageview_env(rows).execute("reuse-2", executor="ray", faults=crash)
    assert second.restarts == 1 and second.restored_checkpoints, second.failures
    for result in (first, second):
        assert multiset(result.output("pv")) == expected_counts(rows), "a record committed twice or lost"
    now = _actor_ids(no_idle_workers.actors())
    assert len(now) == 2 and len(set(now) & set(kept)) >= 1, "the second job started every worker anew"
    assert _actor_ids(IDLE_SERVICES.actors()) == services, "the second job started its own services"


@pytest.mark.ray
def test_a_kept_worker_that_died_or_cannot_host_the_next_job_is_replaced(no_idle_workers) -> None:
    import ray
    from ray.exceptions import RayActorError

    rows = pageview_rows(500)
    assert multiset(pageview_env(rows).execute("keep", executor="ray").output("pv")) == expected_counts(rows)
    dead, broken = no_idle_workers.clear()
    ray.kill(dead, no_restart=True)  # died while idle (the OOM killer, say)
    for service in IDLE_SERVICES.actors():  # the services too: new ones serve the next job
        ray.kill(service, no_restart=True)
    graph = pageview_env(rows).get_job_graph("broken")
    broken.rehost.remote(graph, 0, graph.task_ids()[:1], {})  # no services for its subtask: it cannot host it
    with pytest.raises(RayActorError):
        ray.get(broken.calls.remote(), timeout=60)
    no_idle_workers.keep(_key_of_a_job_on_this_node(), [dead])
    result = pageview_env(rows).execute("after-a-death", executor="ray")
    assert result.restarts == 0 and multiset(result.output("pv")) == expected_counts(rows)
    assert dead._actor_id.hex() not in _actor_ids(no_idle_workers.actors()), "the dead worker was kept again"
    assert len(IDLE_SERVICES) == 3


@pytest.mark.ray
def test_a_late_call_of_an_earlier_job_to_a_service_is_dropped(ray_session) -> None:
    """A service serving the next job (its token) ignores the earlier job's calls: a stage of a
    cancelled task, a snapshot write of a cancelled attempt."""
    import ray

    from runtime.ray.services import ServiceHandle

    committer = ray.remote(num_cpus=0)(CommitterService).remote(None, 1)
    earlier = ServiceHandle(committer, 1)
    ray.get(earlier.stage.remote("out", "t-1", Buffer.from_records([{"i": 1}])))
    ray.get(committer.serve.remote(2))
    later = ServiceHandle(committer, 2)
    assert ray.get(earlier.stage.remote("out", "t-2", Buffer.from_records([{"i": 2}]))) is None
    ray.get(later.commit.remote("out", "t-3", Buffer.from_records([{"i": 3}])))
    kept = ray.get(later.committer.remote())
    assert kept.output("out") == [{"i": 3}] and kept.staged_transactions("out") == [], \
        "the earlier job's stage reached the later one"
    store = ray.remote(num_cpus=0)(BlobStoreService).remote(1)
    ray.get(ServiceHandle(store, 1).put.remote("a/chk-1/x", b"1"))
    ray.get(store.serve.remote(2))
    ray.get(ServiceHandle(store, 1).put.remote("a/chk-2/x", b"2"))
    assert ray.get(ServiceHandle(store, 2).list.remote("a/")) == []
    with pytest.raises(ray.exceptions.RayTaskError, match="no service method"):
        ray.get(committer.call.remote(2, "_committer"))


def _key_of_a_job_on_this_node() -> tuple[Any, ...]:
    from runtime.ray.executor import RayExecutor

    executor = RayExecutor(pageview_env(pageview_rows(1)).get_job_graph("key"))
    executor._multi_node = False
    return executor._worker_options_key()


@pytest.mark.ray
@pytest.mark.parametrize("how", ["failed", "reuse_actors=False"])
def test_a_failed_job_or_one_that_opted_out_leaves_no_idle_worker(no_idle_workers, how: str) -> None:
    env = StreamEnvironment(parallelism=2)
    env.set_restart_strategy(RestartStrategy.no_restart())
    if how == "failed":
        env.from_collection([{"i": i} for i in range(100)]).map(_fails_at_50, name="boom").sink_to(CollectSink("out"))
        with pytest.raises(JobFailedError, match="boom"):
            env.execute("fails", executor="ray")
    else:
        env.from_collection([{"i": i} for i in range(100)]).sink_to(CollectSink("out"))
        assert len(env.execute("opted-out", executor="ray", reuse_actors=False).output("out")) == 100
    assert len(no_idle_workers) == 0


def _fails_at_50(record: dict[str, Any]) -> dict[str, Any]:
    if record["i"] == 50:
        raise ValueError("boom at 50")
    return record


@pytest.mark.ray
def test_a_late_call_of_an_earlier_job_changes_nothing_on_the_worker_that_hosts_the_next(ray_session, tmp_path) -> None:
    """In process: a worker hosts job A's subtasks, then job B's under the same names; A's push
    (its epoch) reaches B's subtask and is dropped, a call to a subtask only A had is ignored, one
    to a subtask never hosted is an error naming it, and A's threads end."""
    graph = pageview_env(pageview_rows(10)).disable_chaining().get_job_graph("late")
    tasks = graph.task_ids()
    sink = next(t for t in tasks if "Sink" in str(t))
    services = {t: {"committer": None, "storage": ("uri", str(tmp_path)), "job_id": "late"} for t in tasks}
    threads_before = threading.active_count()
    worker = WorkerActor(graph, 0, tasks, services)
    old, new = next_epoch(), next_epoch()
    for task in tasks:
        worker.deploy(task, old, None, {}, {}, {}, None)
    worker.rehost(graph, 0, tasks[1:], {t: services[t] for t in tasks[1:]})  # B lacks A's source
    for task in tasks[1:]:
        worker.deploy(task, new, None, {}, {}, {}, None)
    worker.send((sink, "push", (old, 0, 0, [Buffer.from_records([{"app": "a", "count": 1}])])))
    beat = worker.call(sink, "heartbeat")
    assert beat["error"] is None and beat["records"] == 0, f"job A's push reached job B's sink: {beat}"
    worker.send((tasks[0], "push", (old, 0, 0, [])))  # a subtask only job A had: ignored
    with pytest.raises(KeyError, match="hosts no subtask"):
        worker.call(TaskId("nowhere", 0), "heartbeat")
    for _ in range(3):  # hosting again and again leaves no thread of the earlier jobs behind
        worker.rehost(graph, 0, tasks, services)
        for task in tasks:
            worker.deploy(task, next_epoch(), None, {}, {}, {}, None)
    worker.rehost(graph, 0, [], {})
    _wait_for(lambda: threading.active_count() <= threads_before + 2, "the earlier jobs' threads did not end")


def _wait_for(condition: Any, message: str, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{message}: {sorted(t.name for t in threading.enumerate())}"
        time.sleep(0.05)
