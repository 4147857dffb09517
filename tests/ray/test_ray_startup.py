"""Starting a job on Ray: the worker actors' processes start while the coordinator's does (each
process start is most of a second), and their first deployment waits as long as a new process
may take to start, not only a heartbeat timeout; the next job's, on the workers the first one
left (`runtime.ray.worker_pool`), waits only a heartbeat timeout."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ray_jobs import expected_counts, pageview_env, pageview_rows

import runtime.ray.task_deployment as task_deployment
from runtime.ray.coordinator_handover import CoordinatorHandover
from runtime.ray.executor import RayExecutor
from runtime.workloads.seeded import multiset

ROWS = pageview_rows(500)


@pytest.mark.ray
def test_workers_start_beside_the_coordinator_and_their_first_deployment_waits_for_their_processes(
        no_idle_workers, monkeypatch) -> None:
    workers_at_coordinator_start: list[list[bool]] = []
    new_coordinator = CoordinatorHandover._new_coordinator

    def spy_coordinator(self: RayExecutor) -> Any:
        workers_at_coordinator_start.append([w is not None for w in self.workers])
        return new_coordinator(self)

    deploy_timeouts: list[float | None] = []
    get = task_deployment.errors.get

    def spy_get(ref: Any, timeout: float | None = None) -> Any:
        deploy_timeouts.append(timeout)
        return get(ref, timeout=timeout)

    monkeypatch.setattr(CoordinatorHandover, "_new_coordinator", spy_coordinator)
    monkeypatch.setattr(task_deployment, "errors", SimpleNamespace(get=spy_get))  # the deployment's waits only
    executor = RayExecutor(pageview_env(ROWS).get_job_graph("startup"), slots_per_worker=2, heartbeat_timeout=5.0)
    result = executor.run()

    assert multiset(result.output("pv")) == expected_counts(ROWS)
    assert workers_at_coordinator_start == [[True] * len(executor.groups)], workers_at_coordinator_start
    first_deployment = deploy_timeouts[:len(executor.task_ids)]
    assert first_deployment == [task_deployment.ACTOR_START_TIMEOUT] * len(executor.task_ids), deploy_timeouts

    deploy_timeouts.clear()
    workers_at_coordinator_start.clear()
    again = RayExecutor(pageview_env(ROWS).get_job_graph("startup-again"), slots_per_worker=2, heartbeat_timeout=5.0)
    assert multiset(again.run().output("pv")) == expected_counts(ROWS)
    assert workers_at_coordinator_start == [[True] * len(again.groups)], workers_at_coordinator_start
    assert deploy_timeouts[:len(again.task_ids)] == [5.0] * len(again.task_ids), "a kept worker's process is up"
