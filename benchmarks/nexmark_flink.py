"""NexMark in Flink SQL beside barrierflow: the same events, queries and modes, results compared.

Driver side (`run_flink`, called by `python -m benchmarks.nexmark --flink`): the events are written
once as Parquet (`dataset.write_events`, the files `python -m runtime.workloads.nexmark` writes),
then converted with pyarrow to CSV, because Flink's Parquet format (`flink-sql-parquet`) is not in
PyFlink's distribution (`pyflink/lib` holds the csv and json formats) and Maven is not reachable
here. Every (query, mode) runs in a child process of the PyFlink peers venv (`benchmarks.peers`:
how Flink runs here; parallelism 2, checkpoints every 100 ms, the modes none / aligned / unaligned /
at-least-once): a `filesystem` CSV table `events` of the union schema, the views `person`,
`auction`, `bid` (`oracle.VIEWS`), the query's SQL (the nexmark repo's, as in
`queries.QUERIES`) inserted into a `filesystem` JSON table. Throughput = events / (first source
subtask RUNNING -> last subtask FINISHED) from the TaskManager log, checkpoint duration p50/p99 and
size from the JobManager's "Completed checkpoint" lines (`peers.flink_task_span`,
`peers.flink_checkpoints`); Flink's log says nothing of alignment, so that column stays empty. The
JSON files (committed and in-progress: without checkpoints the file sink never commits) are read
back and compared with barrierflow's committed output over the same events (`results`: "equal" or
how they differ, `oracle.disagreement`'s rules). Only append-only queries run (q0-q3): Flink's file
sink takes no updates.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import peers

FLINK_MODES = ("none", "aligned", "unaligned", "at-least-once")
#: queries whose output Flink's file sink can hold (append-only)
FLINK_QUERIES = ("q0", "q1", "q2", "q3")
EXECUTOR = "flink-sql"
#: Flink SQL types of the event columns (`generator.EVENT_SCHEMA`: int64 -> BIGINT, string -> STRING)
_SQL_TYPES = {"int64": "BIGINT", "string": "STRING"}


def events_ddl(schema: Any, path: str) -> str:
    columns = ", ".join(f"`{f.name}` {_SQL_TYPES[str(f.type)]}" for f in schema)
    return (f"CREATE TABLE events ({columns}) WITH ('connector' = 'filesystem', 'path' = '{path}', "
            "'format' = 'csv', 'csv.null-literal' = '', 'csv.ignore-parse-errors' = 'false')")


def write_csv_events(config: Any, events: int, work: str) -> str:
    """The events as Parquet (`write_events`), then as CSV for Flink; the CSV directory."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from runtime.workloads.nexmark.dataset import write_events

    parquet_dir, csv_dir = os.path.join(work, "parquet"), os.path.join(work, "csv")
    os.makedirs(csv_dir)
    for i, path in enumerate(write_events(config, events, parquet_dir, files=2)):
        pacsv.write_csv(pq.read_table(path), os.path.join(csv_dir, f"events-{i}.csv"),
                        write_options=pacsv.WriteOptions(include_header=False))
    return csv_dir


# ---------------------------------------------------------------------------- child (peers venv)


def child(mode: str, spec_path: str, work: str) -> dict[str, Any]:
    """Run one query in Flink SQL (`spec`: the DDL, views, query and output directory)."""
    from pyflink.table import EnvironmentSettings, StreamTableEnvironment

    with open(spec_path) as fh:
        spec = json.load(fh)
    env, effective = peers._flink_stream_env(mode)
    settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(
        peers._flink_config(mode)).build()
    table_env = StreamTableEnvironment.create(env, settings)
    table_env.execute_sql(spec["events_ddl"])
    for name, sql in spec["views"].items():
        table_env.create_temporary_view(name, table_env.sql_query(sql))
    # CREATE TABLE ... AS: the sink takes the query's own schema
    table_env.execute_sql(f"CREATE TABLE snk WITH ('connector' = 'filesystem', 'path' = '{spec['out']}', "
                          "'format' = 'json', 'json.encode.decimal-as-plain-number' = 'true') AS " + spec["sql"]).wait()
    return {"effective": effective}


# ---------------------------------------------------------------------------- driver


def read_output(out: str) -> list[dict[str, Any]]:
    """Every row Flink wrote under `out`: committed files and in-progress ones (`.part-*`)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "**", "*"), recursive=True) +
                       glob.glob(os.path.join(out, "**", ".*"), recursive=True)):
        if os.path.isfile(path) and not path.endswith(".crc"):
            with open(path) as fh:
                rows += [json.loads(line) for line in fh if line.strip()]
    return rows


def compare(query: Any, ours: list[dict[str, Any]] | None, theirs: list[dict[str, Any]]) -> str:
    """"equal", or how Flink's rows differ from barrierflow's committed ones."""
    from runtime.workloads.nexmark.oracle import disagreement

    if ours is None:
        return "not compared (no barrierflow run of this query)"
    problem = disagreement(query, theirs, ours)
    if problem is None:
        return "equal"
    return problem.replace("Spark's", "barrierflow's").replace("not in barrierflow's", "Flink has, barrierflow not:") \
        .replace("missing", "Flink misses")


def run_one(query: Any, mode: str, csv_dir: str, schema: Any, events: int) -> tuple[dict[str, Any], list[dict]]:
    """One Flink SQL run: its row and its output rows."""
    from runtime.workloads.nexmark.oracle import VIEWS

    python = peers.interpreter_for("pyflink")
    if python is None:
        return peers._failed(EXECUTOR, mode, f"not installed ({peers.INSTALL_HINT})"), []
    with tempfile.TemporaryDirectory(prefix="barrierflow-nexmark-flink-") as work:
        out, log_dir = os.path.join(work, "out"), os.path.join(work, "log")
        spec = {"events_ddl": events_ddl(schema, csv_dir), "views": VIEWS, "sql": query.sql, "out": out}
        spec_path = os.path.join(work, "spec.json")
        with open(spec_path, "w") as fh:
            json.dump(spec, fh)
        os.makedirs(os.path.join(work, "jvm-tmp"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [peers.REPO_ROOT, os.environ.get("PYTHONPATH")])),
                   FLINK_LOG_DIR=log_dir, PYTHONUNBUFFERED="1",
                   JVM_ARGS=" ".join(filter(None, [os.environ.get("JVM_ARGS"),
                                                   f"-Djava.io.tmpdir={os.path.join(work, 'jvm-tmp')}"])))
        argv = [python, "-m", "benchmarks.nexmark_flink", "--child", "--mode", mode, "--spec", spec_path,
                "--work", work]
        results = _run(argv, env)
        failure = peers._child_failure(results)
        if failure:
            return peers._failed(EXECUTOR, mode, failure), []
        lines = peers._log_lines(log_dir)
        span = peers.flink_task_span(lines)
        checkpoints = peers.flink_checkpoints(lines) if mode != "none" else None
        rows = read_output(out)
        if span is None:
            return peers._failed(EXECUTOR, mode, "no task RUNNING/FINISHED lines in the Flink log"), rows
        row = peers._row(EXECUTOR, mode, throughput=events / max(span[1] - span[0], 1e-3), records=events,
                         checkpoints=checkpoints)
        return row, rows


def _run(argv: list[str], env: dict[str, str]) -> list[tuple[int, str, str]]:
    import subprocess

    from benchmarks.processes import kill_group

    proc = subprocess.Popen(argv, cwd=peers.REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=peers.CHILD_TIMEOUT_S)
        return [(proc.returncode, out, err)]
    except subprocess.TimeoutExpired:
        kill_group(proc, grace=0)
        out, err = proc.communicate()
        return [(-1, out, err + "\n(timed out)")]
    finally:
        kill_group(proc)


def run_flink(queries: Sequence[str], modes: Sequence[str], config: Any, events: int, *, repeat: int = 1,
              ours: dict[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Flink SQL rows (`nexmark-<query>` scenarios, each the median of `repeat` interleaved runs)
    with `results`: Flink's output against barrierflow's committed output (`ours`: query -> rows)."""
    from runtime.workloads.nexmark.generator import EVENT_SCHEMA
    from runtime.workloads.nexmark.queries import QUERIES

    plan = [(q, m) for q in queries if q in FLINK_QUERIES for m in modes if m in FLINK_MODES]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="barrierflow-nexmark-events-") as work:
        csv_dir = write_csv_events(config, events, work)
        for r in range(repeat):
            for q, mode in plan:
                print(f"nexmark: flink-sql {q} {mode} ({events:,} events)" + (f", repeat {r + 1}" if repeat > 1 else ""),
                      flush=True)
                started = time.perf_counter()
                try:
                    row, rows = run_one(QUERIES[q], mode, csv_dir, EVENT_SCHEMA, events)
                except Exception as exc:  # a row saying why
                    row, rows = peers._failed(EXECUTOR, mode, f"{type(exc).__name__}: {exc}"), []
                if row["status"] == "ok":
                    row["results"] = compare(QUERIES[q], (ours or {}).get(q), rows)
                row.update(scenario=f"nexmark-{q}", query=q, flink_rows=len(rows),
                           load_average=round(os.getloadavg()[0], 2), cores=os.cpu_count(),
                           contended=os.getloadavg()[0] > (os.cpu_count() or 1))
                print(f"nexmark:   -> {row['throughput'] or row['status']} ({time.perf_counter() - started:.1f} s); "
                      f"results: {row.get('results')}", flush=True)
                runs.setdefault((q, mode), []).append(row)
    out = []
    for rows in runs.values():
        row = peers.repeats_row(rows)
        row["results"] = "; ".join(sorted({r.get("results") or r["status"] for r in rows}))
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nexmark_flink", description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=FLINK_MODES, required=True)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    out = child(args.mode, args.spec, args.work)
    print(peers.ROW_MARK + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
