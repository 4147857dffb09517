"""The `barrierflow` argument parser: every sub-command, every option with its unit and default."""

from __future__ import annotations

import argparse

from runtime.cli.demo import cmd_demo
from runtime.cli.options import DEFAULT_INTERVAL, Parser, count, positive, run_mode, seconds, slow_task
from runtime.cli.run import cmd_run, cmd_zookeeper
from runtime.cli.tuning import cmd_calibrate, cmd_whatif

#: the command's description (`barrierflow --help`)
DESCRIPTION = """The `barrierflow` command line: `demo`, `run MODULE:FUNCTION`, `checkpoints`, `bench`,
`calibrate MODULE:FUNCTION`, `whatif`.

Conventions: a usage error (a bad option, a builder that cannot be loaded or returns no
environment) prints one `barrierflow: error: ...` line naming the option and exits 2; a job that
fails exits 1 with one such line; no traceback unless `--debug`.
"""


def build_parser() -> argparse.ArgumentParser:
    """The `barrierflow` argument parser (every option has help with its unit and default)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser = Parser(prog="barrierflow", description=DESCRIPTION, parents=[common],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", parents=[common],
                          help="run the page-view job with checkpoints and crashes, check exactly-once")
    demo.add_argument("--executor", default="ray", choices=["sim", "ray"],
                      help="ray (default: a local Ray is started and stopped) or sim (deterministic simulator)")
    demo.add_argument("--records", type=positive, default=200_000, help="page views to read (default: %(default)s)")
    demo.add_argument("--apps", type=positive, default=20, help="distinct apps, the key (default: %(default)s)")
    demo.add_argument("--parallelism", type=positive, default=2, help="subtasks per operator (default: %(default)s)")
    demo.add_argument("--interval", type=seconds, default=0.1,
                      help="checkpoint interval in seconds (default: %(default)s)")
    demo.add_argument("--unaligned", action="store_true", help="unaligned checkpoints (default: aligned)")
    demo.add_argument("--crashes", type=count, default=2, help="task crashes to inject (default: %(default)s)")
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
    run.add_argument("--mode", type=run_mode,
                     help="checkpointing mode: exactly-once or at-least-once (default: the builder's, else exactly-once)")
    run.add_argument("--unaligned", action="store_true", help="unaligned checkpoints (exactly-once only)")
    run.add_argument("--interval", type=seconds,
                     help=f"checkpoint interval in seconds (default: the builder's, else {DEFAULT_INTERVAL} "
                     "when another checkpoint option is given)")
    run.add_argument("--parallelism", type=positive, help="default subtasks per operator (default: the builder's)")
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
    run.add_argument("--crashes", type=count, default=0, help="task crashes to inject (default: %(default)s)")
    run.set_defaults(func=cmd_run)

    zookeeper = sub.add_parser("zookeeper", parents=[common],
                               help="start, stop or query a local ZooKeeper for trying high availability")
    zookeeper.add_argument("action", choices=["start", "stop", "status"])
    zookeeper.add_argument("--dir", metavar="DIR", default=None,
                           help="data directory, holds its PID and log (default: TMPDIR/barrierflow-zookeeper)")
    zookeeper.add_argument("--port", type=positive, default=None,
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
    calibrate.add_argument("--interval", type=seconds,
                           help="checkpoint interval in seconds (default: the builder's, else 0.05); the "
                           "calibration run takes unaligned checkpoints whatever the builder's mode")
    calibrate.add_argument("--cores", type=positive,
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
    whatif.add_argument("--alignment-timeout", type=seconds, metavar="S",
                        help="a variant: aligned checkpoints that turn unaligned after S seconds of alignment")
    whatif.add_argument("--debloat-target", type=seconds, metavar="S",
                        help="a variant with buffer debloating to S seconds of in-flight data")
    whatif.add_argument("--parallelism", type=positive, metavar="N", help="a variant with parallelism N")
    whatif.add_argument("--interval", type=seconds, metavar="S", help="a variant checkpointing every S seconds")
    whatif.add_argument("--slow", type=slow_task, action="append", metavar="TASK=F",
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
