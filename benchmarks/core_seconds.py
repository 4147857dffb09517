"""Every core-second of a steady Ray run, by the process (and thread) it went to.

    python -m benchmarks.core_seconds [--job udf|vectorised|nexmark-<query>] [--slots-per-worker pipeline|N]
                                      [--rate 5000] [--seconds 14] [--start 3] [--window 6] [--no-checkpoints]
                                      [--config lean|ray-defaults ...] [--repeat 1] [--json PATH]

Each round starts an embedded local Ray with one `--config` (`lean`: barrierflow's
`runtime.ray.cluster.LOCAL_SYSTEM_CONFIG`; `ray-defaults`: only the inline-argument size it
needs, every other Ray setting at Ray's default), runs a steady job (`benchmarks.steady_jobs`:
the page-view job, default, or a NexMark query's; aligned checkpoints every 100 ms unless
`--no-checkpoints`) and shuts Ray down again; several configs and `--repeat`s are interleaved (a, b, a, b, ...), so they share
the machine's load. `--start` seconds after the job's worker actors are up and `--window`
seconds later it reads `/proc/<pid>/stat` (user + system CPU) of every process this driver
started — itself, GCS, raylet, Ray's helper processes and every worker — and, for the job's
worker actors, `/proc/<pid>/task/<tid>/stat` of each thread.

The table puts each process in one category (`CATEGORIES`): task work (worker actors),
coordinator, committer, job services (the other job actors), driver, raylet, GCS, dashboard (API
server), dashboard agent, runtime-env agent, autoscaler monitor, log monitor, idle workers, other
(a process this module does not recognise). The categories add up to the measured total: the
CPU of the whole process tree (a process started inside the window counts from zero). The
worker actors' threads are listed by name (their "threads ended" row is what a thread that did
not live through the window used). A core-second is one second of one core: on 2 cores a
window of 6 s holds 12.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

from benchmarks.report import add_output_arguments, at_least_one, markdown_table, output_of, parse_args
from benchmarks.run_queue import add_steady_arguments, latency_ms, steady_job_of, steady_readings
from benchmarks.steady_jobs import SteadyJob
from runtime.calibration.machine_load import cpu_seconds, descendants_of
from runtime.jobmaster.result import CONTROL_FRAMES, CONTROL_ITEM, DATA_FRAMES, REPORTS_SENT
from vocabulary.task_metrics import StepTimes

#: process categories, in table order
CATEGORIES = ("task work", "coordinator", "committer", "job services", "driver", "raylet", "GCS",
              "dashboard (API server)", "dashboard agent", "runtime-env agent", "autoscaler monitor",
              "log monitor", "idle workers", "other")

#: Ray worker titles (`ray::<actor class>`) and the category they count in
_ACTORS = {"WorkerActor": "task work", "CoordinatorActor": "coordinator", "CommitterService": "committer",
           "DashboardAgent": "dashboard agent", "RuntimeEnvAgent": "runtime-env agent", "IDLE": "idle workers"}

#: a helper process's script or executable (in its command line) and its category
_HELPERS = (("/gcs_server", "GCS"), ("/raylet/raylet", "raylet"), ("dashboard/dashboard.py", "dashboard (API server)"),
            ("log_monitor.py", "log monitor"), ("autoscaler/_private/monitor.py", "autoscaler monitor"),
            ("workers/default_worker.py", "idle workers"))  # a worker not yet titled

#: `--config` names: Ray system settings of the embedded Ray (None: barrierflow's own)
CONFIGS: dict[str, dict[str, Any] | None] = {"lean": None, "ray-defaults": {"max_direct_call_object_size": 1 << 20}}


def category(cmdline: str) -> str | None:
    """The category of a process from its command line (NUL-separated arguments joined by spaces);
    None when it says nothing (a child then counts with its parent)."""
    if cmdline.startswith("ray::"):
        name = cmdline.removeprefix("ray::").split(".")[0].split(" ")[0].strip()
        return _ACTORS.get(name, "job services")
    for marker, name in _HELPERS:
        if marker in cmdline:
            return name
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def classify(pids: Iterable[int], driver: int) -> dict[int, str]:
    """Category of each of `pids` (the driver's process tree): its own, else its parent's, else
    "other"."""
    own = {pid: ("driver" if pid == driver else category(_cmdline(pid))) for pid in pids}
    found: dict[int, str] = {}
    for pid in own:
        seen, at = set(), pid
        while at in own and at not in seen and own[at] is None:
            seen.add(at)
            at = _parent(at) or 0
        found[pid] = own.get(at) or "other"
    return found


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, user + system CPU seconds) of every thread of `pid` still readable."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        seconds = cpu_seconds(f"{pid}/task/{tid}")  # type: ignore[arg-type]  # a thread's stat: the same fields
        if seconds is not None:
            out[int(tid)] = (name, seconds)
    return out


def read_tree(driver: int) -> dict[str, Any]:
    """One reading: per PID of the driver's tree its category and CPU seconds, and the worker
    actors' threads."""
    pids = descendants_of(driver)
    roles = classify(pids, driver)
    cpu = {pid: s for pid in pids if (s := cpu_seconds(pid)) is not None}
    threads = {pid: thread_cpu(pid) for pid in cpu if roles[pid] == "task work"}
    return {"roles": roles, "cpu": cpu, "threads": threads}


def account(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The window between two `read_tree` readings: core-seconds per category (a process first
    seen in `after` counts from zero; one gone by `after` is not in the tree any more and cannot be
    read), the measured total, and the worker actors' threads by name."""
    by_category = dict.fromkeys(CATEGORIES, 0.0)
    processes = dict.fromkeys(CATEGORIES, 0)
    total = 0.0
    for pid, end in after["cpu"].items():
        used = end - before["cpu"].get(pid, 0.0)
        role = after["roles"].get(pid, "other")
        by_category[role] += used
        processes[role] += 1
        total += used
    threads: dict[str, float] = {}
    for pid, now in after["threads"].items():
        was = before["threads"].get(pid, {})
        left = after["cpu"][pid] - before["cpu"].get(pid, 0.0)
        for tid, (name, cpu) in now.items():
            used = cpu - (was[tid][1] if tid in was else 0.0)
            threads[name] = threads.get(name, 0.0) + used
            left -= used
        threads["threads ended"] = threads.get("threads ended", 0.0) + left
    rows = [{"category": c, "processes": processes[c], "core_s": by_category[c], "cores": by_category[c] / seconds,
             "share": by_category[c] / total if total else 0.0} for c in CATEGORIES if processes[c]]
    thread_rows = [{"thread": name, "core_s": s, "cores": s / seconds}
                   for name, s in sorted(threads.items(), key=lambda kv: -kv[1])]
    return {"window_s": seconds, "total_core_s": total, "categories": rows, "task_threads": thread_rows}


def measure(config: str, job: SteadyJob, start: float, window: float) -> dict[str, Any]:
    """One round: an embedded Ray with `config`, a steady run, its core-seconds (and, over the
    whole run, the cores its tasks' steps took, what their processes took outside the steps and
    their data calls per second: `step_cores`)."""
    import ray

    from runtime.ray.cluster import ensure_ray

    if ray.is_initialized():
        raise RuntimeError("benchmarks.core_seconds starts its own Ray per round: run it in a fresh process")
    ensure_ray(system_config=CONFIGS[config])
    try:
        driver = os.getpid()
        # the raylet is found in the tree, not asked through a task: a task would leave an idle worker
        raylet = next(pid for pid, role in classify(descendants_of(driver), driver).items() if role == "raylet")
        result, (t0, before), (t1, after) = steady_readings(job, start, window, raylet, lambda: read_tree(driver))
    finally:
        ray.shutdown()
    metrics = result.metrics
    return {"config": config, "job": job.name, "checkpoints": job.checkpoints, "load_1m": os.getloadavg()[0],
            "latency_p99_ms": latency_ms(metrics, 99), **step_cores(metrics.tasks.values(), metrics.duration),
            "worker_calls_per_s": worker_calls_per_s(metrics.worker_calls, metrics.duration),
            **account(before, after, t1 - t0)}


def step_cores(tasks: Iterable[StepTimes], duration: float) -> dict[str, Any]:
    """Over a run of `duration` seconds: the cores the tasks' steps took, the cores their processes
    took outside the steps (None unless every task had a process of its own: `--slots-per-worker
    1`) and the data calls they sent per second."""
    tasks = list(tasks)
    per_second = 1.0 / duration if duration > 0 else 0.0
    outside = None if any(t.cpu is None for t in tasks) else sum(t.overhead for t in tasks) * per_second
    return {"steps_cores": sum(t.busy for t in tasks) * per_second, "outside_steps_cores": outside,
            "data_calls_per_s": sum(t.calls for t in tasks) * per_second}


def worker_calls_per_s(worker_calls: dict[str, dict[str, int]], duration: float) -> dict[str, float]:
    """Over a run of `duration` seconds: the calls all worker actors received per second, by the
    subtask method they invoked (`JobMetrics.worker_calls`), most first, and their total
    ("all received": a control call once, not its items; the data calls that came as socket
    frames once, under their method, not again as frames)."""
    per_second = 1.0 / duration if duration > 0 else 0.0
    summed: Counter[str] = Counter()
    for calls in worker_calls.values():
        summed.update(calls)
    received = sum(n for m, n in summed.items() if m not in (REPORTS_SENT, DATA_FRAMES, CONTROL_FRAMES) and not m.startswith(CONTROL_ITEM))
    rates = {m: n * per_second for m, n in summed.most_common()}
    return {**rates, "all received": received * per_second}


def summary(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per category, a column of cores per round (`<config> #<n>`), the total, the load and
    the whole run's `step_cores`."""
    columns = [f"{r['config']} #{i + 1}" for i, r in enumerate(rounds)]
    rows = []
    for name in CATEGORIES:
        cells = {col: next((c["cores"] for c in r["categories"] if c["category"] == name), 0.0)
                 for col, r in zip(columns, rounds)}
        if any(cells.values()):
            rows.append({"category (cores)": name, **cells})
    rows.append({"category (cores)": "total", **{col: r["total_core_s"] / r["window_s"] for col, r in zip(columns, rounds)}})
    rows.append({"category (cores)": "load (1 min)", **{col: r["load_1m"] for col, r in zip(columns, rounds)}})
    for key, label in (("steps_cores", "whole run: the tasks' steps"),
                       ("outside_steps_cores", "whole run: their processes outside the steps"),
                       ("data_calls_per_s", "whole run: data calls per second")):
        rows.append({"category (cores)": label, **{col: r.get(key) for col, r in zip(columns, rounds)}})
    methods = dict.fromkeys(m for r in rounds for m in r.get("worker_calls_per_s", {}))
    for method in methods:
        rows.append({"category (cores)": f"whole run: worker calls per second: {method}",
                     **{col: r["worker_calls_per_s"].get(method, 0.0) for col, r in zip(columns, rounds)}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_steady_arguments(parser)
    parser.add_argument("--no-checkpoints", dest="checkpoints", action="store_false", help="checkpointing off")
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS),
                        help="Ray settings of a round; repeat to interleave several (default lean)")
    parser.add_argument("--repeat", type=at_least_one, default=1, help="rounds per config (default 1)")
    add_output_arguments(parser, "core_seconds", quick_help="a short run (5 s, readings 2 s apart)")
    args = parse_args(parser, argv)
    if args.quick:
        args.seconds, args.start, args.window = 5.0, 1.0, 2.0
    configs = args.config or ["lean"]
    rounds = [measure(c, steady_job_of(args, args.checkpoints), args.start, args.window)
              for _ in range(args.repeat) for c in configs]
    parts = [markdown_table(summary(rounds))]
    for i, r in enumerate(rounds):
        parts.append(f"{r['config']} #{i + 1}: {r['total_core_s']:.3f} core-s in {r['window_s']:.2f} s, "
                     f"steady p99 {_ms(r['latency_p99_ms'])}\n\n"
                     f"{markdown_table(r['categories'])}\n\n{markdown_table(r['task_threads'])}")
    table = "\n\n".join(parts)
    print(table)
    output_of(args, "core_seconds").write({"rounds": rounds}, table)
    return 0


def _ms(value: float | None) -> str:
    return "- (the sink stamps no latency)" if value is None else f"{value:.1f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
