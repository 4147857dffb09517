"""The restore jobs shared by the simulator and Ray tests (a plain module: Ray workers import it by
name): source -> check (a poison record fails it) -> keyBy -> count -> `SparkSink`; and a keyed
count into a `CollectSink` (`collect_job`)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from operators.keyed import KeyedProcessFunction
from operators.sinks import CollectSink
from runtime import StreamEnvironment
from spark_bridge import SparkSink
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 23}"} for i in range(3000)]
#: the record that fails the first execution's "check" operator
POISON = 2200


class Check:
    """Passes records on, `delay` wall seconds each (on Ray: checkpoints complete before the
    poison); with `poison`, record `POISON` raises (a bug the next deployment fixes)."""

    def __init__(self, poison: bool, delay: float = 0.0) -> None:
        self.poison, self.delay = poison, delay

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        if self.delay:
            time.sleep(self.delay)
        if self.poison and record["id"] == POISON:
            raise ValueError(f"poison record {record['id']}")
        return record


class Count(KeyedProcessFunction):
    """Emits (key, running count) for every record."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {"key": ctx.key, "count": count.value()}


def restore_env(checkpoints: Path, out: Path, *, parallelism: int, poison: bool, unaligned: bool = False,
                interval: float = 0.002, buffer_size: int = 16, delay: float = 0.0) -> StreamEnvironment:
    """The job with checkpoints in `checkpoints` and its output in `out`; no restarts."""
    env = StreamEnvironment(parallelism=parallelism, buffer_size=buffer_size)
    env.enable_checkpointing(interval=interval, storage=str(checkpoints), unaligned=unaligned, retained=2,
                             tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.no_restart())
    (env.from_collection(ROWS, splits=4).map(Check(poison, delay), name="check")
     .key_by("key").process(Count(), name="count").sink_to(SparkSink(str(out))))
    return env


def expected_output() -> Counter:
    """Every (key, k) for k = 1..n, exactly once."""
    totals = Counter(r["key"] for r in ROWS)
    return Counter((key, k) for key, n in totals.items() for k in range(1, n + 1))


def committed_output(out: Path) -> Counter:
    """What the SparkSink committed under `out` (part files only: staged ones are invisible)."""
    table = pq.read_table(str(out))
    return Counter(zip(table.column("key").to_pylist(), table.column("count").to_pylist()))


def collect_job(checkpoints: Path, parallelism: int = 2) -> StreamEnvironment:
    """6,000 records keyed by k (3 keys) -> count -> `CollectSink("out")`; checkpoints every 2 ms in
    `checkpoints`; no restarts."""
    env = StreamEnvironment(parallelism=parallelism)
    env.enable_checkpointing(interval=0.002, storage=str(checkpoints))
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection([{"k": i % 3} for i in range(6000)], splits=2).key_by("k").count().sink_to(CollectSink("out"))
    return env
