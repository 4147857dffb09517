"""The same page-view job on PyFlink (local MiniCluster) and Bytewax, as rows of the modes table.

The driver (this module); what the children run: `benchmarks.peers_flink` (PyFlink, the Flink
log), `benchmarks.peers_bytewax`; the rows: `benchmarks.peer_rows`.

    python -m benchmarks.peers [--quick] [--repeat N] [--sink collect discard] [--only VARIANT ...]
                               [--json PATH] [--out DIR]
    python -m benchmarks.peers --setup-venv          (PyFlink + Bytewax into a separate venv)
    python -m benchmarks.checkpoint_modes --peers ...   (peers in the same run)

Installing the peers
--------------------
* Bytewax: the optional extra `peers` (`pip install -e .[peers]`, bytewax 0.21).
* PyFlink: NOT in the extra. apache-flink 2.3 (through apache-beam 2.61) pins numpy<2.2, pyarrow<17,
  protobuf<6 and py4j==0.10.9.7, which would downgrade this environment's numpy/pyarrow/protobuf and
  break pyspark (py4j 0.10.9.9, pyarrow>=18) and ray. `python -m benchmarks.peers --setup-venv`
  creates a separate venv (`peers-venv` beside the repository's directory; override with
  $BARRIERFLOW_PEERS_VENV) and installs `apache-flink==2.3.0` and `bytewax==0.21.1` there. Flink
  also needs Java 17 (`java` on PATH or $JAVA_HOME).
Without either this prints how to install them and exits 0. The test suite's own set-up
(`scripts/test.sh`) creates the venv: the NexMark tests compare Flink SQL's results with barrierflow's.

How it runs
-----------
Every variant runs in a fresh child process of the interpreter that has the package (this one, else
the venv's python) in its own process group and a temporary work directory (also the JVM's
java.io.tmpdir). Once the child has exited, what is left of its group gets 15 s to exit by itself,
then SIGTERM, then SIGKILL, so no JVM or Python UDF worker outlives its row. The child writes
per-record stamps (or the Flink log) into the work directory and the driver computes the numbers.
Java start-up, job planning and submission, task deployment and the final shutdown are never inside
a measured span (for task initialisation see `flink-sql`).

Records per run (full / `--quick`): pyflink-udf 500,000 / 50,000; flink-sql 10,000,000 / 1,000,000;
bytewax 10,000,000 / 1,000,000. The numbers are wall-clock on a (possibly shared) 2-core machine
and so sensitive to whatever else runs there: the driver prints the load average after each row.

Job: generator -> map to `(key, created)` -> key by (50 keys) -> running count -> sink, parallelism 2,
checkpoints every 100 ms, run at max rate (closed loop: a saturated pipeline, so its latencies are
latencies under full load, unlike barrierflow's open-loop latency rows at `rate`). Variants:

* `pyflink-udf` (modes none / aligned / unaligned / at-least-once): DataStream API,
  `NumberSequenceSource` (Java) -> Python `map` stamping `created = time.time()` -> `key_by` -> Python
  `KeyedProcessFunction` keeping the count in `ValueState` and stamping `done = time.time()` ->
  Java `DiscardingSink`; `python.execution-mode = process`, `python.executable` = the interpreter,
  and `_python_worker_execution_mode=process` in the environment (otherwise PyFlink on a local
  MiniCluster runs all Python UDFs in the client process, "loopback" mode, one GIL for both
  subtasks; with it every slot gets its own Python worker process as on a cluster), other PyFlink
  settings at their defaults (notably `python.fn-execution.bundle.size` 100000 and
  `bundle.time` 1000 ms, which dominate the latency). Checkpoints use the default (JobManager heap)
  storage. Latency per record = done - created (ms). Throughput = records /
  (max(done) - min(created)). The driver checks that exactly `records` stamps came back.
* `flink-sql` (modes none / aligned / unaligned / at-least-once): `datagen` table (`app INT`
  random in 0..49, `number-of-rows` = records, `rows-per-second` = 10^9, i.e. unthrottled; its
  default of 10000 rows/s would make it measure the rate limiter), `INSERT INTO blackhole SELECT
  app, COUNT(*) FROM src GROUP BY app` (no mini-batch: one update per input row). No latency (there
  is no per-record stamp without a UDF). Throughput = records / (first source subtask switching to
  RUNNING -> last subtask switching to FINISHED), both read from the TaskManager's log (1 ms
  resolution); this excludes JVM start, planning, submission, deployment and task initialisation
  (code generation) of the source, but includes the time the source already runs while the
  aggregate task is still initialising (a few hundred ms; its output waits in network buffers)
  and draining and closing at the end of the input.
* `flink-java` (modes none / aligned / unaligned / at-least-once): the same topology with Java
  functions, `benchmarks/flink_java/PageView.java` (`fromSequence` -> `map` stamping `created` ->
  keyBy -> `KeyedProcessFunction` counting in `ValueState` and stamping `done` -> `DiscardingSink`),
  compiled with `javac` against the installed PyFlink's `pyflink/lib/*.jar` into the work directory
  and run with `java -cp` on a local MiniCluster (`benchmarks.flink_java`); Java 17 JDK (`javac`)
  required, else the row fails naming what is missing. Latency and throughput from its stamps as
  for `pyflink-udf`; checkpoint columns from the job's own REST endpoint (127.0.0.1, a free port):
  the last `/jobs/<id>/checkpoints` summary before the job ends. Records: 5,000,000 / 3,000,000.
* `bytewax` (modes none / aligned): 2 processes x 1 worker (`cluster_main` on 127.0.0.1; 2 processes
  rather than 2 threads because worker threads share the GIL), a 2-partition generator source
  (batches of 1000 ints) -> `map` stamping `created` -> `stateful_map` count stamping `done` ->
  a sink collecting the stamps. `aligned` = a `RecoveryConfig` (SQLite recovery partitions in a
  temp dir), so state and source positions are snapshotted at the end of every epoch, with
  `epoch_interval` = 100 ms; `none` = no recovery, same 100 ms epochs. Latency and throughput as for
  `pyflink-udf`.

And barrierflow itself on Ray, measured the same way (max rate, latency under full load) in the same
run, so the comparison needs no second table (`benchmarks.throughput` builds both jobs):

* `barrierflow-udf` (modes none / aligned / unaligned / at-least-once): generator `fn(i)` -> Python
  `map` -> key_by -> Python `KeyedProcessFunction` counting in `ValueState` -> CollectSink, every
  record a dict (the counterpart of `pyflink-udf`); buffers of 1,000 records.
* `barrierflow-vectorised` (same modes): generator `batch_fn` -> `map_batches` -> key_by -> the
  vectorised keyed `count()` -> CollectSink, Arrow batches end to end (the counterpart of
  `flink-sql` and `bytewax`); buffers of 10,000 records.
Latency = arrival at the count task - creation; throughput = records / (last arrival - first
creation). `--sink discard` (or `--sink collect discard`) runs them into a `DiscardingSink` as well,
rows `barrierflow-udf-discarding` and `barrierflow-vectorised-discarding`: the peers' sinks keep no
output (Flink's `DiscardingSink`, the SQL blackhole, Bytewax's stamp sink), where `CollectSink`
stages every checkpoint's records in its committer during the run and, without checkpoints,
commits them all after the last record was counted. `--only NAME ...` runs those variants alone. Checkpoint columns from barrierflow's own statistics; checkpoints to a local directory. Records: 500,000 / 100,000 (udf),
10,000,000 / 2,000,000 (vectorised).

For the Flink variants `checkpoints_completed`, `checkpoint_duration_*` and `checkpoint_size_max`
(JSON only: bytes of the largest completed checkpoint, operator state plus, when unaligned, the
persisted in-flight data) come from the JobManager's "Completed checkpoint" log lines;
`checkpoints_aborted` / `abort_reasons` count triggered checkpoints that failed (mostly ones
declined because tasks were finishing at the end of the bounded input). `flink-sql` also takes
Flink's per-checkpoint figures from its REST API
(`benchmarks.peers_flink`: the job runs on a MiniCluster of the child's own, `RestCluster`, whose
REST endpoint outlives the job; `benchmarks.flink_rest`): `alignment_time_p50/p99/max` (the
longest subtask `alignment.duration` per completed checkpoint), `start_delay_*`,
`persisted_bytes(_p50)` (`persisted_data`: in-flight data of unaligned checkpoints),
`checkpointed_bytes_p50`, and `rest_checkpoints_completed` / `rest_checkpoints_read` (Flink's
count and the checkpoints the figures come from; `pyflink-udf` runs on PyFlink's local executor
and has none: its Python workers wrote no stamps when its job went to that cluster); the
barrierflow rows fill the same columns from their own statistics. The job's effective checkpoint settings (enabled, mode, unaligned, interval)
are read back from the environment and a row whose job ran with other settings fails. Bytewax has
no checkpoint columns (it keeps no such statistics).

With `--json PATH` pointing at a `checkpoint_modes` JSON, the peer rows are added to it and its
table and plots are rewritten, so barrierflow, Flink and Bytewax sit side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.peer_rows import INTERVAL_MS, PARALLELISM, ROW_MARK, failed, repeats_row, row, stamp_row
from benchmarks.peers_flink import flink_checkpoints, flink_task_span, log_lines, read_recorded
from benchmarks.processes import kill_group as _kill_group
from benchmarks.report import (
    abort_reasons,
    add_output_arguments,
    at_least_one,
    output_of,
    parse_args,
    percentile,
)

FLINK_PIN = "apache-flink==2.3.0"
BYTEWAX_PIN = "bytewax==0.21.1"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_HINT = ("pip install -e .[peers]   (Bytewax)  and  python -m benchmarks.peers --setup-venv   "
                "(PyFlink and Bytewax in a separate venv; Flink also needs Java 17)")
CHILD_TIMEOUT_S = 1800
FLINK_MODES = ("none", "aligned", "unaligned", "at-least-once")
BYTEWAX_MODES = ("none", "aligned")
BARRIERFLOW_MODES = FLINK_MODES
#: every variant `--only` can name
VARIANTS = ("barrierflow-udf", "barrierflow-vectorised", "flink-java", "pyflink-udf", "flink-sql", "bytewax")
#: barrierflow's sinks (`--sink`): the row name's suffix for each
SINK_SUFFIX = {"collect": "", "discard": "-discarding"}


def peers_venv() -> str:
    return os.environ.get("BARRIERFLOW_PEERS_VENV") or os.path.join(os.path.dirname(REPO_ROOT), "peers-venv")


def _venv_python() -> str:
    return os.path.join(peers_venv(), "bin", "python")


_INTERPRETERS: dict[str, str | None] = {}


def interpreter_for(module: str) -> str | None:
    """This interpreter if it can import `module`, else the peers venv's python if that can, else None."""
    if module not in _INTERPRETERS:
        found: str | None = None
        if importlib.util.find_spec(module) is not None:
            found = sys.executable
        elif os.path.exists(_venv_python()):
            probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                if subprocess.run([_venv_python(), "-c", probe], capture_output=True, timeout=60).returncode == 0:
                    found = _venv_python()
        _INTERPRETERS[module] = found
    return _INTERPRETERS[module]


def available() -> dict[str, bool]:
    """Which peer systems can run here (in this interpreter or the peers venv)."""
    return {name: interpreter_for(module) is not None for name, module in (("flink", "pyflink"), ("bytewax", "bytewax"))}


def setup_venv() -> int:
    """Create the peers venv and install the pinned PyFlink and Bytewax into it."""
    venv = peers_venv()
    if not os.path.exists(_venv_python()):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([_venv_python(), "-m", "pip", "install", "--upgrade", "pip"], check=True)
    subprocess.run([_venv_python(), "-m", "pip", "install", FLINK_PIN, BYTEWAX_PIN], check=True)
    print(f"peers venv ready: {venv}")
    return 0


def _child_main(args: argparse.Namespace) -> int:
    from benchmarks.peers_bytewax import child_bytewax
    from benchmarks.peers_flink import child_flink_sql, child_pyflink_udf

    if args.child == "pyflink-udf":
        out = child_pyflink_udf(args.mode, args.records, args.work)
    elif args.child == "flink-sql":
        out = child_flink_sql(args.mode, args.records, args.work)
    else:
        out = child_bytewax(args.mode, args.records, args.work, args.proc_id, args.addresses.split(","))
    print(ROW_MARK + json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------- driver side


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _run_children(python: str, argvs: list[list[str]], env: dict[str, str], timeout: float) -> list[tuple[int, str, str]]:
    procs = [subprocess.Popen([python, "-m", "benchmarks.peers", *argv], cwd=REPO_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for argv in argvs]
    results = []
    deadline = time.monotonic() + timeout
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
                results.append((proc.returncode, out, err))
            except subprocess.TimeoutExpired:
                _kill_group(proc, grace=0)
                out, err = proc.communicate()
                results.append((-1, out, err + f"\n(timed out after {timeout:.0f} s)"))
    finally:
        for proc in procs:
            _kill_group(proc)
    return results


def _child_failure(results: list[tuple[int, str, str]]) -> str | None:
    for code, out, err in results:
        if code != 0 or ROW_MARK not in out:
            lines = [ln.strip() for ln in (err + "\n" + out).splitlines() if ln.strip()]
            causes = [ln for ln in lines if re.search(r"(Error|Exception)\b.*:", ln) and not ln.startswith("at ")]
            return f"exit {code}: " + " | ".join(causes[-2:] if causes else lines[-3:])
    return None


def run_variant(variant: str, mode: str, records: int, *, timeout: float = CHILD_TIMEOUT_S) -> dict[str, Any]:
    """Run one peer variant in child process(es) of the interpreter that has the package; its row."""
    python = interpreter_for("bytewax" if variant == "bytewax" else "pyflink")
    if python is None:
        return failed(variant, mode, f"not installed ({INSTALL_HINT})")
    with tempfile.TemporaryDirectory(prefix=f"barrierflow-{variant}-") as work:
        log_dir = os.path.join(work, "log")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")])),
                   FLINK_LOG_DIR=log_dir, PYTHONUNBUFFERED="1")
        if variant != "bytewax":
            # the JVM's temp files (RPC jar, blobs, spill dirs) go into `work`, removed afterwards
            env["JVM_ARGS"] = " ".join(filter(None, [os.environ.get("JVM_ARGS"),
                                                     f"-Djava.io.tmpdir={os.path.join(work, 'jvm-tmp')}"]))
            os.makedirs(os.path.join(work, "jvm-tmp"))
            # PyFlink on a local MiniCluster runs every Python UDF in threads of the client process
            # ("loopback" mode: one GIL for both subtasks); `process` gives each slot its own Python
            # worker process, as on a real cluster.
            env["_python_worker_execution_mode"] = "process"
        common = ["--child", variant, "--mode", mode, "--records", str(records), "--work", work]
        if variant == "bytewax":
            if mode != "none":  # recovery partitions must exist before the cluster starts
                init = ("from bytewax.recovery import init_db_dir; from pathlib import Path; import sys; "
                        "init_db_dir(Path(sys.argv[1]), int(sys.argv[2]))")
                os.makedirs(os.path.join(work, "recovery"))
                subprocess.run([python, "-c", init, os.path.join(work, "recovery"), str(PARALLELISM)],
                               check=True, capture_output=True, env=env, timeout=120)
            addresses = ",".join(f"127.0.0.1:{p}" for p in _free_ports(PARALLELISM))
            argvs = [[*common, "--proc-id", str(i), "--addresses", addresses] for i in range(PARALLELISM)]
        else:
            argvs = [common]
        results = _run_children(python, argvs, env, timeout)
        failure = _child_failure(results)
        if failure:
            return failed(variant, mode, failure)
        effective = json.loads(results[0][1].split(ROW_MARK, 1)[1].splitlines()[0]).get("effective")
        if effective is not None:  # the checkpoint config the job really had
            wanted: dict[str, Any] = {"checkpointing": mode != "none", "unaligned": mode == "unaligned"}
            if mode != "none":
                wanted["interval_ms"] = INTERVAL_MS
                wanted["mode"] = "CheckpointingMode.AT_LEAST_ONCE" if mode == "at-least-once" \
                    else "CheckpointingMode.EXACTLY_ONCE"
            wrong = {k: effective.get(k) for k, v in wanted.items() if effective.get(k) != v}
            if wrong:
                return failed(variant, mode, f"job ran with a different checkpoint config: {wrong}")
        lines = log_lines(log_dir) if variant != "bytewax" else []
        checkpoints = flink_checkpoints(lines) if variant != "bytewax" and mode != "none" else None
        figures = read_recorded(work) if variant != "bytewax" else None
        if variant == "flink-sql":
            span = flink_task_span(lines)
            if span is None:
                return failed(variant, mode, "no task RUNNING/FINISHED lines in the Flink log")
            return row(variant, mode, throughput=records / max(span[1] - span[0], 1e-3), records=records,
                       checkpoints=checkpoints, figures=figures)
        return stamp_row(variant, mode, os.path.join(work, "stamps"), records, checkpoints, figures)


def run_flink_java(mode: str, records: int) -> dict[str, Any]:
    """One `flink-java` row: the Java page-view job (`benchmarks.flink_java`) at max rate."""
    from benchmarks import flink_java

    with tempfile.TemporaryDirectory(prefix="barrierflow-flink-java-") as work:
        classpath = flink_java.build(flink_java.pyflink_lib(interpreter_for("pyflink")), os.path.join(work, "classes"))
        unaligned = mode == "unaligned"
        with flink_java.FlinkJavaJob(classpath, work, records=records, interval_ms=0 if mode == "none" else INTERVAL_MS,
                                     mode="at-least-once" if mode == "at-least-once" else "exactly-once",
                                     unaligned=unaligned) as job:
            job.start()
            out = job.finish()
        effective = out["effective"]
        if effective["checkpointing"] != (mode != "none") or (mode != "none" and effective["unaligned"] != unaligned):
            return failed("flink-java", mode, f"job ran with a different checkpoint config: {effective}")
        checkpoints = flink_java.checkpoint_stats(out.get("checkpoints")) if mode != "none" else None
        return stamp_row("flink-java", mode, os.path.join(work, "stamps"), records, checkpoints)


def run_barrierflow(variant: str, mode: str, records: int, sink: str = "collect") -> dict[str, Any]:
    """One `barrierflow-udf` / `barrierflow-vectorised` row on (local) Ray, in this process, into
    `sink` (`SINK_SUFFIX`: the row is named with its suffix)."""
    from benchmarks.throughput import execute, unaccounted
    from runtime.ray.cluster import ensure_ray

    ensure_ray()
    result, _ = execute("ray", records, f"peers-{variant}-{mode}", checkpoints=mode != "none",
                        job=variant.removeprefix("barrierflow-"), mode=mode if mode != "none" else "aligned", sink=sink)
    variant += SINK_SUFFIX[sink]
    problem = unaccounted(result, records, sink)
    if problem is not None:
        return failed(variant, mode, problem)
    done = result.completed_checkpoints
    durations = sorted(c.duration * 1e3 for c in done)
    alignments = sorted(c.alignment_time * 1e3 for c in done)
    aborted = result.aborted_checkpoints
    checkpoints = {"p50": percentile(durations, 50), "p99": percentile(durations, 99),
                   "max": percentile(durations, 100), "completed": len(durations),
                   "aborted": len(aborted), "reasons": abort_reasons(aborted)}
    # barrierflow's own statistics, in the columns Flink's come from its REST API
    figures = {"alignment_time_p50": percentile(alignments, 50), "alignment_time_p99": percentile(alignments, 99),
           "alignment_time_max": percentile(alignments, 100),
           "persisted_bytes": sum(c.persisted_bytes for c in done) if done else None,
           "persisted_bytes_p50": percentile(sorted(c.persisted_bytes for c in done), 50)}
    return row(variant, mode, throughput=result.metrics.end_to_end_throughput,
               latency_histogram=result.metrics.latencies, records=records,
               checkpoints=checkpoints, figures=figures)


def _guarded(executor: str, mode: str, fn: Any, *args: Any) -> dict[str, Any]:
    try:
        return fn(*args)
    except Exception as exc:  # a peer that cannot run is a row saying so, not a crash
        return failed(executor, mode, f"{type(exc).__name__}: {exc}")


def run_peers(quick: bool = False, console: Any = None, repeat: int = 1, sinks: tuple[str, ...] = ("collect",),
              only: tuple[str, ...] = VARIANTS) -> list[dict[str, Any]]:
    """Every peer variant of `only` that can run here, as `checkpoint_modes` rows (each the
    median of `repeat` runs, the repeats interleaved: every variant once per round), barrierflow's
    into each of `sinks`; [] (after printing the install hint) when neither peer is installed."""
    def say(msg: str) -> None:
        if console is None:
            print(msg, flush=True)
        else:  # no rich markup: "[peers]" in the install hint is not a tag
            console.print(msg, markup=False, highlight=False)

    have = available()
    if not any(have.values()):
        say(f"peers: apache-flink and bytewax are not installed; to compare with them: {INSTALL_HINT}")
        return []
    plan = run_plan(quick, have, sinks, only)
    if not have["flink"]:
        say(f"peers: apache-flink is not installed ({INSTALL_HINT})")
    if not have["bytewax"]:
        say(f"peers: bytewax is not installed ({INSTALL_HINT})")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(repeat):
        for variant, mode, n, where, fn, args in plan:
            say(f"peers: {variant} {mode} ({n:,} records, {where})" + (f", repeat {r + 1}/{repeat}" if repeat > 1 else ""))
            started = time.perf_counter()
            row = _guarded(variant, mode, fn, *args)
            tp = f"{row['throughput']:,.0f} rec/s" if row["throughput"] else row["status"]
            say(f"peers:   -> {tp} ({time.perf_counter() - started:.1f} s wall incl. start-up; "
                f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
            runs.setdefault((variant, mode), []).append(row)
    return [repeats_row(rs) for rs in runs.values()]


def run_plan(quick: bool, have: dict[str, bool], sinks: tuple[str, ...],
             only: tuple[str, ...]) -> list[tuple[str, str, int, str, Any, tuple[Any, ...]]]:
    """What one round runs, in order: (row name, mode, records, where it runs, function, its
    arguments) for each variant of `only` whose system is installed (`have`)."""
    plan: list[tuple[str, str, int, str, Any, tuple[Any, ...]]] = []
    for variant, n in (("barrierflow-udf", 100_000 if quick else 500_000),
                       ("barrierflow-vectorised", 2_000_000 if quick else 10_000_000)):
        if variant in only:
            plan += [(variant + SINK_SUFFIX[sink], mode, n, "Ray", run_barrierflow, (variant, mode, n, sink))
                     for sink in sinks for mode in BARRIERFLOW_MODES]
    if have["flink"]:
        n = 3_000_000 if quick else 5_000_000
        if "flink-java" in only:
            plan += [("flink-java", mode, n, "javac + java against PyFlink's jars", run_flink_java, (mode, n))
                     for mode in FLINK_MODES]
        for variant, n in (("pyflink-udf", 50_000 if quick else 500_000),
                           ("flink-sql", 1_000_000 if quick else 10_000_000)):
            if variant in only:
                plan += [(variant, mode, n, str(interpreter_for("pyflink")), run_variant, (variant, mode, n))
                         for mode in FLINK_MODES]
    if have["bytewax"] and "bytewax" in only:
        n = 1_000_000 if quick else 10_000_000
        plan += [("bytewax", mode, n, str(interpreter_for("bytewax")), run_variant, ("bytewax", mode, n))
                 for mode in BYTEWAX_MODES]
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.split("\n\n")[0])
    add_output_arguments(parser, "checkpoint_modes", quick_help="fewer records per peer run",
                         json_help="a checkpoint_modes JSON to add the peer rows to (created when missing; "
                                   "default OUT/checkpoint_modes.json)")
    parser.add_argument("--repeat", type=at_least_one, default=3, metavar="N",
                        help="runs per row, interleaved; every row reports the median (default 3)")
    parser.add_argument("--sink", nargs="+", default=["collect"], choices=tuple(SINK_SUFFIX),
                        help="barrierflow's sink: its exactly-once CollectSink, a DiscardingSink (as the peers' "
                        "sinks, rows named -discarding), or both (default collect)")
    parser.add_argument("--only", nargs="+", default=list(VARIANTS), choices=VARIANTS, metavar="VARIANT",
                        help=f"run these variants alone (of {', '.join(VARIANTS)}; default all)")
    parser.add_argument("--setup-venv", action="store_true",
                        help=f"create {peers_venv()} with {FLINK_PIN} and {BYTEWAX_PIN}")
    # internal: one variant inside a child process
    parser.add_argument("--child", choices=("pyflink-udf", "flink-sql", "bytewax"), help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--proc-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--addresses", default="", help=argparse.SUPPRESS)
    args = parse_args(parser, argv)
    if args.child:
        return _child_main(args)
    if args.setup_venv:
        return setup_venv()
    if not any(available().values()):
        print(f"benchmarks.peers: the optional peers are not installed. Install them with:\n  {INSTALL_HINT}")
        return 0
    started = time.perf_counter()
    rows = run_peers(quick=args.quick, repeat=args.repeat, sinks=tuple(args.sink), only=tuple(args.only))
    from benchmarks.modes_table import UNITS, render_table, write_outputs

    json_path = output_of(args, "checkpoint_modes").json_path
    payload: dict[str, Any] = {"benchmark": "checkpoint_modes", "rows": [], "units": UNITS, "series": {}}
    if os.path.exists(json_path):
        with open(json_path) as fh:
            payload = json.load(fh)
    peer_names = {r["executor"] for r in rows}
    payload["rows"] = [r for r in payload["rows"] if r["executor"] not in peer_names] + rows
    payload["peers"] = {"doc": __doc__, "quick": args.quick, "repeat": args.repeat, "wall_s": round(time.perf_counter() - started, 1),
                        "interpreters": {m: interpreter_for(m) for m in ("pyflink", "bytewax")}}
    write_outputs(payload, json_path, args.out, plots=bool(payload.get("series")))
    print(render_table(payload["rows"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
