"""Spark bridge benchmark: seeding a source from Spark, and landing time versus state size.

    python -m benchmarks.spark_bridge [--rows 1000000] [--keys 10000,100000,1000000] [--json PATH]

1. Seeding: a `--rows` DataFrame (id, user, page, ts) → `from_spark(..., splits=4)`: Spark writes
   the split files (wall time), then every split is read to the end through its `SplitReader`
   (as records, what a source task does). Rows/s for each phase and end to end.
2. Landing: a checkpoint of a count operator (2 subtasks, one value state) with N keys is written
   to local checkpoint storage, then landed with `land_checkpoint` (decode + Spark write of the
   five tables) and read back (`read_checkpoint(...).keyed_state.count()`).

Local Spark `local[2]`, UI off, 2 shuffle partitions. Prints markdown tables and writes JSON.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

from benchmarks.report import add_output_arguments, add_sized_argument, markdown_table, output_of, parse_args


def spark_session() -> Any:
    from spark_bridge.io.session import local_session

    spark = local_session("barrierflow-bench", cores=2, memory="2g", config={"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def bench_seeding(spark: Any, rows: int, splits: int, staging: str) -> dict[str, Any]:
    from runtime import StreamEnvironment
    from spark_bridge import from_spark

    df = spark.range(rows).selectExpr("id", "concat('u', cast(id % 10000 AS string)) AS user",
                                      "cast(id % 50 AS int) AS page",
                                      "timestamp_seconds(1700000000 + id) AS ts")
    df.count()  # materialise the plan once, so the write below is the hand-off only
    env = StreamEnvironment(parallelism=splits)
    started = time.perf_counter()
    stream = from_spark(env, df, splits=splits, staging_dir=staging)
    write_s = time.perf_counter() - started
    source = stream._node.source
    started = time.perf_counter()
    read = 0
    for split in source.splits():
        reader = source.reader(split, clock=None)
        while not reader.finished():
            read += len(reader.read(1000))
    read_s = time.perf_counter() - started
    assert read == rows, (read, rows)
    return {"rows": rows, "splits": splits, "spark_write_s": write_s, "source_read_s": read_s,
            "write_rows_per_s": rows / write_s, "read_rows_per_s": rows / read_s,
            "end_to_end_rows_per_s": rows / (write_s + read_s)}


def make_checkpoint(root: str, keys: int, job_id: str = "bench") -> int:
    """Write a checkpoint of a 2-subtask count operator holding `keys` keys; return its id."""
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.io.storage import storage_from_uri
    from state.key_groups import key_group_for, key_group_range_for_subtask
    from state.keyed import KeyedStateBackend
    from vocabulary.handles import TaskAcknowledgement, TaskId

    max_parallelism, parallelism, checkpoint_id = 128, 2, 1
    storage = storage_from_uri(root)
    backends = [KeyedStateBackend("count", key_group_range_for_subtask(max_parallelism, parallelism, s),
                                  max_parallelism) for s in range(parallelism)]
    for i in range(keys):
        key = f"user-{i}"
        group = key_group_for(key, max_parallelism)
        backend = next(b for b in backends if group in b.key_group_range)
        backend.set_current_key(key)
        backend.value_state("count", default=0).update(i % 1000 + 1)
    acks = {}
    for subtask, backend in enumerate(backends):
        blob = backend.snapshot(checkpoint_id).to_bytes()
        handle = storage.write_task_file(job_id, checkpoint_id, f"count-{subtask}-keyed", blob)
        task = TaskId("count", subtask)
        acks[task] = TaskAcknowledgement(task, checkpoint_id, {"keyed": (handle,)}, state_bytes=handle.size)
    storage.write_metadata(CompletedCheckpoint(job_id, checkpoint_id, 0.0, 0.1, acks))
    return checkpoint_id


def bench_landing(spark: Any, keys: int, workdir: str) -> dict[str, Any]:
    from checkpoint.io.storage import storage_from_uri
    from spark_bridge import land_checkpoint, read_checkpoint
    from spark_bridge.io.landing import resolve_checkpoint
    from spark_bridge.io.tables import checkpoint_tables

    root, target = os.path.join(workdir, f"chk-{keys}"), os.path.join(workdir, f"landed-{keys}")
    checkpoint_id = make_checkpoint(root, keys)
    state_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    completed, storage = resolve_checkpoint(storage_from_uri(root), checkpoint_id)
    started = time.perf_counter()
    tables = checkpoint_tables(completed, storage.read_task_file)
    decode_s = time.perf_counter() - started
    assert tables["keyed_state"].num_rows == keys
    started = time.perf_counter()
    land_checkpoint(spark, root, checkpoint_id, target)
    land_s = time.perf_counter() - started
    started = time.perf_counter()
    land_checkpoint(spark, root, checkpoint_id, target)  # idempotent re-landing
    reland_s = time.perf_counter() - started
    started = time.perf_counter()
    landed = read_checkpoint(spark, target).keyed_state.count()
    read_s = time.perf_counter() - started
    assert landed == keys, (landed, keys)
    return {"keys": keys, "checkpoint_bytes": state_bytes, "decode_s": decode_s, "land_s": land_s,
            "reland_s": reland_s, "read_back_s": read_s, "keys_per_s": keys / land_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser, "spark_bridge")
    add_sized_argument(parser, "--rows", full=1_000_000, quick=100_000, help="rows seeded from Spark")
    parser.add_argument("--splits", type=int, default=4, help="source splits (default 4)")
    add_sized_argument(parser, "--keys", full="10000,100000,1000000", quick="10000,100000", type=str,
                       help="keyed state sizes landed, comma separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row (default 1)")
    args = parse_args(parser, argv)
    spark = spark_session()
    workdir = tempfile.mkdtemp(prefix="barrierflow-bench-spark-")
    try:
        seeding = [bench_seeding(spark, args.rows, args.splits, os.path.join(workdir, f"seed-{i}"))
                   for i in range(args.repeat)]
        bench_landing(spark, 1000, os.path.join(workdir, "warm-up"))  # JIT and Spark's first write plan
        landing = [bench_landing(spark, int(k), workdir) for k in args.keys.split(",") for _ in range(args.repeat)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    table = (f"## Seeding a source from a Spark DataFrame\n\n{markdown_table(seeding)}\n\n"
             f"## Landing a checkpoint versus keyed state size\n\n{markdown_table(landing)}")
    print(table)
    files = output_of(args, "spark_bridge").write({"seeding": seeding, "landing": landing}, table)
    print(f"\nwrote {', '.join(files)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
