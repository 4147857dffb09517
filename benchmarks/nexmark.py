"""NexMark queries in every checkpoint mode: what each mode costs on a job of each shape.

    python -m benchmarks.nexmark [--query q0 q1 ...] [--modes MODE ...] [--executor sim ray]
                                 [--events N] [--skew RATIO] [--repeat N] [--out DIR] [--quick]
                                 [--flink] [--add-to PATH]

For every (executor, query, mode) two runs of the query's job (`benchmarks.nexmark_job`, where
latency, commit and throughput are defined), parallelism 2, checkpoints every 100 ms:

* a **latency run**: the events at `config.event_rate` (10,000 events/s) for `--seconds`, the first
  `warmup` seconds left out; latency p50/p99 from each event's creation to the completion of the
  checkpoint that committed its output, checkpoint duration p50/p99, alignment (the longest task
  alignment per checkpoint), persisted bytes (channel state) and state bytes per checkpoint;
* a **throughput run**: `--events` events at full speed; events per second.

Repeats (`--repeat N`, Ray: the simulator is deterministic and runs once) are interleaved: the
whole matrix once per repeat, each query's modes started at another one each time; a row holds
the median run's numbers (`modes_outcome.merge_runs`) and `*_spread` the [min, max] over the
runs. A wall-clock row (Flink's too) measured while other processes took a quarter of the CPU, or
at a load beyond the run's own CPU above the core count, is marked CONTENDED.

`--flink`: the same events (written once as Parquet, the file `python -m runtime.workloads.nexmark`
writes) through Flink SQL in the PyFlink peers venv, same modes, interval and parallelism
(`benchmarks.nexmark_flink`), a round of them after each round of ours (Ray shut down meanwhile),
rows `executor=flink-sql`, and Flink's output compared with the throughput run's committed output
(`flink_agreement`). Output: `nexmark.md`, `nexmark.json`, PNG plots and `report.html` in `--out`;
the JSON is also written after every run, marked `partial`, so a run stopped half-way keeps the
rows it finished; `--add-to PATH` also adds the rows to a `checkpoint_modes` JSON and rewrites its
table and report, so the NexMark queries sit next to its scenarios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.captions import machine_cell
from benchmarks.modes_outcome import (
    Combination,
    Outcome,
    failed_outcome,
    load_fields,
    measured_load,
    merge_runs,
    rotated,
)
from benchmarks.report import (
    add_output_arguments,
    at_least_one,
    local_checkpoint_dir,
    markdown_table,
    output_of,
    parse_args,
    spread,
    write_json,
)

EXECUTORS = ("sim", "ray")
MODES = ("none", "aligned", "unaligned", "aligned-timeout", "at-least-once")
PREFIX = "nexmark-"
#: fields reported with their [min, max] over the repeats
SPREAD_FIELDS = ("throughput", "latency_p50", "latency_p99", "checkpoint_duration_p50", "checkpoint_duration_p99")
TABLE_COLUMNS = ("executor", "query", "mode", "status", "throughput", "throughput_spread", "latency_p50", "latency_p99",
                 "latency_p99_spread", "checkpoint_duration_p50", "checkpoint_duration_p99", "alignment_time_p50",
                 "alignment_time_p99", "persisted_bytes_p50", "state_bytes_p50", "state_bytes", "checkpoints_completed", "results", "machine")
TABLE_UNITS = ("throughput in events/s (full-speed run); latencies in ms from an event's creation to the commit of "
               "its output; checkpoint durations and alignment (the longest task alignment per checkpoint) in ms "
               "(virtual on sim, wall on ray and flink-sql, Flink's from its REST API); "
               "bytes per checkpoint (median; state_bytes: the largest); results: Flink's output against ours; "
               "machine: the highest 1-minute load average, CONTENDED when other processes took a quarter of the "
               "CPU or the load beyond the run's own CPU exceeded the core count")


@dataclass(frozen=True)
class Profile:
    """Sizes of one executor's runs: `seconds` of events at the NexMark rate (latency run),
    `events` at full speed (throughput run), `warmup` s left out, `lead` s from submission to the
    schedule's start (Ray: the actors start meanwhile)."""

    seconds: float
    events: int
    warmup: float
    lead: float = 0.0
    interval: float = 0.1
    alignment_timeout: float = 0.01
    parallelism: int = 2


PROFILES: dict[tuple[str, bool], Profile] = {
    ("sim", True): Profile(seconds=1.0, events=10_000, warmup=0.3),
    ("sim", False): Profile(seconds=5.0, events=1_000_000, warmup=0.5),
    ("ray", True): Profile(seconds=3.0, events=100_000, warmup=1.0, lead=2.0),
    ("ray", False): Profile(seconds=8.0, events=1_000_000, warmup=1.5, lead=3.0),
}


def plan(executors: Sequence[str], queries: Sequence[str], modes: Sequence[str], parallelism: int) -> list[Combination]:
    return [Combination(e, PREFIX + q, m, parallelism) for e in executors for q in queries for m in modes]


def run_combination(combo: Combination, profile: Profile, config: Any, events: int,
                    ray_options: dict[str, Any] | None = None) -> Outcome:
    """The latency run and the full-speed run of (query, mode), summarised (`ray_options`: more
    options of the Ray executor, e.g. its `slots_per_worker`)."""
    from benchmarks.nexmark_job import build_job, make_env, on_time, summarise
    from runtime.workloads.nexmark.queries import QUERIES

    query = QUERIES[combo.scenario.removeprefix(PREFIX)]
    rate = float(config.event_rate)
    latency_events = int(rate * profile.seconds)
    started = time.perf_counter()

    def execute(count: int, rate: float | None, anchor: float | None) -> Any:
        def run(storage: str | None) -> Any:
            env = make_env(combo.mode, parallelism=combo.parallelism, interval=profile.interval,
                           alignment_timeout=profile.alignment_timeout, storage=storage)
            build_job(env, query, config, count, rate=rate, anchor=anchor)
            name = f"nexmark-{combo.executor}-{query.name}-{combo.mode}"
            if combo.executor == "sim":
                return env.execute(name, executor="sim", seed=1)
            return env.execute(name, executor="ray", **(ray_options or {}))
        if combo.executor == "sim":
            return run(None)
        with local_checkpoint_dir() as storage:
            return run(storage)

    if combo.executor == "sim":
        anchor, latency_run = 0.0, execute(latency_events, rate, 0.0)
    else:
        latency_run, anchor = on_time(lambda at: execute(latency_events, rate, at), profile.lead,
                                      f"{combo.scenario}/{combo.mode}")
    throughput_run = execute(events, None, None)
    outcome = summarise(combo, latency_run, throughput_run, config=config, anchor=anchor, warmup=profile.warmup,
                        events=latency_events, rate=rate, throughput_events=events)
    outcome.row["query"] = query.name
    outcome.row["throughput_events"] = events
    outcome.wall_s = time.perf_counter() - started
    outcome.output = throughput_run  # type: ignore[attr-defined]  (compared with Flink's, then dropped)
    return outcome


def with_spread(merged: Outcome, runs: Sequence[Outcome]) -> Outcome:
    """`merged` (a `merge_runs` result) with `<field>_spread` = [min, max] over the runs that have it."""
    row = dict(merged.row)
    row["query"] = runs[0].row.get("query") or row["scenario"].removeprefix(PREFIX)
    for name in ("state_bytes_p50", "output_rows", "throughput_events"):
        row[name] = runs[0].row.get(name)
    for name in SPREAD_FIELDS:
        row[f"{name}_spread"] = spread((o.row for o in runs), name)
    return replace(merged, row=row)


def merged_runs(combos: Sequence[Combination],
                runs: dict[Combination, list[Outcome]]) -> list[tuple[Outcome, list[Outcome]]]:
    """Each combination that has run: its merged row (with spreads) and its runs."""
    return [(with_spread(merge_runs(runs[c]), runs[c]), runs[c]) for c in combos if runs.get(c)]


def run_matrix(combos: Sequence[Combination], profiles: dict[str, Profile], config: Any, events: dict[str, int],
               repeat: int, on_run: Any = None, on_progress: Any = None,
               after_round: Any = None) -> list[tuple[Outcome, list[Outcome]]]:
    """Every combination, `repeat` times for wall-clock executors (interleaved, modes rotated).
    `on_run(combo, outcome)` sees each run with its output; `on_progress(merged)` the merged rows
    so far (`merged_runs`) after each run; `after_round(r)` runs after round `r`, with Ray shut
    down (a peer's round then has the machine to itself)."""
    runs: dict[Combination, list[Outcome]] = {c: [] for c in combos}
    for r in range(repeat):
        schedule = [c for c in rotated(combos, r) if r == 0 or c.executor != "sim"]
        ray_started = False
        try:
            for i, combo in enumerate(schedule):
                print(f"nexmark: [{i + 1}/{len(schedule)}] {combo.label}"
                      + (f" (repeat {r + 1}/{repeat})" if repeat > 1 else ""), flush=True)
                try:
                    if combo.executor == "ray" and not ray_started:
                        from runtime.ray.cluster import ensure_ray

                        ray_started = ensure_ray()
                    with measured_load(combo) as machine:
                        outcome = run_combination(combo, profiles[combo.executor], config, events[combo.executor])
                    outcome.row.update(load_fields(machine.result if machine is not None else None))
                except Exception as exc:  # a row saying why, never made-up numbers
                    if os.environ.get("BARRIERFLOW_BENCH_DEBUG"):
                        traceback.print_exc()
                    outcome = failed_outcome(combo, exc)
                    outcome.row["query"] = combo.scenario.removeprefix(PREFIX)
                if on_run is not None:
                    on_run(combo, outcome)
                outcome.output = None  # type: ignore[attr-defined]
                runs[combo].append(outcome)
                if on_progress is not None:
                    on_progress(merged_runs(combos, runs))
        finally:
            if ray_started:
                import ray

                ray.shutdown()
        if after_round is not None:
            after_round(r)
    return merged_runs(combos, runs)


def shown(row: dict[str, Any], column: str) -> Any:
    if column == "machine":
        return machine_cell(row)
    value = row.get(column)
    if column.endswith("_spread") and value:
        return f"{value[0]:,.4g}–{value[1]:,.4g}" if max(value) < 1000 else f"{value[0]:,.0f}–{value[1]:,.0f}"
    return value


def render_table(rows: Sequence[dict[str, Any]]) -> str:
    return TABLE_UNITS + "\n\n" + markdown_table([{c: shown(r, c) for c in TABLE_COLUMNS} for r in rows],
                                                 TABLE_COLUMNS)


def payload_of(merged: Sequence[tuple[Outcome, list[Outcome]]], extra_rows: Sequence[dict[str, Any]],
               args: dict[str, Any], config: Any) -> dict[str, Any]:
    from benchmarks.modes_table import UNITS

    outcomes = [o for o, _ in merged]
    return {
        "benchmark": "nexmark",
        "rows": [o.row for o in outcomes] + list(extra_rows),
        "runs": [[r.row for r in runs] for _, runs in merged],
        "units": {**UNITS, "throughput": "events/s (full-speed run)",
                  "latency_*": "ms from an event's creation to the completion of the checkpoint committing its output"},
        "series": {"/".join((o.row["executor"], o.row["scenario"], o.row["mode"])):
                   {"latency_cdf": o.latency_cdf, "checkpoints": o.checkpoints, "timeline": None, "phases": None}
                   for o in outcomes},
        "config": config.to_dict(),
        "profiles": {f"{e}{'-quick' if q else ''}": vars(p) for (e, q), p in PROFILES.items()},
        "args": args,
    }


def write_all(payload: dict[str, Any], out_dir: str, json_path: str, plots: bool) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    write_json(json_path, payload)
    table = os.path.join(out_dir, "nexmark.md")
    with open(table, "w") as fh:
        fh.write(render_table(payload["rows"]) + "\n")
    files = [json_path, table]
    if plots:
        from benchmarks.html_report import write_report
        from benchmarks.plots import make_plots

        files += make_plots(payload, out_dir)
        files.append(write_report(payload, out_dir, columns=TABLE_COLUMNS, units=TABLE_UNITS))
    return files


def add_to(path: str, rows: Sequence[dict[str, Any]], series: dict[str, Any], plots: bool) -> list[str]:
    """Add the NexMark rows (and their series) to the `checkpoint_modes` JSON at `path` and rewrite
    its table and report: the queries next to its scenarios."""
    from benchmarks.modes_table import write_outputs

    with open(path) as fh:
        payload = json.load(fh)
    payload["rows"] = [r for r in payload["rows"] if not str(r.get("scenario", "")).startswith(PREFIX)
                       and r.get("executor") != "flink-sql"] + list(rows)
    payload.setdefault("series", {}).update(series)
    return write_outputs(payload, path, os.path.dirname(path) or ".", plots=plots)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from runtime.workloads.nexmark.queries import QUERIES

    add_output_arguments(parser, "nexmark", quick_help="small runs (the simulator's matrix in a few minutes on 2 cores)")
    parser.add_argument("--query", nargs="+", choices=list(QUERIES), default=list(QUERIES), metavar="Q",
                        help=f"queries ({', '.join(QUERIES)}); default all")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), metavar="MODE",
                        help=f"checkpoint modes ({', '.join(MODES)}); default all")
    parser.add_argument("--executor", nargs="+", choices=EXECUTORS, default=["sim"],
                        help="sim (default) and/or ray")
    parser.add_argument("--events", type=int, default=None,
                        help="events of each full-speed run (default: 1,000,000; 10,000 on sim and 100,000 on Ray "
                             "with --quick)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of events at the NexMark rate in each latency run (default: the profile's)")
    parser.add_argument("--skew", type=int, default=None, metavar="RATIO",
                        help="hot-key ratio of auctions, sellers and bidders (NexmarkConfig.with_hot_ratio; default: "
                             "NexMark's 2, 4, 4)")
    parser.add_argument("--repeat", type=at_least_one, default=1, metavar="N",
                        help="runs per wall-clock row, interleaved; medians with spreads (default 1)")
    parser.add_argument("--flink", action="store_true",
                        help="also run the queries in Flink SQL (the PyFlink peers venv) over the same events and "
                             "compare its results with ours")
    parser.add_argument("--add-to", metavar="PATH", default=None,
                        help="also add the rows to this checkpoint_modes JSON and rewrite its table and report.html")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots and the HTML report")


def run_from_args(args: argparse.Namespace) -> int:
    from runtime.workloads.nexmark.config import NexmarkConfig

    config = NexmarkConfig() if args.skew is None else NexmarkConfig().with_hot_ratio(args.skew)
    profiles = {e: PROFILES[(e, args.quick)] for e in args.executor}
    if args.seconds is not None:
        profiles = {e: replace(p, seconds=args.seconds) for e, p in profiles.items()}
    events = {e: args.events or p.events for e, p in profiles.items()}
    combos = plan(args.executor, args.query, args.modes, 2)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    flink_rows: list[dict[str, Any]] = []
    #: per query, the committed output of its first full-speed run on the first executor: a run
    #: without failures commits the same rows in every mode, and one copy of 1M events' output is enough
    ours: dict[str, list[dict[str, Any]]] = {}

    def keep_output(combo: Combination, outcome: Outcome) -> None:
        result = getattr(outcome, "output", None)
        query = combo.scenario.removeprefix(PREFIX)
        if args.flink and result is not None and combo.executor == args.executor[0] and query not in ours:
            from benchmarks.nexmark_flink import FLINK_QUERIES
            from benchmarks.nexmark_job import query_output

            if query in FLINK_QUERIES:
                ours[query] = query_output(result)

    settings = {k: v for k, v in vars(args).items() if k != "func"}
    out = output_of(args, "nexmark")
    merged: list[tuple[Outcome, list[Outcome]]] = []

    def summary() -> dict[str, Any]:
        payload = payload_of(merged, flink_rows, settings, config)
        payload["total_wall_s"] = round(time.perf_counter() - started, 1)
        payload["load_average"] = (f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
                                   f"(1-minute, {os.cpu_count()} cores)")
        return payload

    def save_progress(ray_rows: Any = None, flink: Any = None) -> None:
        # a stopped run keeps every row finished so far
        if ray_rows is not None:
            merged[:] = ray_rows
        if flink is not None:
            flink_rows[:] = flink
        write_json(out.json_path, {**summary(), "partial": "the run has not finished: rows so far"})

    if not args.flink:
        merged[:] = run_matrix(combos, profiles, config, events, args.repeat, on_run=keep_output,
                               on_progress=save_progress)
    else:
        from benchmarks.nexmark_flink import FlinkRounds

        with FlinkRounds(args.query, args.modes, config, events[args.executor[0]], repeat=args.repeat,
                         ours=ours) as flink:
            def flink_round(r: int) -> None:
                flink.run_round(r)
                save_progress(flink=flink.rows())

            merged[:] = run_matrix(combos, profiles, config, events, args.repeat, on_run=keep_output,
                                   on_progress=save_progress, after_round=flink_round)
            flink_rows[:] = flink.rows()
    payload = summary()
    files = write_all(payload, args.out, out.json_path, plots=not args.no_plots)
    if args.add_to:
        files += add_to(args.add_to, payload["rows"], payload["series"], plots=not args.no_plots)
    print(render_table(payload["rows"]))
    print(f"\n{len(combos)} combinations in {payload['total_wall_s']} s (load average {payload['load_average']}); "
          f"wrote {', '.join(files)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nexmark", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parse_args(parser, argv)
    if args.events is not None and args.events < 10:
        parser.error(f"--events must be an integer >= 10, got {args.events}")
    return run_from_args(args)


if __name__ == "__main__":
    # run the copy imported under the package name, so the job's classes pickle by reference
    from benchmarks.nexmark import main as _main

    sys.exit(_main())
