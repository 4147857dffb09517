"""NexMark in Flink SQL beside barrierflow: the same events, queries and modes, results compared.

Driver side (`FlinkRounds`, a round after each of barrierflow's rounds in `python -m
benchmarks.nexmark --flink`; `run_flink` runs its rounds back to back): the events are written
once as Parquet (`dataset.write_events`, the files `python -m runtime.workloads.nexmark` writes),
then converted with pyarrow to CSV, because Flink's Parquet format (`flink-sql-parquet`) is not in
PyFlink's distribution (`pyflink/lib` holds the csv and json formats) and Maven is not reachable
here: two files for the stateless queries and q3, one file in event order for the event-time ones
(`nexmark_flink_sql.EVENT_TIME_QUERIES`). Every (query, mode) runs in a child process of the PyFlink
peers venv (`benchmarks.peers`: how Flink runs here; parallelism 2, checkpoints every 100 ms, the
modes none / aligned / unaligned / at-least-once): the `events` table, the views and the query's
Flink SQL (`benchmarks.nexmark_flink_sql`) inserted into a `filesystem` JSON table. Throughput =
events / (first source subtask RUNNING -> last subtask FINISHED) from the TaskManager log,
checkpoint duration p50/p99 and size from the JobManager's "Completed checkpoint" lines
(`peers_flink.flink_task_span`, `peers_flink.flink_checkpoints`); alignment p50/p99 (the longest
subtask alignment per checkpoint), start delay, persisted and checkpointed bytes from Flink's REST
API, every completed checkpoint's subtask details read by the child once the job has ended
(`peers_flink.FlinkJob`, `flink_rest.checkpoint_figures`). The JSON files (committed and in-progress: without checkpoints the file sink
never commits) are read back and compared with barrierflow's committed output over the same
events (`results`: "equal" or how they differ, `oracle.disagreement`'s rules). Only queries with
append-only output run (`FLINK_QUERIES`): Flink's file sink takes no updates, so q4 and q9 do not.
`flink_outputs` runs several queries as one Flink job (one JVM start) for their rows alone.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import peer_rows, peers
from benchmarks.modes_outcome import load_fields
from benchmarks.peers_flink import flink_checkpoints, flink_task_span, log_lines, read_recorded
from benchmarks.report import spread
from runtime.calibration.machine_load import LoadSampler

FLINK_MODES = ("none", "aligned", "unaligned", "at-least-once")
#: queries whose output Flink's file sink can hold (append-only)
FLINK_QUERIES = ("q0", "q1", "q2", "q3", "q5", "q7", "q8", "q11")
EXECUTOR = "flink-sql"


class EventFiles:
    """The events of one run as Parquet (written once) and as CSV for Flink, in the layout a
    query needs (`directory`), each written on first use under `work`."""

    def __init__(self, config: Any, events: int, work: str) -> None:
        from runtime.workloads.nexmark.dataset import write_events

        self.work = work
        self.parquet = write_events(config, events, os.path.join(work, "parquet"), files=2)
        self._csv: dict[bool, str] = {}

    def directory(self, in_order: bool) -> str:
        """Two CSV files (one per reader), or one file in event order (`in_order`)."""
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        if in_order not in self._csv:
            path = os.path.join(self.work, "csv-ordered" if in_order else "csv")
            os.makedirs(path)
            tables = [pq.read_table(p) for p in self.parquet]
            for i, table in enumerate([pa.concat_tables(tables)] if in_order else tables):
                pacsv.write_csv(table, os.path.join(path, f"events-{i}.csv"),
                                write_options=pacsv.WriteOptions(include_header=False))
            self._csv[in_order] = path
        return self._csv[in_order]

    def for_queries(self, names: Sequence[str]) -> str:
        from benchmarks.nexmark_flink_sql import EVENT_TIME_QUERIES

        return self.directory(any(n in EVENT_TIME_QUERIES for n in names))


# ---------------------------------------------------------------------------- child (peers venv)


def child(mode: str, spec_path: str, work: str) -> dict[str, Any]:
    """Run the spec's queries in Flink SQL as one job (`spec`: the DDL, views, each query's SQL
    and output directory)."""
    from pyflink.table import (
        EnvironmentSettings,
        FormatDescriptor,
        Schema,
        StreamTableEnvironment,
        TableDescriptor,
    )

    from benchmarks.nexmark_flink_sql import TIME_ZONE
    from benchmarks.peers_flink import FlinkJob

    with open(spec_path) as fh:
        spec = json.load(fh)
    with FlinkJob(mode, work) as job:
        settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(job.config).build()
        table_env = StreamTableEnvironment.create(job.env, settings)
        table_env.get_config().set("table.local-time-zone", TIME_ZONE)
        table_env.execute_sql(spec["events_ddl"])
        for name, sql in spec["views"].items():
            table_env.create_temporary_view(name, table_env.sql_query(sql))
        statements = table_env.create_statement_set()
        for query in spec["queries"]:
            result = table_env.sql_query(query["sql"])
            sink = (TableDescriptor.for_connector("filesystem")
                    .schema(Schema.new_builder().from_row_data_type(result.get_schema().to_row_data_type()).build())
                    .option("path", query["out"])
                    .format(FormatDescriptor.for_format("json").option("encode.decimal-as-plain-number", "true")
                            .build())
                    .build())
            table_env.create_temporary_table(f"snk_{query['name']}", sink)
            statements.add_insert(f"snk_{query['name']}", result)
        job.wait(statements.execute())
        return {"effective": job.effective}


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


def launch(queries: Sequence[Any], mode: str, csv_dir: str, config: Any,
           work: str) -> tuple[str | None, list[str], dict[str, list[dict[str, Any]]]]:
    """Run `queries` as one Flink SQL job in a child of the peers venv: (why it failed or None,
    the Flink log's lines, each query's output rows)."""
    from benchmarks.nexmark_flink_sql import events_ddl, flink_views, sql_of
    from runtime.workloads.nexmark.generator import EVENT_SCHEMA

    python = peers.interpreter_for("pyflink")
    if python is None:
        return f"not installed ({peers.INSTALL_HINT})", [], {}
    log_dir, outs = os.path.join(work, "log"), {q.name: os.path.join(work, "out", q.name) for q in queries}
    spec = {"events_ddl": events_ddl(EVENT_SCHEMA, csv_dir, config.max_out_of_orderness_ms), "views": flink_views(),
            "queries": [{"name": q.name, "sql": sql_of(q), "out": outs[q.name]} for q in queries]}
    os.makedirs(os.path.join(work, "jvm-tmp"))
    spec_path = os.path.join(work, "spec.json")
    with open(spec_path, "w") as fh:
        json.dump(spec, fh)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [peers.REPO_ROOT, os.environ.get("PYTHONPATH")])),
               FLINK_LOG_DIR=log_dir, PYTHONUNBUFFERED="1",
               JVM_ARGS=" ".join(filter(None, [os.environ.get("JVM_ARGS"),
                                               f"-Djava.io.tmpdir={os.path.join(work, 'jvm-tmp')}"])))
    argv = [python, "-m", "benchmarks.nexmark_flink", "--child", "--mode", mode, "--spec", spec_path, "--work", work]
    failure = peers._child_failure(_run(argv, env))
    return failure, log_lines(log_dir), {name: read_output(out) for name, out in outs.items()}


def run_one(query: Any, mode: str, csv_dir: str, config: Any, events: int) -> tuple[dict[str, Any], list[dict]]:
    """One Flink SQL run: its row and its output rows."""
    with tempfile.TemporaryDirectory(prefix="barrierflow-nexmark-flink-") as work:
        failure, lines, outputs = launch([query], mode, csv_dir, config, work)
        rows = outputs.get(query.name, [])
        if failure:
            return peer_rows.failed(EXECUTOR, mode, failure), rows
        span = flink_task_span(lines)
        if span is None:
            return peer_rows.failed(EXECUTOR, mode, "no task RUNNING/FINISHED lines in the Flink log"), rows
        checkpoints = flink_checkpoints(lines) if mode != "none" else None
        out = peer_rows.row(EXECUTOR, mode, throughput=events / max(span[1] - span[0], 1e-3), records=events,
                            checkpoints=checkpoints, figures=read_recorded(work))
        return out, rows


def flink_outputs(queries: Sequence[str], mode: str, config: Any, events: int) -> dict[str, list[dict[str, Any]]]:
    """Each query's rows, all of them run as one Flink SQL job over the same events (one JVM start).

    Raises:
        RuntimeError: the Flink job failed (its error).
    """
    from runtime.workloads.nexmark.queries import QUERIES

    unknown = [q for q in queries if q not in FLINK_QUERIES]
    if unknown:
        raise ValueError(f"flink_outputs: Flink SQL does not run {unknown} (it runs {', '.join(FLINK_QUERIES)})")
    with tempfile.TemporaryDirectory(prefix="barrierflow-nexmark-flink-") as work:
        csv_dir = EventFiles(config, events, work).for_queries(queries)
        failure, _, outputs = launch([QUERIES[q] for q in queries], mode, csv_dir, config, os.path.join(work, "job"))
    if failure:
        raise RuntimeError(f"Flink SQL job of {', '.join(queries)} ({mode}): {failure}")
    return outputs


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


def merged_rows(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A row per (query, mode): the median of its runs, `<field>_spread` their [min, max] (as
    `benchmarks.nexmark` reports its own), `results` the distinct verdicts."""
    out = []
    for rows in runs.values():
        row = peer_rows.repeats_row(rows)
        row["results"] = "; ".join(sorted({r.get("results") or r["status"] for r in rows}))
        for name in ("throughput", "checkpoint_duration_p50", "checkpoint_duration_p99"):
            row[f"{name}_spread"] = spread(rows, name)
        out.append(row)
    return out


class FlinkRounds:
    """Flink SQL runs of every (query, mode), one round at a time (`run_round`), so they can be
    interleaved with barrierflow's rounds; the events are written once, on entry. `rows()`: a row
    per (query, mode) so far (`merged_rows`), `results` comparing Flink's output with barrierflow's
    committed output (`ours`: query -> rows, read when a run ends)."""

    def __init__(self, queries: Sequence[str], modes: Sequence[str], config: Any, events: int, *, repeat: int = 1,
                 ours: dict[str, list[dict[str, Any]]] | None = None,
                 sampler: Callable[[], LoadSampler] = LoadSampler) -> None:
        self.sampler = sampler  # the machine's load around each run (its own JVM is not "other")
        self.plan = [(q, m) for q in queries if q in FLINK_QUERIES for m in modes if m in FLINK_MODES]
        self.config, self.events, self.repeat = config, events, repeat
        self.ours = ours if ours is not None else {}
        self.runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._work: tempfile.TemporaryDirectory[str] | None = None
        self._files: EventFiles | None = None

    def __enter__(self) -> FlinkRounds:
        self._work = tempfile.TemporaryDirectory(prefix="barrierflow-nexmark-events-")
        self._files = EventFiles(self.config, self.events, self._work.name)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._work is not None:
            self._work.cleanup()

    def run_round(self, r: int) -> None:
        """Round `r`: each (query, mode) once."""
        from benchmarks.nexmark_flink_sql import EVENT_TIME_QUERIES
        from runtime.workloads.nexmark.queries import QUERIES

        if self._files is None:
            raise RuntimeError("FlinkRounds.run_round: use it as a context manager (the events are written on entry)")
        for q, mode in self.plan:
            print(f"nexmark: flink-sql {q} {mode} ({self.events:,} events)"
                  + (f", repeat {r + 1}/{self.repeat}" if self.repeat > 1 else ""), flush=True)
            started = time.perf_counter()
            with self.sampler() as machine:
                try:
                    row, rows = run_one(QUERIES[q], mode, self._files.directory(q in EVENT_TIME_QUERIES),
                                        self.config, self.events)
                except Exception as exc:  # a row saying why
                    row, rows = peer_rows.failed(EXECUTOR, mode, f"{type(exc).__name__}: {exc}"), []
            if row["status"] == "ok":
                row["results"] = compare(QUERIES[q], self.ours.get(q), rows)
            row.update(scenario=f"nexmark-{q}", query=q, flink_rows=len(rows), **load_fields(machine.result))
            print(f"nexmark:   -> {row['throughput'] or row['status']} ({time.perf_counter() - started:.1f} s); "
                  f"results: {row.get('results')}", flush=True)
            self.runs.setdefault((q, mode), []).append(row)

    def rows(self) -> list[dict[str, Any]]:
        return merged_rows(self.runs)


def run_flink(queries: Sequence[str], modes: Sequence[str], config: Any, events: int, *, repeat: int = 1,
              ours: dict[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Flink SQL rows (`nexmark-<query>` scenarios, each the median of `repeat` rounds) with
    `results`: Flink's output against barrierflow's committed output (`ours`: query -> rows)."""
    with FlinkRounds(queries, modes, config, events, repeat=repeat, ours=ours) as rounds:
        for r in range(repeat):
            rounds.run_round(r)
        return rounds.rows()


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
