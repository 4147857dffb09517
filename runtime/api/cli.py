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
import json
import logging
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from runtime.api.job_display import (
    checkpoint_rows,
    execute_with_progress,
    high_availability_line,
    restart_lines,
    started_from,
    summary_figures,
)

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
#: `run --mode`: the guarantee
RUN_MODES = ("exactly-once", "at-least-once")


def _run_mode(text: str) -> str:
    from checkpoint.modes import parse_mode
    from checkpoint.options import InvalidOptionError

    try:
        return parse_mode(text, accepted=RUN_MODES).name
    except InvalidOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None


def _demo_job(args: argparse.Namespace, rows: list[dict[str, Any]], *, unaligned: bool,
              storage: str | None) -> Any:
    from checkpoint.options import CheckpointingMode, RestartStrategy
    from runtime import StreamEnvironment
    from runtime.workloads.pageview import build_pageview

    env = StreamEnvironment(parallelism=args.parallelism, buffer_size=256, credits=8)
    env.enable_checkpointing(interval=args.interval, mode=CheckpointingMode.EXACTLY_ONCE,
                             unaligned=unaligned, tolerable_failures=100, storage=storage)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    build_pageview(env, rows, splits=args.parallelism)
    return env


#: the summary's job time, by executor: what its seconds are
JOB_TIME = {"sim": "job time (virtual)", "ray": "job time (wall, from the first deployment)"}
#: the demo's data, on crashes that never fire
SKEWED_APPS = (" the apps are skewed, so one count task handles far fewer records than the other and a crash "
               "planned late on it never fires;")


def cmd_demo(args: argparse.Namespace) -> int:
    from runtime import FaultPlan
    from runtime.workloads.pageview import pageview_rows

    rows = pageview_rows(args.records, args.apps, args.seed)
    env = _demo_job(args, rows, unaligned=args.unaligned, storage=args.checkpoint_dir)
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
    for line in restart_lines(result, args.crashes, why_fewer=SKEWED_APPS):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    comparison = _compare_with_aligned(args, rows, faults, result) if args.unaligned else None
    _print_checkpoint_dir(args.checkpoint_dir)
    ok = _exactly_once_check(rows, result)
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


def _compare_with_aligned(args: argparse.Namespace, rows: list[dict[str, Any]], faults: Any,
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
        runs["unaligned (sim)"] = _demo_job(args, rows, unaligned=True, storage=None).execute(
            "pageview", executor="sim", seed=args.seed, faults=faults)
    runs["aligned (sim)"] = _demo_job(args, rows, unaligned=False, storage=None).execute(
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
    except Exception as exc:  # the module's own code failed while it was imported
        raise UsageError(f"run: importing module {module_name!r} from {os.getcwd()} raised "
                         f"{type(exc).__name__}: {exc}") from exc
    if not hasattr(module, func_name):
        raise UsageError(f"run: module {module_name!r} has no function {func_name!r}")
    builder = getattr(module, func_name)
    if not callable(builder):
        raise UsageError(f"run: {target} is not callable (it is {type(builder).__name__} {builder!r:.80}); "
                         "name the function that builds the job")
    return builder


def _configure_checkpointing(env: Any, args: argparse.Namespace) -> None:
    """Apply --mode/--unaligned/--interval/--checkpoint-dir over what the builder configured
    (any of them, or --zookeeper, enables checkpointing)."""
    from checkpoint.modes import parse_mode

    changes: dict[str, Any] = {}
    if args.mode is not None:
        profile = parse_mode(args.mode, accepted=RUN_MODES, option="--mode")
        if args.unaligned and not profile.exactly_once:
            raise UsageError("run: --unaligned needs --mode exactly-once (unaligned checkpoints are exactly-once)")
        changes["mode"] = profile.mode
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
    from runtime.api.environment import StreamEnvironment

    _check_address(args, "run")
    builder = _load_builder(args.target)
    env = builder()
    if not isinstance(env, StreamEnvironment):
        raise UsageError(f"run: {args.target} returned {type(env).__name__ if env is not None else 'None'}; "
                         "it must return the StreamEnvironment it built the job on")
    if args.parallelism is not None:
        env.parallelism = args.parallelism
    _configure_checkpointing(env, args)
    if args.restore_from is not None:
        _restore(env, args.restore_from, job=args.target.partition(":")[2])
    if args.zookeeper is not None:
        cluster_id = f"run-{args.target}"
        env.set_high_availability("zookeeper", hosts=args.zookeeper, cluster_id=cluster_id)
        console.print(f"high availability: ZooKeeper at {args.zookeeper} (cluster {cluster_id}): checkpoint ids, "
                      "completed checkpoints and the coordinators' election live there", soft_wrap=True,
                      highlight=False, markup=False)
    kwargs: dict[str, Any] = {}
    kwargs.update(seed=args.seed, faults=FaultPlan.random(seed=args.seed, crashes=args.crashes))
    if args.address:
        kwargs["address"] = args.address
    result, _ = execute_with_progress(env, args.target.partition(":")[2], console, executor=args.executor, **kwargs)
    table = Table(title=f"{args.target} on {args.executor}")
    table.add_column("sink")
    table.add_column("committed records", justify="right")
    for sink in result.sink_names:
        table.add_row(sink, f"{len(result.output(sink)):,}")
    console.print(table)
    console.print(f"checkpoints completed: {len(result.completed_checkpoints)}, aborted: "
                  f"{len(result.aborted_checkpoints)}, restarts: {result.restarts}")
    for line in filter(None, [started_from(result), *restart_lines(result, args.crashes),
                              high_availability_line(result)]):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    _print_checkpoint_dir(env.checkpoint_config.storage)
    return 0


def _check_address(args: argparse.Namespace, command: str) -> None:
    """`--address` joins a Ray cluster: it means nothing to the simulator."""
    if args.address and args.executor != "ray":
        raise UsageError(f"{command}: --address {args.address} joins a Ray cluster: it needs --executor ray")


def _restore(env: Any, directory: str, job: str) -> None:
    """`run --restore-from DIR`: start from the newest valid checkpoint of `job` (the builder's
    name, as `run` names its jobs) in DIR, at the parallelism the job has now."""
    from checkpoint.io.tools import CheckpointToolError

    try:
        env.restore_from(directory, job_id=job)
    except CheckpointToolError as exc:
        raise UsageError(f"run: --restore-from {directory}: {exc}") from exc


def _print_checkpoint_dir(storage: str | None) -> None:
    if storage is not None:
        console.print(f"checkpoints are in {storage} (list them: barrierflow checkpoints ls {storage})", soft_wrap=True)


def cmd_zookeeper(args: argparse.Namespace) -> int:
    """`barrierflow zookeeper start|stop|status`: Debian's ZooKeeper on 127.0.0.1, by PID."""
    from checkpoint.io.zookeeper_server import DEFAULT_DIR, DEFAULT_PORT
    from checkpoint.io.zookeeper_server import main as zookeeper_main

    return zookeeper_main([args.action, str(args.dir or DEFAULT_DIR), str(args.port or DEFAULT_PORT)])


def _build_env(target: str, command: str) -> Callable[[], Any]:
    """A function building the job `target` (MODULE:FUNCTION) names, checked once."""
    from runtime.api.environment import StreamEnvironment

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

    if args.from_flink is not None:
        return _calibrate_from_flink(args.from_flink, args.output)
    if args.target is None:
        raise UsageError("calibrate: expected MODULE:FUNCTION, or --from-flink FILE|URL")
    _check_address(args, "calibrate")
    build = _build_env(args.target, "calibrate")
    env = build()
    if args.interval is not None:
        env.enable_checkpointing(interval=args.interval)
    options: dict[str, Any] = {}
    if args.address:
        options["address"] = args.address
    profile, result = calibrate(env, args.target.partition(":")[2], executor=args.executor, cores=args.cores,
                                calibrated={"target": args.target}, **options)
    profile.save(args.output)
    info = profile.calibrated
    full = (f", then {info['saturated_records']:,} at full speed in {info['saturated_seconds']} s"
            if "saturated_records" in info else "")
    console.print(f"calibrated {args.target} on {args.executor}: {info['records_in']:,} records in "
                  f"{info['seconds']} s{full}, {len(result.completed_checkpoints)} checkpoints, load average "
                  f"{info['load_average']}; profile written to {args.output}", soft_wrap=True)
    for warning in info.get("warnings", ()):
        console.print(f"warning: {warning}", soft_wrap=True, highlight=False, markup=False, style="yellow")
    return 0


def _calibrate_from_flink(source: str, output: str) -> int:
    """A profile from a Flink job: a REST document file, or a running job's REST URL
    (http://HOST:PORT/jobs/JOB_ID), read by `runtime.calibration.flink`."""
    import json
    import re
    import urllib.error

    from runtime.calibration.flink import collect_flink_rest, profile_from_flink
    from runtime.calibration.profile import ProfileError

    try:
        if source.startswith(("http://", "https://")):
            match = re.fullmatch(r"(https?://[^/]+)/jobs/([0-9a-f]{32})/?", source)
            if match is None:
                raise UsageError(f"calibrate: --from-flink: expected http://HOST:PORT/jobs/JOB_ID (a 32-digit hex "
                                 f"job id), got {source!r}")
            doc = collect_flink_rest(match.group(1), match.group(2))
        else:
            with open(source) as fh:
                doc = json.load(fh)
        profile = profile_from_flink(doc, source)
    except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
        if isinstance(exc, ProfileError):
            raise UsageError(f"calibrate: --from-flink: {exc}") from exc
        raise UsageError(f"calibrate: --from-flink: cannot read {source}: {exc}") from exc
    profile.save(output)
    console.print(f"calibrated Flink job {doc.get('job', '')!r} from {source}: {len(doc['checkpoints'])} checkpoints, "
                  f"{len(doc['vertices'])} vertices; profile written to {output}", soft_wrap=True, markup=False)
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
    for prediction in predictions:
        if prediction.failure is not None:
            console.print(f"variant {prediction.variant.name!r}: {prediction.failure}", soft_wrap=True,
                          highlight=False, markup=False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"variant": p.variant.name, "seconds": p.seconds, **p.figures, "failure": p.failure,
                        "saturated": p.saturated} for p in predictions], f, indent=2)
    return 1 if any(p.failure is not None and p.saturated is None for p in predictions) else 0


#: checkpoint interval `run` uses when it enables checkpointing and no --interval is given (seconds)
DEFAULT_INTERVAL = 0.1


#: a terminal control sequence (colours)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _error_exit_code(exc: BaseException) -> int:
    from checkpoint.options import InvalidOptionError
    from runtime.core.graph import JobGraphError

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
    demo.add_argument("--json", metavar="PATH",
                      help="also write the summary's figures, the phases seen and each restart to PATH "
                      "(default: none)")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", parents=[common],
                         help="run MODULE:FUNCTION (a function returning a StreamEnvironment)")
    run.add_argument("target", metavar="MODULE:FUNCTION",
                     help="module (imported from the current directory) and the function that builds the job")
    run.add_argument("--executor", default="sim", choices=["sim", "ray"],
                     help="sim (deterministic simulator, default) or ray")
    run.add_argument("--mode", type=_run_mode,
                     help="checkpointing mode: exactly-once or at-least-once (default: the builder's, else exactly-once)")
    run.add_argument("--unaligned", action="store_true", help="unaligned checkpoints (exactly-once only)")
    run.add_argument("--interval", type=_seconds,
                     help=f"checkpoint interval in seconds (default: the builder's, else {DEFAULT_INTERVAL} "
                     "when another checkpoint option is given)")
    run.add_argument("--parallelism", type=_positive, help="default subtasks per operator (default: the builder's)")
    run.add_argument("--checkpoint-dir", metavar="DIR",
                     help="keep checkpoints in this directory (default: the builder's storage, else memory)")
    run.add_argument("--restore-from", metavar="DIR",
                     help="start from the newest valid checkpoint of the job in this checkpoint directory, "
                     "with the job's parallelism now (default: from scratch)")
    run.add_argument("--zookeeper", metavar="HOSTS",
                     help="high availability: coordinators elected in ZooKeeper at HOSTS (host:port[,...]; "
                     "try it with 'barrierflow zookeeper start'), on either executor; an unreachable server "
                     "fails the run within 5 s; default: no HA")
    run.add_argument("--address", help="Ray cluster to join with --executor ray: its head's address HOST:PORT (e.g. "
                     "127.0.0.1:6379), from a node of that cluster; checkpoints then need storage every node "
                     "reaches (--checkpoint-dir s3://...); default: a local Ray started for the run")
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
    calibrate.add_argument("target", metavar="MODULE:FUNCTION", nargs="?",
                           help="module (imported from the current directory) and the function that builds the job; "
                           "the job should finish within 60 s, and runs once more at full speed (5 s of its records) "
                           "when its generators read at a rate; calibrate on an otherwise idle machine: whatever "
                           "else runs is measured as the job's cost")
    calibrate.add_argument("--from-flink", metavar="FILE|URL",
                           help="instead of running a job: read a Flink job's REST document (FILE) or its running "
                           "job's REST API (http://HOST:PORT/jobs/JOB_ID) into a profile")
    calibrate.add_argument("-o", "--output", required=True, metavar="PROFILE.json",
                           help="where to write the profile (readable JSON, editable; calibrated.warnings says "
                           "whether other processes contended with the measurement and which fitted costs the job "
                           "cannot keep up with, as the terminal does)")
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
                            help="predict a calibrated job under other settings (simulated, side by side)",
                            description="Predict a calibrated job under other settings on the simulator, each "
                            "variant beside the baseline. A variant that cannot keep up (its sources fall further "
                            "behind their rate window after window) is stopped within a few windows of virtual time "
                            "and named with the saturated resource; the other variants still report.")
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

    from checkpoint.io.tools import add_cli as add_checkpoint_commands

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
        if not sys.stderr.isatty():  # a user function's message may carry terminal colours
            text = _ANSI.sub("", text)
        if not isinstance(exc, UsageError):
            text = f"{type(exc).__name__}: {text} (--debug shows the traceback)"
        print(f"barrierflow: error: {text}", file=sys.stderr)
        return _error_exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
