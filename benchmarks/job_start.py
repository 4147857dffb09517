"""What starting a job on Ray costs, with and without the actors an earlier job left.

    python -m benchmarks.job_start [--jobs 6] [--repeat 3] [--records 2000] [--quick]

In one driver connected to Ray, runs `--jobs` small page-view jobs (parallelism 2, aligned
checkpoints every 50 ms, `--records` records) one after the other, twice per round: with
`reuse_actors=False` (every job starts its two workers, coordinator, committer and in-memory
storage: five processes) and with the default (a job that ended cleanly leaves them to the next,
`runtime.ray.worker_pool`; the round starts with none kept). The two alternate, round after round.
For each job: its wall seconds (`execute` call to result) and the CPU seconds the whole machine
spent meanwhile (/proc/stat: every process, Ray's included). The table gives, per mode, the first
job and the median of the later ones, with their range over the rounds and the load average; the
plot draws every job of every round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.report import (
    add_output_arguments,
    add_sized_argument,
    at_least_one,
    load_line,
    markdown_table,
    parse_args,
    write_with_plot,
)
from runtime.calibration.machine_load import machine_cpu_seconds

MODES = {"nothing kept": False, "actors kept": True}


def run_job(records: int, reuse: bool) -> tuple[float, float]:
    """One page-view job on Ray: (wall seconds, machine CPU seconds)."""
    from operators import CollectSink, KeyedProcessFunction
    from runtime import CheckpointingMode, StreamEnvironment

    class CountPerKey(KeyedProcessFunction):
        def process_element(self, record: dict[str, Any], ctx: Any):
            count = ctx.value_state("count", default=0)
            count.update(count.value() + 1)
            yield {"app": ctx.key, "count": count.value()}

    env = StreamEnvironment(parallelism=2)
    env.enable_checkpointing(interval=0.05, mode=CheckpointingMode.EXACTLY_ONCE)
    env.from_collection([{"user": i, "app": f"app{i % 3}"} for i in range(records)], splits=2) \
       .key_by("app").process(CountPerKey(), name="count").sink_to(CollectSink("pv"))
    cpu, started = machine_cpu_seconds() or 0.0, time.perf_counter()
    result = env.execute("job-start", executor="ray", reuse_actors=reuse)
    wall, cpu = time.perf_counter() - started, (machine_cpu_seconds() or 0.0) - cpu
    if len(result.output("pv")) != records:
        raise RuntimeError(f"job-start: {len(result.output('pv'))} records committed, not {records}")
    return wall, cpu


def summary(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per mode: the first job's and the later jobs' median wall and CPU seconds (the median over
    the rounds, with the range of the rounds' values)."""
    rows = []
    for mode in MODES:
        rounds = [r for r in runs if r["mode"] == mode]
        row: dict[str, Any] = {"mode": mode, "rounds": len(rounds)}
        for what, pick in (("first", lambda jobs: jobs[:1]), ("later", lambda jobs: jobs[1:])):
            for field in ("wall_s", "cpu_s"):
                values = [statistics.median(v) for r in rounds if (v := [j[field] for j in pick(r["jobs"])])]
                if values:
                    row[f"{what} {field}"] = statistics.median(values)
                    row[f"{what} {field} range"] = f"{min(values):.2f}-{max(values):.2f}"
        rows.append(row)
    return rows


def plot(runs: Sequence[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for run in runs:
        color = "tab:red" if run["mode"] == "nothing kept" else "tab:blue"
        ax.plot(range(1, len(run["jobs"]) + 1), [j["wall_s"] for j in run["jobs"]], "o-", color=color, alpha=0.6,
                label=run["mode"])
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys())
    ax.set_xlabel("job in the driver")
    ax.set_ylabel("wall seconds")
    ax.set_title("Successive jobs on Ray, with and without the actors an earlier job left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sized_argument(parser, "--jobs", full=6, quick=2, help="jobs per mode and round")
    add_sized_argument(parser, "--repeat", full=3, quick=1, type=at_least_one, help="rounds")
    parser.add_argument("--records", type=int, default=2000, help="records per job (default 2000)")
    add_output_arguments(parser, "job_start", quick_help="2 jobs per mode, 1 round")
    args = parse_args(parser, argv)
    from runtime.ray.cluster import ensure_ray
    from runtime.ray.worker_pool import IDLE_SERVICES, IDLE_WORKERS, kill_quietly

    ensure_ray()
    load_before = os.getloadavg()
    runs = []
    for round_ in range(args.repeat):
        for mode, reuse in MODES.items():
            for actor in IDLE_WORKERS.clear() + IDLE_SERVICES.clear():  # each run starts with none kept
                kill_quietly(actor)
            jobs = [dict(zip(("wall_s", "cpu_s"), run_job(args.records, reuse))) for _ in range(args.jobs)]
            runs.append({"round": round_, "mode": mode, "jobs": jobs})
    rows = summary(runs)
    load = load_line(load_before)
    write_with_plot(args, "job_start", {"runs": runs, "rows": rows, "load": load, "records": args.records},
                    f"{markdown_table(rows)}\n\n{load}", lambda p: plot(runs, p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
