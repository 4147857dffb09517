"""Where a steady record's latency goes on Ray when the machine is busy: run-queue wait per thread.

    python -m benchmarks.run_queue [--job udf|vectorised|nexmark-<query>] [--slots-per-worker pipeline|N]
                                   [--rate 5000] [--seconds 14] [--start 3] [--window 6] [--json PATH]

Runs a steady job (`benchmarks.steady_jobs`: the page-view job, default, or a NexMark query's)
with aligned checkpoints every 100 ms and without checkpoints. During each run it reads `/proc/<pid>/task/<tid>/schedstat`
(Linux: nanoseconds on a CPU, nanoseconds runnable but waiting for a core, time slices) of every
thread of the job's processes (the driver and the raylet's workers) `--start` seconds after its
worker actors are all up (past the page-view job's 2 s warm-up) and `--window` seconds later, and reports per process role and thread name: CPU cores, wake-ups
(slices) per second, mean run-queue wait per wake-up and the run-queue wait in cores. A record's
path wakes several threads in turn (the sender's work thread, Ray's io threads, the receiver's
main and work threads), each paying the wait for a core, which is what makes the tail on a loaded
machine. Sampling starts after the actors are up; a process that starts later is left out.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from benchmarks.process_cpu import children_of, process_role, raylet_pid
from benchmarks.report import add_output_arguments, markdown_table, output_of, parse_args
from benchmarks.steady_jobs import JOBS, SteadyJob, steady_job
from benchmarks.throughput import slots_argument
from runtime.ray.data_links import DATA_TRANSPORTS, DEFAULT_DATA_TRANSPORT
from runtime.ray.slots import PIPELINE


@dataclass(frozen=True)
class ThreadSample:
    """One thread's schedstat reading."""

    role: str
    name: str
    cpu_ns: int
    wait_ns: int
    slices: int


def read_threads(pids: Iterable[int]) -> dict[tuple[int, int], ThreadSample]:
    """Every thread of `pids` (those that still exist), keyed by (pid, tid)."""
    out: dict[tuple[int, int], ThreadSample] = {}
    for pid in pids:
        role = process_role(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    cpu, wait, slices = map(int, f.read().split()[:3])
            except (OSError, ValueError):
                continue
            out[(pid, int(tid))] = ThreadSample(role, name, cpu, wait, slices)
    return out


def run_queue_rows(before: dict[tuple[int, int], ThreadSample], after: dict[tuple[int, int], ThreadSample],
                   seconds: float) -> list[dict[str, Any]]:
    """Per (role, thread name), over `seconds` between two readings: threads, CPU cores, wake-ups
    per second, mean wait per wake-up (ms) and wait in cores; threads not in both are left out.
    Sorted by wait, largest first."""
    groups: dict[tuple[str, str], list[int]] = {}
    for key, end in after.items():
        start = before.get(key)
        if start is None or end.role == "other":
            continue
        group = groups.setdefault((end.role, end.name), [0, 0, 0, 0])
        group[0] += end.cpu_ns - start.cpu_ns
        group[1] += end.wait_ns - start.wait_ns
        group[2] += end.slices - start.slices
        group[3] += 1
    rows = [{"role": role, "thread": name, "threads": n, "cpu_cores": cpu / 1e9 / seconds,
             "wakeups_per_s": slices / seconds, "wait_ms_per_wakeup": wait / 1e6 / slices,
             "wait_cores": wait / 1e9 / seconds}
            for (role, name), (cpu, wait, slices, n) in groups.items() if slices > 0]
    return sorted(rows, key=lambda r: -r["wait_cores"])


Reading = TypeVar("Reading")


def steady_readings(job: SteadyJob, start: float, window: float, raylet: int,
                    read: Callable[[], Reading]) -> tuple[Any, tuple[float, Reading], tuple[float, Reading]]:
    """One steady run of `job` with `read()` taken `start` seconds after its worker actors are
    up and `window` seconds later: the `JobResult` and the two (time, reading) pairs.

    Raises:
        RuntimeError: the run ended before the second reading (or before its worker actors were up).
    """
    readings: list[tuple[float, Reading]] = []
    ended = threading.Event()
    workers_seen = [0]
    submitted = time.monotonic()
    workers_up: list[float] = []

    def sample() -> None:
        while not ended.is_set():
            workers_seen[0] = [process_role(pid) for pid in children_of(raylet)].count("WorkerActor")
            if workers_seen[0] >= job.workers:
                workers_up.append(time.monotonic() - submitted)
                break
            time.sleep(0.1)
        for wait in (start, window):
            if ended.wait(wait):
                return  # a reading after the run would count processes that are gone
            readings.append((time.time(), read()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = job.execute()
    finally:
        ended.set()
        sampler.join()
    if len(readings) < 2:
        if workers_seen[0] < job.workers:
            raise RuntimeError(f"{job.name}: the run ended with {workers_seen[0]} worker actors seen, waiting for "
                               f"the {job.workers} it deploys")
        raise RuntimeError(f"{job.name}: the run ended {time.monotonic() - submitted:.1f} s after submission, its "
                           f"{job.workers} worker actors up after {workers_up[0]:.1f} s, before the second reading "
                           f"(--start + --window = {start + window} s after they were up): make --seconds "
                           f"({job.seconds}) longer")
    return result, readings[0], readings[1]


def measure(job: SteadyJob, start: float, window: float, raylet: int) -> dict[str, Any]:
    """One steady run with its threads read at `start` and `start + window` seconds."""
    result, (t0, before), (t1, after) = steady_readings(
        job, start, window, raylet, lambda: read_threads(children_of(raylet) + [os.getpid()]))
    metrics = result.metrics
    return {"job": job.name, "checkpoints": job.checkpoints, "load_1m": os.getloadavg()[0],
            "latency_p50_ms": latency_ms(metrics, 50), "latency_p99_ms": latency_ms(metrics, 99),
            "threads": run_queue_rows(before, after, t1 - t0)}


def latency_ms(metrics: Any, q: float) -> float | None:
    """The run's `q`-th latency percentile in ms (None: its sink stamps none, as NexMark's)."""
    seconds = metrics.latency_percentile(q)
    return None if seconds is None else seconds * 1e3


def add_steady_arguments(parser: argparse.ArgumentParser) -> None:
    """`--job`, `--rate`, `--seconds`, `--start`, `--window`, `--slots-per-worker`,
    `--data-transport`: the steady run `steady_readings` reads (`steady_job_of` makes it)."""
    parser.add_argument("--job", default="udf", choices=JOBS,
                        help="the page-view job (udf, vectorised) or a NexMark query's (default udf)")
    parser.add_argument("--slots-per-worker", default=PIPELINE, type=slots_argument,
                        help="subtasks per worker actor: 'pipeline' (default) or a number (1: an actor per subtask)")
    parser.add_argument("--data-transport", default=DEFAULT_DATA_TRANSPORT, choices=DATA_TRANSPORTS,
                        help="how data calls go between workers: Ray actor calls (default) or sockets")
    parser.add_argument("--rate", type=float, default=5000.0, help="records (NexMark: events) per second (default 5000)")
    parser.add_argument("--seconds", type=float, default=14.0, help="length of each run (default 14)")
    parser.add_argument("--start", type=float, default=3.0,
                        help="first reading, s after the worker actors are up (default 3)")
    parser.add_argument("--window", type=float, default=6.0, help="seconds between the readings (default 6)")


def steady_job_of(args: argparse.Namespace, checkpoints: bool) -> SteadyJob:
    """The steady job `add_steady_arguments`' options describe."""
    return steady_job(args.job, checkpoints=checkpoints, rate=args.rate, seconds=args.seconds,
                      slots=args.slots_per_worker, data_transport=args.data_transport)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_steady_arguments(parser)
    add_output_arguments(parser, "run_queue", quick_help="shorter runs (8 s, readings 3 s apart)")
    args = parse_args(parser, argv)
    if args.quick:
        args.seconds, args.start, args.window = 8.0, 2.5, 3.0
    from runtime.ray.cluster import ensure_ray

    ensure_ray()
    raylet = raylet_pid()
    runs = [measure(steady_job_of(args, on), args.start, args.window, raylet) for on in (True, False)]
    tables = []
    for run in runs:
        head = {k: v for k, v in run.items() if k != "threads"}
        tables.append(f"{markdown_table([head])}\n\n{markdown_table(run['threads'][:15])}")
    table = "\n\n".join(tables)
    print(table)
    output_of(args, "run_queue").write({"runs": runs}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
