"""The steady Ray jobs that `benchmarks.run_queue` and `benchmarks.core_seconds` read while they run.

* `udf`, `vectorised`: the `benchmarks.throughput` page-view job (due stamps, 2 s warm-up),
  aligned checkpoints every 100 ms unless checkpointing is off;
* `nexmark-<query>`: a NexMark query's job as `benchmarks.nexmark` builds it (its parallelism,
  each source split's events at its share of the rate from when the split's reader opens, so the
  input does not start before the worker actors are up however long they take), aligned
  checkpoints at its interval (100 ms) unless checkpointing is off.

Each runs with `slots_per_worker` (`pipeline`: a worker actor per pipeline, Ray's default; 1: one
per subtask, as `benchmarks.fidelity` calibrates NexMark), and says how many worker actors it
deploys, so a reader knows when they are all up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks import throughput
from benchmarks.nexmark import PREFIX, PROFILES
from benchmarks.nexmark_job import build_job, make_env
from benchmarks.report import local_checkpoint_dir
from runtime.ray.data_links import DEFAULT_DATA_TRANSPORT
from runtime.ray.slots import PIPELINE, Slots, assign_slots
from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.queries import QUERIES

#: the job names `steady_job` knows
JOBS: tuple[str, ...] = (*throughput.JOBS, *(PREFIX + q for q in QUERIES))


@dataclass(frozen=True)
class SteadyJob:
    """A steady run to start: `execute()` runs it to its end and returns its `JobResult`;
    `workers`: the worker actors it deploys."""

    name: str
    execute: Callable[[], Any]
    workers: int
    #: seconds of input it reads
    seconds: float
    #: whether it takes checkpoints
    checkpoints: bool


def steady_job(name: str, *, checkpoints: bool, rate: float, seconds: float,
               slots: Slots = PIPELINE, data_transport: str = DEFAULT_DATA_TRANSPORT) -> SteadyJob:
    """The job `name` (one of `JOBS`) reading `rate` records (NexMark: events) per second for
    `seconds`, on Ray with `slots` slots per worker and its data calls between workers as
    `data_transport` says.

    Raises:
        ValueError: `name` is not one of `JOBS`.
    """
    count = int(rate * seconds)
    if name in throughput.JOBS:
        graph = throughput.build(count, checkpoints=checkpoints, rate=rate, job=name).get_job_graph("steady")
        workers = len(assign_slots(graph.task_ids(), slots))
        return SteadyJob(name, lambda: throughput.execute("ray", count, checkpoints=checkpoints, rate=rate, job=name,
                                                          warmup=2.0, slots=slots, data_transport=data_transport)[0],
                         workers, seconds,
                         checkpoints)
    if name.startswith(PREFIX) and name.removeprefix(PREFIX) in QUERIES:
        return _nexmark(name, QUERIES[name.removeprefix(PREFIX)], checkpoints, rate, seconds, count, slots,
                        data_transport)
    raise ValueError(f"steady job {name!r}: not one of {', '.join(JOBS)}")


def _nexmark(name: str, query: Any, checkpoints: bool, rate: float, seconds: float, count: int,
             slots: Slots, data_transport: str) -> SteadyJob:
    bench = PROFILES[("ray", False)]  # parallelism, interval and alignment timeout as `benchmarks.nexmark`'s

    def env(storage: str | None) -> Any:
        built = make_env("aligned" if checkpoints else "none", parallelism=bench.parallelism,
                         interval=bench.interval, alignment_timeout=bench.alignment_timeout, storage=storage)
        build_job(built, query, NexmarkConfig(), count, rate=rate, anchor=None)
        return built

    def execute() -> Any:
        with local_checkpoint_dir() as storage:
            return env(storage).execute(f"steady-{name}", executor="ray", slots_per_worker=slots,
                                        data_transport=data_transport)

    workers = len(assign_slots(env(None).get_job_graph(name).task_ids(), slots))
    return SteadyJob(name, execute, workers, seconds, checkpoints)
