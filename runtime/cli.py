"""The `barrierflow` command line: `demo`, `run MODULE:FUNCTION`, `checkpoints`, `bench`,
`calibrate MODULE:FUNCTION`, `whatif`.

Conventions: a usage error (a bad option, a builder that cannot be loaded or returns no
environment) prints one `barrierflow: error: ...` line naming the option and exits 2; a job that
fails exits 1 with one such line; no traceback unless `--debug`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

console = Console()


class UsageError(Exception):
    """A bad command line: printed as one `barrierflow: error: ...` line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with the house error format: one line, naming the command, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.partition(" ")[2]
        hint = f" (see: {self.prog} --help)"
        self.exit(2, f"barrierflow: error: {command + ': ' if command else ''}{message}{hint}\n")


def _number(kind: type, minimum: float, unit: str, *, inclusive: bool) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {unit}, got {text!r}") from None
        if value < minimum or (value == minimum and not inclusive):
            bound = ">=" if inclusive else ">"
            raise argparse.ArgumentTypeError(f"must be {bound} {minimum:g} ({unit}), got {text!r}")
        return value

    return parse


_seconds = _number(float, 0, "a number of seconds", inclusive=False)
_positive = _number(int, 1, "a whole number", inclusive=True)
_count = _number(int, 0, "a whole number", inclusive=True)


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
                             unaligned=args.unaligned, tolerable_failures=100, storage=args.checkpoint_dir)
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
    _print_checkpoint_dir(args.checkpoint_dir)
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


def _load_builder(target: str) -> Callable[[], Any]:
    """`MODULE:FUNCTION`, the module imported from the current directory first (as `python -m`)."""
    module_name, _, func_name = target.partition(":")
    if not module_name or not func_name:
        raise UsageError(f"run: expected MODULE:FUNCTION (e.g. myjob:build), got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"run: cannot import module {module_name!r} from {os.getcwd()}: {exc}") from exc
    builder = getattr(module, func_name, None)
    if not callable(builder):
        raise UsageError(f"run: module {module_name!r} has no function {func_name!r}")
    return builder


def _configure_checkpointing(env: Any, args: argparse.Namespace) -> None:
    """Apply --mode/--unaligned/--interval/--checkpoint-dir over what the builder configured
    (any of them, or --zookeeper, enables checkpointing)."""
    from checkpoint.options import CheckpointingMode

    if args.unaligned and args.mode == "at-least-once":
        raise UsageError("run: --unaligned needs --mode exactly-once (unaligned checkpoints are exactly-once)")
    changes: dict[str, Any] = {}
    if args.mode is not None:
        at_least_once = args.mode == "at-least-once"
        changes["mode"] = CheckpointingMode.AT_LEAST_ONCE if at_least_once else CheckpointingMode.EXACTLY_ONCE
    if args.unaligned:
        changes["unaligned"] = True
    if args.checkpoint_dir is not None:
        changes["storage"] = args.checkpoint_dir
    if args.interval is not None:
        changes["interval"] = args.interval
    if not changes and args.zookeeper is None:  # high availability is about checkpoints too
        return
    config = env.checkpoint_config
    if not config.enabled and "interval" not in changes:
        changes["interval"] = DEFAULT_INTERVAL
        console.print(f"checkpointing every {DEFAULT_INTERVAL} s (set --interval to change)")
    config = dataclasses.replace(config, **changes)
    config.validate()
    env.checkpoint_config = config


def cmd_run(args: argparse.Namespace) -> int:
    from runtime import FaultPlan
    from runtime.api import StreamEnvironment

    builder = _load_builder(args.target)
    env = builder()
    if not isinstance(env, StreamEnvironment):
        raise UsageError(f"run: {args.target} returned {type(env).__name__ if env is not None else 'None'}; "
                         "it must return the StreamEnvironment it built the job on")
    if args.parallelism is not None:
        env.parallelism = args.parallelism
    _configure_checkpointing(env, args)
    if args.zookeeper is not None:
        env.set_high_availability("zookeeper", hosts=args.zookeeper, cluster_id=f"run-{args.target}")
    kwargs: dict[str, Any] = {}
    kwargs.update(seed=args.seed, faults=FaultPlan.random(seed=args.seed, crashes=args.crashes))
    if args.executor == "ray" and args.address:
        kwargs["address"] = args.address
    result = env.execute(args.target.partition(":")[2], executor=args.executor, **kwargs)
    table = Table(title=f"{args.target} on {args.executor}")
    table.add_column("sink")
    table.add_column("committed records", justify="right")
    for sink in result.sink_names:
        table.add_row(sink, f"{len(result.output(sink)):,}")
    console.print(table)
    console.print(f"checkpoints completed: {len(result.completed_checkpoints)}, aborted: "
                  f"{len(result.aborted_checkpoints)}, restarts: {result.restarts}")
    _print_checkpoint_dir(env.checkpoint_config.storage)
    return 0


def _print_checkpoint_dir(storage: str | None) -> None:
    if storage is not None:
        console.print(f"checkpoints are in {storage} (list them: barrierflow checkpoints ls {storage})", soft_wrap=True)


def cmd_zookeeper(args: argparse.Namespace) -> int:
    """`barrierflow zookeeper start|stop|status`: Debian's ZooKeeper on 127.0.0.1, by PID."""
    from checkpoint.zookeeper_server import DEFAULT_DIR, DEFAULT_PORT
    from checkpoint.zookeeper_server import main as zookeeper_main

    return zookeeper_main([args.action, str(args.dir or DEFAULT_DIR), str(args.port or DEFAULT_PORT)])


def _build_env(target: str, command: str) -> Callable[[], Any]:
    """A function building the job `target` (MODULE:FUNCTION) names, checked once."""
    from runtime.api import StreamEnvironment

    builder = _load_builder(target)

    def build() -> Any:
        env = builder()
        if not isinstance(env, StreamEnvironment):
            raise UsageError(f"{command}: {target} returned {type(env).__name__ if env is not None else 'None'}; "
                             "it must return the StreamEnvironment it built the job on")
        return env

    return build


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Run the job briefly for real and write the fitted profile (`runtime.calibration`)."""
    from runtime.calibration.predict import calibrate

    build = _build_env(args.target, "calibrate")
    env = build()
    if args.interval is not None:
        env.enable_checkpointing(interval=args.interval)
    options: dict[str, Any] = {}
    if args.executor == "ray" and args.address:
        options["address"] = args.address
    profile, result = calibrate(env, args.target.partition(":")[2], executor=args.executor, cores=args.cores,
                                calibrated={"target": args.target}, **options)
    profile.save(args.output)
    info = profile.calibrated
    console.print(f"calibrated {args.target} on {args.executor}: {info['records_in']:,} records in "
                  f"{info['seconds']} s, {len(result.completed_checkpoints)} checkpoints, load average "
                  f"{info['load_average']}; profile written to {args.output}", soft_wrap=True)
    return 0


def _slow(text: str) -> tuple[str, float]:
    task, sep, factor = text.rpartition("=")
    try:
        value = float(factor)
    except ValueError:
        value = -1.0
    if not sep or not task or value <= 0:
        raise argparse.ArgumentTypeError(f"expected TASK=FACTOR (a task or vertex name and a factor > 0, "
                                         f"e.g. count[1]=3), got {text!r}")
    return task, value


def cmd_whatif(args: argparse.Namespace) -> int:
    """Predict the calibrated job under other settings, next to its baseline."""
    import json

    from runtime.calibration.profile import CostProfile, ProfileError
    from runtime.calibration.whatif import table, variants, what_if

    try:
        profile = CostProfile.load(args.profile)
    except ProfileError as exc:
        raise UsageError(f"whatif: --profile: {exc}") from exc
    target = args.job or profile.calibrated.get("target")
    if not target:
        raise UsageError(f"whatif: {args.profile} does not name the job it calibrated ('calibrated.target'); "
                         "give it with --job MODULE:FUNCTION")
    asked = variants(modes=args.mode or (), unaligned=args.unaligned, alignment_timeout=args.alignment_timeout,
                     debloat_target=args.debloat_target, parallelism=args.parallelism, interval=args.interval,
                     slow=dict(args.slow or ()))
    predictions = what_if(_build_env(target, "whatif"), target.partition(":")[2], profile, asked, seed=args.seed)
    rows = table(predictions)
    out = Table(title=f"what if: {target} (profile {args.profile}, simulated)")
    for i, name in enumerate(rows[0]):
        out.add_column(name, justify="left" if i == 0 else "right")
    for row in rows[1:]:
        out.add_row(*row)
    console.print(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"variant": p.variant.name, "seconds": p.seconds, **p.figures} for p in predictions], f, indent=2)
    return 0


#: checkpoint interval `run` uses when it enables checkpointing and no --interval is given (seconds)
DEFAULT_INTERVAL = 0.1


def _error_exit_code(exc: BaseException) -> int:
    from checkpoint.options import InvalidOptionError
    from runtime.graph import JobGraphError

    return 2 if isinstance(exc, UsageError | InvalidOptionError | JobGraphError) else 1


def build_parser() -> argparse.ArgumentParser:
    """The `barrierflow` argument parser (every option has help with its unit and default)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser = _Parser(prog="barrierflow", description=__doc__, parents=[common],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", parents=[common],
                          help="run the page-view job with checkpoints and crashes, check exactly-once")
    demo.add_argument("--executor", default="ray", choices=["sim", "ray"],
                      help="ray (default: a local Ray is started and stopped) or sim (deterministic simulator)")
    demo.add_argument("--records", type=_positive, default=200_000, help="page views to read (default: %(default)s)")
    demo.add_argument("--apps", type=_positive, default=20, help="distinct apps, the key (default: %(default)s)")
    demo.add_argument("--parallelism", type=_positive, default=2, help="subtasks per operator (default: %(default)s)")
    demo.add_argument("--interval", type=_seconds, default=0.1,
                      help="checkpoint interval in seconds (default: %(default)s)")
    demo.add_argument("--unaligned", action="store_true", help="unaligned checkpoints (default: aligned)")
    demo.add_argument("--crashes", type=_count, default=2, help="task crashes to inject (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the faults and the data (default: %(default)s)")
    demo.add_argument("--checkpoint-dir", metavar="DIR",
                      help="keep checkpoints in this directory (default: in memory)")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", parents=[common],
                         help="run MODULE:FUNCTION (a function returning a StreamEnvironment)")
    run.add_argument("target", metavar="MODULE:FUNCTION",
                     help="module (imported from the current directory) and the function that builds the job")
    run.add_argument("--executor", default="sim", choices=["sim", "ray"],
                     help="sim (deterministic simulator, default) or ray")
    run.add_argument("--mode", choices=["exactly-once", "at-least-once"],
                     help="checkpointing mode (default: the builder's, else exactly-once)")
    run.add_argument("--unaligned", action="store_true", help="unaligned checkpoints (exactly-once only)")
    run.add_argument("--interval", type=_seconds,
                     help=f"checkpoint interval in seconds (default: the builder's, else {DEFAULT_INTERVAL} "
                     "when another checkpoint option is given)")
    run.add_argument("--parallelism", type=_positive, help="default subtasks per operator (default: the builder's)")
    run.add_argument("--checkpoint-dir", metavar="DIR",
                     help="keep checkpoints in this directory (default: the builder's storage, else memory)")
    run.add_argument("--zookeeper", metavar="HOSTS",
                     help="high availability: coordinators elected in ZooKeeper at HOSTS (host:port[,...]; "
                     "try it with 'barrierflow zookeeper start'); default: no HA")
    run.add_argument("--address", help="Ray cluster to join, e.g. ray://host:10001 (default: a local Ray)")
    run.add_argument("--seed", type=int, default=0, help="simulator seed and fault seed (default: %(default)s)")
    run.add_argument("--crashes", type=_count, default=0, help="task crashes to inject (default: %(default)s)")
    run.set_defaults(func=cmd_run)

    zookeeper = sub.add_parser("zookeeper", parents=[common],
                               help="start, stop or query a local ZooKeeper for trying high availability")
    zookeeper.add_argument("action", choices=["start", "stop", "status"])
    zookeeper.add_argument("--dir", metavar="DIR", default=None,
                           help="data directory, holds its PID and log (default: TMPDIR/barrierflow-zookeeper)")
    zookeeper.add_argument("--port", type=_positive, default=None,
                           help="client port, bound to 127.0.0.1 only (default: 2181)")
    zookeeper.set_defaults(func=cmd_zookeeper)

    calibrate = sub.add_parser("calibrate", parents=[common],
                               help="run MODULE:FUNCTION briefly for real and fit the simulator's cost model to it")
    calibrate.add_argument("target", metavar="MODULE:FUNCTION",
                           help="module (imported from the current directory) and the function that builds the job; "
                           "the job should finish within 60 s")
    calibrate.add_argument("-o", "--output", required=True, metavar="PROFILE.json",
                           help="where to write the profile (readable JSON, editable)")
    calibrate.add_argument("--executor", default="ray", choices=["ray", "sim"],
                           help="ray (default: the real run) or sim (the simulator's default model, for trying it)")
    calibrate.add_argument("--interval", type=_seconds,
                           help="checkpoint interval in seconds (default: the builder's, else 0.05); the "
                           "calibration run takes unaligned checkpoints whatever the builder's mode")
    calibrate.add_argument("--cores", type=_positive,
                           help="cores the tasks share (default: this machine's CPUs on ray, none on sim)")
    calibrate.add_argument("--address", help="Ray cluster to join (default: a local Ray)")
    calibrate.set_defaults(func=cmd_calibrate)

    whatif = sub.add_parser("whatif", parents=[common],
                            help="predict a calibrated job under other settings (simulated, side by side)")
    whatif.add_argument("--profile", required=True, metavar="PROFILE.json", help="a profile from 'barrierflow calibrate'")
    whatif.add_argument("--job", metavar="MODULE:FUNCTION", help="the job (default: the one the profile calibrated)")
    whatif.add_argument("--mode", nargs="+", choices=["none", "aligned", "unaligned", "at-least-once"],
                        help="one variant per checkpointing mode")
    whatif.add_argument("--unaligned", action="store_true", help="a variant with unaligned checkpoints")
    whatif.add_argument("--alignment-timeout", type=_seconds, metavar="S",
                        help="a variant: aligned checkpoints that turn unaligned after S seconds of alignment")
    whatif.add_argument("--debloat-target", type=_seconds, metavar="S",
                        help="a variant with buffer debloating to S seconds of in-flight data")
    whatif.add_argument("--parallelism", type=_positive, metavar="N", help="a variant with parallelism N")
    whatif.add_argument("--interval", type=_seconds, metavar="S", help="a variant checkpointing every S seconds")
    whatif.add_argument("--slow", type=_slow, action="append", metavar="TASK=F",
                        help="a variant where task or vertex TASK is F times slower (repeat for several tasks)")
    whatif.add_argument("--seed", type=int, default=1, help="simulator seed (default: %(default)s)")
    whatif.add_argument("--json", metavar="PATH", help="also write the predictions as JSON")
    whatif.set_defaults(func=cmd_whatif)

    from checkpoint.tools import add_cli as add_checkpoint_commands

    add_checkpoint_commands(sub)  # checkpoints ls | show | gc

    from benchmarks.checkpoint_modes import add_arguments as add_bench_arguments
    from benchmarks.checkpoint_modes import run_from_args as run_bench

    bench = sub.add_parser("bench", parents=[common],
                           help="benchmark checkpoint modes (python -m benchmarks.checkpoint_modes)")
    add_bench_arguments(bench)
    bench.set_defaults(func=run_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # kazoo logs every failed connection attempt; the error that ends the run names them all
    logging.getLogger("kazoo").setLevel(logging.DEBUG if args.debug else logging.CRITICAL)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("barrierflow: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        if not isinstance(exc, UsageError):
            text = f"{type(exc).__name__}: {text} (--debug shows the traceback)"
        print(f"barrierflow: error: {text}", file=sys.stderr)
        return _error_exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
