"""The `barrierflow` command line: `demo`, `run MODULE:FUNCTION`."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

console = Console()


def _pageview_rows(n: int, apps: int, seed: int) -> list[dict[str, Any]]:
    import random

    rng = random.Random(seed)
    weights = [1.0 / (k + 1) for k in range(apps)]
    names = [f"app{k}" for k in range(apps)]
    chosen = rng.choices(names, weights=weights, k=n)
    return [{"user": rng.randrange(10_000), "app": chosen[i], "url": f"/p/{i % 97}"} for i in range(n)]


def build_pageview(env: Any, rows: list[dict[str, Any]], splits: int = 2) -> None:
    """The seed-003 page-view job: source → map to app id → keyBy(app) → count → sink."""
    from operators import CollectSink
    from runtime.sim.workloads import CountPerKey

    (
        env.from_collection(rows, splits=splits)
        .map(lambda r: {"app": r["app"]}, name="to-app")
        .key_by("app")
        .process(CountPerKey("app"), name="count")
        .sink_to(CollectSink("pv"))
    )


def _progress_table(info: dict[str, Any], title: str) -> Table:
    table = Table(title=title, show_header=False)
    for key, value in info.items():
        table.add_row(key, str(value))
    return table


def cmd_demo(args: argparse.Namespace) -> int:
    from checkpoint.options import CheckpointingMode, RestartStrategy
    from runtime import FaultPlan, StreamEnvironment

    rows = _pageview_rows(args.records, args.apps, args.seed)
    env = StreamEnvironment(parallelism=args.parallelism, buffer_size=256, credits=8)
    env.enable_checkpointing(interval=args.interval, mode=CheckpointingMode.EXACTLY_ONCE,
                             unaligned=args.unaligned, tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    build_pageview(env, rows, splits=args.parallelism)
    faults = FaultPlan.random(seed=args.seed, crashes=args.crashes)
    console.print(
        f"[bold]barrierflow demo[/bold]: page-view job, {args.records} records, parallelism "
        f"{args.parallelism}, {'unaligned' if args.unaligned else 'aligned'} checkpoints every "
        f"{args.interval}s, {args.crashes} injected crash(es), executor={args.executor}, seed={args.seed}"
    )
    started = time.perf_counter()
    with Live(console=console, refresh_per_second=8, transient=True) as live:
        def progress(info: dict[str, Any]) -> None:
            wall = time.perf_counter() - started
            shown = dict(info)
            shown["records/s (wall)"] = f"{info['records in'] / wall:,.0f}" if wall > 0 else "-"
            live.update(_progress_table(shown, "running"))

        result = env.execute("pageview", executor=args.executor, seed=args.seed, faults=faults,
                             progress=progress)
    wall = time.perf_counter() - started
    completed = [c for c in result.checkpoints if c.completed]
    aborted = [c for c in result.checkpoints if not c.completed]
    durations = sorted(c.duration for c in completed)
    summary = Table(title="summary")
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    summary.add_row("records read (incl. replays)", f"{result.metrics.records_in:,}")
    summary.add_row("records committed", f"{len(result.output('pv')):,}")
    summary.add_row("wall time", f"{wall:.2f} s")
    summary.add_row("job time (virtual on sim)", f"{result.metrics.duration:.4f} s")
    summary.add_row("restarts", str(result.restarts))
    summary.add_row("checkpoints completed / aborted", f"{len(completed)} / {len(aborted)}")
    if durations:
        summary.add_row("checkpoint duration p50 / max", f"{durations[len(durations) // 2] * 1e3:.2f} / "
                        f"{durations[-1] * 1e3:.2f} ms")
        summary.add_row("alignment time max", f"{max(c.alignment_time for c in completed) * 1e3:.2f} ms")
    reasons = Counter(str(c.failure_reason.value) for c in aborted if c.failure_reason)
    if reasons:
        summary.add_row("abort reasons", ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items())))
    console.print(summary)
    ok = _exactly_once_check(rows, result)
    console.print("[green]exactly-once check passed[/green]: every app's committed counts are exactly "
                  "1..n for its n page views" if ok else "[red]exactly-once check FAILED[/red]")
    return 0 if ok else 1


def _exactly_once_check(rows: list[dict[str, Any]], result: Any) -> bool:
    expected = Counter(r["app"] for r in rows)
    got: dict[str, list[int]] = {}
    for record in result.output("pv"):
        got.setdefault(record["app"], []).append(record["count"])
    return all(sorted(got.get(app, [])) == list(range(1, n + 1)) for app, n in expected.items()) and set(
        got
    ) == set(expected)


def cmd_run(args: argparse.Namespace) -> int:
    from checkpoint.options import CheckpointingMode
    from runtime import FaultPlan

    module_name, _, func_name = args.target.partition(":")
    if not func_name:
        console.print(f"[red]expected MODULE:FUNCTION, got {args.target!r}[/red]")
        return 2
    try:
        builder = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        console.print(f"[red]cannot load {args.target!r}: {exc}[/red]")
        return 2
    env = builder()
    if args.parallelism is not None:
        env.parallelism = args.parallelism
    if args.interval is not None or args.mode is not None or args.unaligned:
        mode = CheckpointingMode.AT_LEAST_ONCE if args.mode == "at-least-once" else CheckpointingMode.EXACTLY_ONCE
        env.enable_checkpointing(interval=args.interval or 0.1, mode=mode, unaligned=args.unaligned)
    kwargs: dict[str, Any] = {}
    kwargs.update(seed=args.seed, faults=FaultPlan.random(seed=args.seed, crashes=args.crashes))
    if args.executor == "ray" and args.address:
        kwargs["address"] = args.address
    result = env.execute(func_name, executor=args.executor, **kwargs)
    table = Table(title=f"{args.target} on {args.executor}")
    table.add_column("sink")
    table.add_column("committed records", justify="right")
    for sink in result.sink_names:
        table.add_row(sink, f"{len(result.output(sink)):,}")
    console.print(table)
    console.print(f"checkpoints completed: {len(result.completed_checkpoints)}, aborted: "
                  f"{len(result.aborted_checkpoints)}, restarts: {result.restarts}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="barrierflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the page-view job with checkpoints and crashes, check exactly-once")
    demo.add_argument("--executor", default="ray", choices=["sim", "ray"],
                      help="ray (default: a local Ray is started and stopped) or sim (deterministic simulator)")
    demo.add_argument("--records", type=int, default=200_000)
    demo.add_argument("--apps", type=int, default=20)
    demo.add_argument("--parallelism", type=int, default=2)
    demo.add_argument("--interval", type=float, default=0.1)
    demo.add_argument("--unaligned", action="store_true")
    demo.add_argument("--crashes", type=int, default=2)
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", help="run MODULE:FUNCTION (a function returning a StreamEnvironment)")
    run.add_argument("target")
    run.add_argument("--executor", default="sim", choices=["sim", "ray"])
    run.add_argument("--mode", choices=["exactly-once", "at-least-once"])
    run.add_argument("--unaligned", action="store_true")
    run.add_argument("--interval", type=float)
    run.add_argument("--parallelism", type=int)
    run.add_argument("--address")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--crashes", type=int, default=0)
    run.set_defaults(func=cmd_run)

    from checkpoint.tools import add_cli as add_checkpoint_commands

    add_checkpoint_commands(sub)  # checkpoints ls | show | gc

    from benchmarks.checkpoint_modes import add_arguments as add_bench_arguments
    from benchmarks.checkpoint_modes import run_from_args as run_bench

    bench = sub.add_parser("bench", help="benchmark checkpoint modes (python -m benchmarks.checkpoint_modes)")
    add_bench_arguments(bench)
    bench.set_defaults(func=run_bench)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
