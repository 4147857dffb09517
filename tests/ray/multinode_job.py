"""Multi-node scenario, run in its own process by test_ray_multinode.py (its own Ray cluster).

A `ray.cluster_utils.Cluster` with a head and two worker nodes (health checks every 500 ms, so a
lost node is noticed in ~2 s), the page-view job's tasks spread over the nodes, one worker node
removed mid-run. Prints one JSON line: the checks' inputs.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

# a fake cluster this process starts: token authentication on for every node (read when ray is
# first imported, which importing the project's modules may do: so before them)
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))

from runtime.ray.cluster import LOCAL_ENV, local_runtime_env  # noqa: E402

for _key, _value in LOCAL_ENV.items():
    os.environ.setdefault(_key, _value)

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from operators import CollectSink  # noqa: E402
from runtime import StreamEnvironment  # noqa: E402
from runtime.ray.executor import RayExecutor  # noqa: E402
from runtime.ray.storage import StorageConfigError  # noqa: E402
from runtime.workloads.seeded import CountPerKey  # noqa: E402
from vocabulary.options import CheckpointingMode, RestartStrategy  # noqa: E402

RECORDS, RATE, APPS = 12_000, 2_000, 7


def page_view(i: int) -> dict:
    return {"app": f"app{(i * 31) % APPS}", "i": i}


def build(storage: str | None = None) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=128, credits=4, buffer_timeout=0.01)
    env.enable_checkpointing(interval=0.1, mode=CheckpointingMode.EXACTLY_ONCE, tolerable_failures=1000,
                             storage=storage)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=5, delay=0.05))
    (
        env.generate(count=RECORDS, rate=RATE, fn=page_view)
        .map(lambda r: {"app": r["app"]}, name="to-app")
        .key_by("app")
        .process(CountPerKey("app"), name="count")
        .sink_to(CollectSink("pv"))
    )
    return env


def main() -> None:
    system = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
              "health_check_initial_delay_ms": 500, "health_check_timeout_ms": 500}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": system})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, runtime_env=local_runtime_env(), log_to_driver=False)
    out: dict = {"nodes": len([n for n in ray.nodes() if n["Alive"]])}
    try:
        build(storage="/tmp/barrierflow-local-path").execute("pv", executor="ray")
        out["local_path_error"] = None
    except StorageConfigError as exc:
        out["local_path_error"] = str(exc)

    removed: dict = {}

    def progress(info: dict) -> None:
        if "at" not in removed and info["records in"] >= RECORDS * 0.3:
            removed["at"] = info["records in"]
            removed["placement"] = dict(executor.placement)
            threading.Thread(target=cluster.remove_node, args=(workers[0],), daemon=True).start()

    # an actor per task, so the 4 tasks spread over all 3 nodes and the removed one hosts some (one
    # worker per pipeline would be 2 actors, which may both miss it)
    executor = RayExecutor(build().get_job_graph("pv"), progress=progress, max_duration=240, slots_per_worker=1)
    started = time.time()
    result = executor.run()
    out.update(
        wall=time.time() - started,
        removed_at=removed.get("at"),
        placement_before=removed.get("placement"),
        worker_node=workers[0].node_id,
        placement_after=dict(executor.placement),
        failures=result.failures,
        output=[[r["app"], r["count"]] for r in result.output("pv")],
        state=result.final_state["count"]["count"],
        completed=len(result.completed_checkpoints),
    )
    print("RESULT " + json.dumps(out))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
