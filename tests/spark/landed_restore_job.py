"""A job with a `CollectSink` and a `SparkSink`, restored from a landed checkpoint in a process of
its own, as a user restores one after the process that ran it is gone:

    python tests/spark/landed_restore_job.py CHECKPOINTS LANDED OUT EXECUTOR PARALLELISM

prints, as JSON, what the `CollectSink` committed and where the run started from."""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: this checkout's packages, as `tests/api/cli_launcher.py` does
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from operators import CollectSink  # noqa: E402
from runtime import RestartStrategy, StreamEnvironment  # noqa: E402
from spark_bridge import SparkSink  # noqa: E402

ROWS = [{"k": i % 3} for i in range(6000)]


def landed_job(checkpoints: str, out: str, parallelism: int) -> StreamEnvironment:
    """keyBy -> count -> a `CollectSink` and a `SparkSink` (files under `out`); unaligned
    checkpoints in `checkpoints`; no restarts."""
    env = StreamEnvironment(parallelism=parallelism)
    env.enable_checkpointing(interval=0.002, storage=checkpoints, unaligned=True)
    env.set_restart_strategy(RestartStrategy.no_restart())
    counts = env.from_collection(ROWS, splits=2).key_by("k").count()
    counts.sink_to(CollectSink("pv"))
    counts.sink_to(SparkSink(out, name="files"))
    return env


def expected() -> list[list[int]]:
    """Every (k, n) for n = 1..2000, once."""
    return sorted([k, n] for k in range(3) for n in range(1, 2001))


if __name__ == "__main__":
    from spark_bridge import local_session

    checkpoints, landed, out, executor, parallelism = sys.argv[1:6]
    spark = local_session()
    try:
        env = landed_job(checkpoints, out, int(parallelism)).restore_from_landed(spark, landed)
        result = env.execute("landed", executor=executor)
    finally:
        spark.stop()
    print(json.dumps({"pv": sorted([r["k"], r["count"]] for r in result.output("pv")),
                      "restored": result.restored_from.describe(result.parallelism)}))
