"""`barrierflow run MODULE:FUNCTION` (a user's job, with the command line's checkpointing, restore
and high-availability options over the builder's) and `barrierflow zookeeper`."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from rich.table import Table

from runtime.api.job_display import execute_with_progress, high_availability_line, restart_lines, started_from
from runtime.cli.options import DEFAULT_INTERVAL, RUN_MODES, UsageError, console


def load_builder(target: str) -> Callable[[], Any]:
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


def configure_checkpointing(env: Any, args: argparse.Namespace) -> None:
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

    check_address(args, "run")
    builder = load_builder(args.target)
    env = builder()
    if not isinstance(env, StreamEnvironment):
        raise UsageError(f"run: {args.target} returned {type(env).__name__ if env is not None else 'None'}; "
                         "it must return the StreamEnvironment it built the job on")
    if args.parallelism is not None:
        env.parallelism = args.parallelism
    configure_checkpointing(env, args)
    if args.restore_from is not None:
        restore(env, args.restore_from, job=args.target.partition(":")[2])
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
    print_checkpoint_dir(env.checkpoint_config.storage)
    return 0


def check_address(args: argparse.Namespace, command: str) -> None:
    """`--address` joins a Ray cluster: it means nothing to the simulator."""
    if args.address and args.executor != "ray":
        raise UsageError(f"{command}: --address {args.address} joins a Ray cluster: it needs --executor ray")


def restore(env: Any, directory: str, job: str) -> None:
    """`run --restore-from DIR`: start from the newest valid checkpoint of `job` (the builder's
    name, as `run` names its jobs) in DIR, at the parallelism the job has now."""
    from checkpoint.io.tools import CheckpointToolError

    try:
        env.restore_from(directory, job_id=job)
    except CheckpointToolError as exc:
        raise UsageError(f"run: --restore-from {directory}: {exc}") from exc


def print_checkpoint_dir(storage: str | None) -> None:
    if storage is not None:
        console.print(f"checkpoints are in {storage} (list them: barrierflow checkpoints ls {storage})", soft_wrap=True)


def cmd_zookeeper(args: argparse.Namespace) -> int:
    """`barrierflow zookeeper start|stop|status`: Debian's ZooKeeper on 127.0.0.1, by PID."""
    from checkpoint.io.zookeeper_server import DEFAULT_DIR, DEFAULT_PORT
    from checkpoint.io.zookeeper_server import main as zookeeper_main

    return zookeeper_main([args.action, str(args.dir or DEFAULT_DIR), str(args.port or DEFAULT_PORT)])


def build_env(target: str, command: str) -> Callable[[], Any]:
    """A function building the job `target` (MODULE:FUNCTION) names, checked once."""
    from runtime.api.environment import StreamEnvironment

    builder = load_builder(target)

    def build() -> Any:
        env = builder()
        if not isinstance(env, StreamEnvironment):
            raise UsageError(f"{command}: {target} returned {type(env).__name__ if env is not None else 'None'}; "
                             "it must return the StreamEnvironment it built the job on")
        return env

    return build
