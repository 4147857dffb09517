"""The same page-view job on PyFlink (local MiniCluster) and Bytewax, as rows of the modes table.

    python -m benchmarks.peers [--quick] [--json PATH] [--out DIR]
    python -m benchmarks.checkpoint_modes --peers ...   (peers in the same run)

Needs the optional extra `peers` (`pip install -e .[peers]`: the `apache-flink` and `bytewax`
packages; Java 17 for Flink). Without it this prints how to install it and exits 0 — nothing in
the test suite depends on it.

Job: generator -> map to `(key, created)` -> key by -> running count -> sink, parallelism 2,
checkpoints every 100 ms, run at max rate. Variants:

* `pyflink-udf`: DataStream API with Python UDFs (process execution mode, `python.executable` =
  this interpreter), modes none / aligned / unaligned / at-least-once; the last UDF measures
  end-to-end latency against the creation stamp.
* `flink-sql`: a `datagen` table, `GROUP BY` count into a `blackhole` sink (throughput only).
* `bytewax`: a keyed `stateful_map` count with recovery snapshots every 100 ms (`epoch_interval`)
  and without recovery (mode none).

With `--json PATH` pointing at a `checkpoint_modes` JSON, the peer rows are added to it and its
table and plots are rewritten, so barrierflow, Flink and Bytewax sit side by side.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

from benchmarks.report import percentile

PARALLELISM = 2
INTERVAL_MS = 100
KEYS = 50
INSTALL_HINT = "pip install -e .[peers]   (installs apache-flink and bytewax; Flink also needs Java 17)"


def available() -> dict[str, bool]:
    """Which peer systems can be imported here."""
    return {name: importlib.util.find_spec(module) is not None
            for name, module in (("flink", "pyflink"), ("bytewax", "bytewax"))}


def _row(executor: str, mode: str, *, status: str = "ok", throughput: float | None = None,
         latencies_ms: list[float] | None = None, records: int | None = None) -> dict[str, Any]:
    lat = sorted(latencies_ms or [])
    return {
        "executor": executor, "scenario": "uniform", "mode": mode, "parallelism": PARALLELISM,
        "status": status, "throughput": throughput,
        "latency_p50": percentile(lat, 50), "latency_p90": percentile(lat, 90),
        "latency_p99": percentile(lat, 99), "latency_p99_9": percentile(lat, 99.9),
        "latency_max": percentile(lat, 100),
        "checkpoint_duration_p50": None, "checkpoint_duration_p99": None, "checkpoint_duration_max": None,
        "alignment_time_p50": None, "alignment_time_max": None, "persisted_bytes": None, "state_bytes": None,
        "checkpoints_completed": None, "checkpoints_aborted": None, "abort_reasons": {},
        "rate": None, "records": records,
    }


def _guarded(executor: str, mode: str, fn: Any, *args: Any) -> dict[str, Any]:
    try:
        return fn(*args)
    except Exception as exc:  # a peer that cannot run is a row saying so, not a crash
        return _row(executor, mode, status=f"failed: {type(exc).__name__}: {exc}"[:300])


# ---------------------------------------------------------------------------- PyFlink


def _flink_env(mode: str) -> Any:
    from pyflink.common import Configuration
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment

    config = Configuration()
    config.set_string("python.execution-mode", "process")
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(PARALLELISM)
    if mode != "none":
        env.enable_checkpointing(
            INTERVAL_MS,
            CheckpointingMode.AT_LEAST_ONCE if mode == "at-least-once" else CheckpointingMode.EXACTLY_ONCE,
        )
        if mode == "unaligned":
            env.get_checkpoint_config().enable_unaligned_checkpoints()
    return env


def run_pyflink_udf(mode: str, records: int) -> dict[str, Any]:
    """PyFlink DataStream job with Python UDFs; throughput and latency at max rate."""
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.datastream.state import ValueStateDescriptor

    class Count(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value: Any, ctx: Any) -> Any:
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            yield value[1], (time.time() - value[1]) * 1e3

    env = _flink_env(mode)
    stream = env.from_source(NumberSequenceSource(0, records - 1), WatermarkStrategy.no_watermarks(), "seq")
    out = (
        stream.map(lambda i: (f"app{i % KEYS}", time.time()), output_type=Types.TUPLE([Types.STRING(), Types.DOUBLE()]))
        .key_by(lambda r: r[0], key_type=Types.STRING())
        .process(Count(), output_type=Types.TUPLE([Types.DOUBLE(), Types.DOUBLE()]))
    )
    started = time.time()
    results = list(out.execute_and_collect(f"pyflink-udf-{mode}"))
    latencies = [r[1] for r in results]
    first = min((r[0] for r in results), default=started)
    span = max(time.time() - first, 1e-9)
    return _row("pyflink-udf", mode, throughput=len(results) / span, latencies_ms=latencies, records=records)


def run_flink_sql(mode: str, records: int) -> dict[str, Any]:
    """Flink SQL `GROUP BY` count from `datagen` into `blackhole`; throughput only."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    table_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = table_env.get_config()
    conf.set("parallelism.default", str(PARALLELISM))
    if mode != "none":
        conf.set("execution.checkpointing.interval", f"{INTERVAL_MS} ms")
        conf.set("execution.checkpointing.mode", "AT_LEAST_ONCE" if mode == "at-least-once" else "EXACTLY_ONCE")
        if mode == "unaligned":
            conf.set("execution.checkpointing.unaligned.enabled", "true")
    table_env.execute_sql(
        f"CREATE TABLE src (app INT, url STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '{records}', "
        f"'fields.app.kind' = 'random', 'fields.app.min' = '0', 'fields.app.max' = '{KEYS - 1}')"
    )
    table_env.execute_sql("CREATE TABLE snk (app INT, views BIGINT) WITH ('connector' = 'blackhole')")
    started = time.time()
    table_env.execute_sql("INSERT INTO snk SELECT app, COUNT(*) FROM src GROUP BY app").wait()
    return _row("flink-sql", mode, throughput=records / (time.time() - started), records=records)


# ---------------------------------------------------------------------------- Bytewax


def run_bytewax(mode: str, records: int) -> dict[str, Any]:
    """Bytewax keyed count; `aligned` = recovery snapshots every 100 ms, `none` = no recovery."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    latencies: list[float] = []

    def count(state: int | None, _created: float) -> tuple[int, float]:
        n = (state or 0) + 1
        return n, _created

    flow = Dataflow("pageview")
    items = op.input("inp", flow, TestingSource(range(records)))
    stamped = op.map("stamp", items, lambda i: (f"app{i % KEYS}", time.time()))
    counted = op.stateful_map("count", stamped, count)
    measured = op.map("latency", counted, lambda kv: (time.time() - kv[1]) * 1e3)
    op.output("out", measured, TestingSink(latencies))
    recovery = None
    with tempfile.TemporaryDirectory() as tmp:
        if mode != "none":
            from bytewax.recovery import RecoveryConfig, init_db_dir

            init_db_dir(tmp, 1)
            recovery = RecoveryConfig(tmp)
        started = time.time()
        run_main(flow, epoch_interval=timedelta(milliseconds=INTERVAL_MS), recovery_config=recovery)
        wall = time.time() - started
    return _row("bytewax", mode, throughput=records / wall, latencies_ms=latencies, records=records)


# ---------------------------------------------------------------------------- driver


def run_peers(quick: bool = False, console: Any = None) -> list[dict[str, Any]]:
    """Every peer variant that can run here, as `checkpoint_modes` rows; [] (after printing the
    install hint) when the extra is not installed."""
    say = console.print if console is not None else print
    have = available()
    if not any(have.values()):
        say(f"peers: apache-flink and bytewax are not installed; to compare with them: {INSTALL_HINT}")
        return []
    rows: list[dict[str, Any]] = []
    if have["flink"]:
        n = 20_000 if quick else 200_000
        for mode in ("none", "aligned", "unaligned", "at-least-once"):
            say(f"peers: pyflink-udf {mode} ({n} records)")
            rows.append(_guarded("pyflink-udf", mode, run_pyflink_udf, mode, n))
        for mode in ("none", "aligned", "unaligned", "at-least-once"):
            say(f"peers: flink-sql {mode}")
            rows.append(_guarded("flink-sql", mode, run_flink_sql, mode, 1_000_000 if quick else 10_000_000))
    else:
        say(f"peers: apache-flink is not installed ({INSTALL_HINT})")
    if have["bytewax"]:
        n = 200_000 if quick else 2_000_000
        for mode in ("none", "aligned"):
            say(f"peers: bytewax {mode}")
            rows.append(_guarded("bytewax", mode, run_bytewax, mode, n))
    else:
        say(f"peers: bytewax is not installed ({INSTALL_HINT})")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None,
                        help="a checkpoint_modes JSON to add the peer rows to (created when missing)")
    parser.add_argument("--out", default="bench-out", help="directory for the table (and plots)")
    args = parser.parse_args(argv)
    if not any(available().values()):
        print(f"benchmarks.peers: the optional peers are not installed. Install them with:\n  {INSTALL_HINT}")
        return 0
    rows = run_peers(quick=args.quick)
    from benchmarks.checkpoint_modes import UNITS, render_table, write_outputs

    json_path = args.json or os.path.join(args.out, "checkpoint_modes.json")
    payload: dict[str, Any] = {"benchmark": "checkpoint_modes", "rows": [], "units": UNITS, "series": {}}
    if os.path.exists(json_path):
        with open(json_path) as fh:
            payload = json.load(fh)
    peer_names = {r["executor"] for r in rows}
    payload["rows"] = [r for r in payload["rows"] if r["executor"] not in peer_names] + rows
    write_outputs(payload, json_path, args.out, plots=bool(payload.get("series")))
    print(render_table(payload["rows"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
