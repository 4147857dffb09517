"""The page-view job of the cluster tests (`test_ray_cluster.py`), and its driver.

A plain module, imported by name on every Ray node (the driver's path reaches the workers) and by
`barrierflow run cluster_job:fragile`. Run as a script it is a driver process of its own (each
cluster needs a fresh driver: Ray's driver keeps the token and cluster it first joined):

    python cluster_job.py execute ADDRESS STORAGE PARALLELISM JOB   # env.execute(JOB, executor="ray", address=...)
    python cluster_job.py restore ADDRESS STORAGE PARALLELISM JOB   # the same, restore_from(STORAGE) first

In `execute` mode it first submits the job with checkpoints in a local folder, which a cluster of
several nodes refuses, and prints the refusal as a `LOCAL_PATH {json}` line. Then it prints a
`PROGRESS {json}` line about four times a second (the test decides from them when to kill a node)
and a `RESULT {json}` line at the end.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.ray.storage import StorageConfigError
from runtime.workloads.seeded import CountPerKey
from vocabulary.options import RestartStrategy

RECORDS, RATE, APPS = 6_000, 1_500, 7
SINK = "pv"


def page_view(i: int) -> dict[str, Any]:
    return {"app": f"app{(i * 31) % APPS}", "i": i}


def to_app(record: dict[str, Any]) -> dict[str, Any]:
    return {"app": record["app"]}


def build(parallelism: int = 2, storage: str | None = None, attempts: int = 5) -> StreamEnvironment:
    """The job: a paced generator (its splits follow the parallelism, or a restored checkpoint's)
    -> to app -> count per app -> `CollectSink`; checkpoints every 100 ms in `storage`."""
    env = StreamEnvironment(parallelism=parallelism, buffer_size=64, credits=4, buffer_timeout=0.01)
    env.enable_checkpointing(interval=0.1, tolerable_failures=1000, retained=2, storage=storage)
    if attempts:
        env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=attempts, delay=0.05))
    else:
        env.set_restart_strategy(RestartStrategy.no_restart())
    (env.generate(count=RECORDS, rate=RATE, fn=page_view)
        .map(to_app, name="to-app")
        .key_by("app")
        .process(CountPerKey("app"), name="count")
        .sink_to(CollectSink(SINK)))
    return env


def fragile() -> StreamEnvironment:
    """`build()` without restarts, for `barrierflow run` (it sets the storage and address)."""
    return build(attempts=0)


def expected_output() -> Counter:
    """Every (app, k) for k = 1..n once: the job's output when it is exactly once."""
    apps = Counter(page_view(i)["app"] for i in range(RECORDS))
    return Counter((app, k) for app, n in apps.items() for k in range(1, n + 1))


def _emit(kind: str, payload: dict[str, Any]) -> None:
    print(f"{kind} {json.dumps(payload, default=str)}", flush=True)


def local_path_refusal(address: str, parallelism: int, job: str) -> str | None:
    """What submitting the job with checkpoints in a local folder raises (None: it ran)."""
    try:
        build(parallelism, "/tmp/barrierflow-local-path").execute(job, executor="ray", address=address,
                                                                  max_duration=300)
    except StorageConfigError as exc:
        return str(exc)
    return None


def main(mode: str, address: str, storage: str, parallelism: int, job: str) -> None:
    if mode == "execute":
        _emit("LOCAL_PATH", {"error": local_path_refusal(address, parallelism, job)})
    env = build(parallelism, storage)
    if mode == "restore":
        env.restore_from(storage, job_id=job)
    result = env.execute(job, executor="ray", address=address, max_duration=300,
                         progress=lambda info: _emit("PROGRESS", info))
    _emit("RESULT", {"output": [[r["app"], r["count"]] for r in result.output(SINK)],
                     "failures": result.failures, "restored": result.restored_checkpoints,
                     "completed": len(result.completed_checkpoints)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
