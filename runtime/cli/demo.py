"""`barrierflow demo`: the page-view job with checkpoints and injected crashes, its summary and
the exactly-once check of what it committed."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Any

from rich.table import Table

from runtime.api.job_display import checkpoint_rows, execute_with_progress, restart_lines, summary_figures
from runtime.cli.options import console
from runtime.cli.run import print_checkpoint_dir


def demo_job(args: argparse.Namespace, rows: list[dict[str, Any]], *, unaligned: bool,
              storage: str | None) -> Any:
    from runtime import StreamEnvironment
    from runtime.workloads.pageview import build_pageview
    from vocabulary.options import CheckpointingMode, RestartStrategy

    env = StreamEnvironment(parallelism=args.parallelism, buffer_size=256, credits=8)
    env.enable_checkpointing(interval=args.interval, mode=CheckpointingMode.EXACTLY_ONCE,
                             unaligned=unaligned, tolerable_failures=100, storage=storage)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    build_pageview(env, rows, splits=args.parallelism)
    return env


#: the summary's job time, by executor: what its seconds are
JOB_TIME = {"sim": "job time (virtual)", "ray": "job time (wall, from the first deployment)"}


def cmd_demo(args: argparse.Namespace) -> int:
    from runtime import FaultPlan
    from runtime.workloads.pageview import pageview_rows

    rows = pageview_rows(args.records, args.apps, args.seed)
    env = demo_job(args, rows, unaligned=args.unaligned, storage=args.checkpoint_dir)
    faults = FaultPlan.random(seed=args.seed, crashes=args.crashes)
    mode = "unaligned" if args.unaligned else "aligned"
    console.print(
        f"[bold]barrierflow demo[/bold]: page-view job, {args.records:,} records, parallelism "
        f"{args.parallelism}, {mode} checkpoints every {args.interval}s, {args.crashes} injected "
        f"crash(es), executor={args.executor}, seed={args.seed}", soft_wrap=True
    )
    started = time.perf_counter()
    result, progress = execute_with_progress(env, "pageview", console, executor=args.executor, seed=args.seed,
                                             faults=faults)
    wall = time.perf_counter() - started
    figures = summary_figures(result)
    summary = Table(title="summary")
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    summary.add_row("records read (incl. replays)", f"{figures['records_read']:,}")
    summary.add_row("records committed", f"{figures['records_committed']:,}")
    summary.add_row("wall time", f"{wall:,.2f} s")
    summary.add_row(JOB_TIME[args.executor], f"{figures['job_time_s']:,.4f} s")
    summary.add_row("injected crashes (planned)", f"{args.crashes:,}")
    summary.add_row("restarts (failovers)", f"{figures['restarts']:,}")
    for name, value in checkpoint_rows(figures).items():
        summary.add_row(name, value)
    aborted = [c for c in result.checkpoints if not c.completed]
    reasons = Counter(str(c.failure_reason.value) for c in aborted if c.failure_reason)
    if reasons:
        summary.add_row("abort reasons", ", ".join(f"{r}: {n:,}" for r, n in sorted(reasons.items())))
    console.print(summary)
    for line in restart_lines(result, args.crashes):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    comparison = compare_with_aligned(args, rows, faults, result) if args.unaligned else None
    print_checkpoint_dir(args.checkpoint_dir)
    ok = exactly_once_check(rows, result)
    console.print("[green]exactly-once check passed[/green]: every app's committed counts are exactly "
                  "1..n for its n page views" if ok else "[red]exactly-once check FAILED[/red]", soft_wrap=True)
    if args.json:
        report = {"executor": args.executor, "seed": args.seed, "records": args.records,
                  "unaligned": args.unaligned, "injected_crashes": args.crashes, "wall_time_s": wall,
                  **figures, "failures": list(result.failures),
                  "restored_checkpoints": list(result.restored_checkpoints), "phases": progress.phases,
                  "exactly_once": ok, "compared_with_aligned": comparison}
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0 if ok else 1


def compare_with_aligned(args: argparse.Namespace, rows: list[dict[str, Any]], faults: Any,
                          result: Any) -> dict[str, dict[str, Any]]:
    """What unaligned changed: the same job, seed and crashes with aligned checkpoints. The
    baseline runs on the simulator (seconds; a second Ray run would double the demo); after a Ray
    run the unaligned job runs on the simulator too, so the two sim columns compare like with like."""
    runs = {f"unaligned ({args.executor}, this run)": result}
    note = "aligned baseline: same job, seed and crashes on the simulator (virtual time)"
    if args.executor != "sim":
        note += "; the unaligned job ran there too, as Ray's wall-clock times do not compare with virtual ones"
    console.print(f"{note}...", soft_wrap=True, highlight=False, markup=False)
    if args.executor != "sim":
        runs["unaligned (sim)"] = demo_job(args, rows, unaligned=True, storage=None).execute(
            "pageview", executor="sim", seed=args.seed, faults=faults)
    runs["aligned (sim)"] = demo_job(args, rows, unaligned=False, storage=None).execute(
        "pageview", executor="sim", seed=args.seed, faults=faults)
    figures = {name: summary_figures(run) for name, run in runs.items()}
    shown = {name: checkpoint_rows(f) for name, f in figures.items()}
    table = Table(title="what unaligned changed")
    table.add_column("metric")
    for name in runs:
        table.add_column(name, justify="right")
    for metric in shown[next(iter(runs))]:
        table.add_row(metric, *(shown[name].get(metric, "-") for name in runs))
    console.print(table)
    return figures


def exactly_once_check(rows: list[dict[str, Any]], result: Any) -> bool:
    expected = Counter(r["app"] for r in rows)
    got: dict[str, list[int]] = {}
    for record in result.output("pv"):
        got.setdefault(record["app"], []).append(record["count"])
    return all(sorted(got.get(app, [])) == list(range(1, n + 1)) for app, n in expected.items()) and set(
        got
    ) == set(expected)
