"""Spark as the oracle: DataFrame → from_spark → keyed count → SparkSink, with crashes injected.

The committed output, read back by Spark, must equal `df.groupBy("user").count()` computed by
Spark: exactly (no row lost, none repeated) under exactly-once; with nothing lost under
at-least-once.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from runtime import FaultPlan, StreamEnvironment
from spark_bridge import SparkSink, from_spark
from vocabulary.options import CheckpointingMode, RestartStrategy

pytestmark = pytest.mark.spark

ROWS = 200_000


@pytest.fixture(scope="module")
def pageviews(spark):
    df = spark.range(ROWS).selectExpr("id", "concat('u', cast((id * 7919) % 997 AS string)) AS user",
                                      "cast(id % 13 AS int) AS page")
    oracle = df.groupBy("user").count().withColumnRenamed("count", "n").cache()
    assert oracle.count() == 997
    return df, oracle


def run(df, out: str, mode: CheckpointingMode, seed: int, *, unaligned: bool = False):
    env = StreamEnvironment(parallelism=2, buffer_size=500, credits=4)
    env.enable_checkpointing(interval=0.05, mode=mode, unaligned=unaligned, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.01))
    (from_spark(env, df, splits=4)
     .key_by("user").count()
     .sink_to(SparkSink(out)))
    return env.execute("oracle", executor="sim", seed=seed, faults=FaultPlan.random(seed=seed, crashes=2))


@pytest.mark.parametrize(("seed", "unaligned"), [(11, False), (12, True)], ids=["aligned", "unaligned"])
def test_exactly_once_equals_spark_group_by_count(spark, pageviews, tmp_path, seed, unaligned) -> None:
    df, oracle = pageviews
    out = str(tmp_path / "counts")
    result = run(df, out, CheckpointingMode.EXACTLY_ONCE, seed, unaligned=unaligned)
    assert result.restarts >= 1, "the fault plan should have crashed the job"

    counts = spark.read.parquet(out)
    assert counts.count() == ROWS  # one running count per input row: none lost, none repeated
    assert counts.select("user", "count").distinct().count() == ROWS
    final = counts.groupBy("user").agg(F.max("count").alias("n"), F.count("*").alias("rows"))
    assert final.where("n != rows").count() == 0
    assert final.select("user", "n").exceptAll(oracle).count() == 0
    assert oracle.exceptAll(final.select("user", "n")).count() == 0
    # the job's own view agrees with Spark's
    assert result.final_state["count"]["count"] == {r["user"]: r["n"] for r in oracle.collect()}


def test_at_least_once_loses_nothing(spark, pageviews, tmp_path) -> None:
    df, oracle = pageviews
    out = str(tmp_path / "counts")
    result = run(df, out, CheckpointingMode.AT_LEAST_ONCE, 13)
    assert result.restarts >= 1
    counts = spark.read.parquet(out)
    # every (user, k) for k = 1..n must be there; repeats are allowed
    covered = (counts.join(oracle, "user").where("count <= n").select("user", "count").distinct()
               .groupBy("user").count().withColumnRenamed("count", "n"))
    assert covered.exceptAll(oracle).count() == 0 and oracle.exceptAll(covered).count() == 0
    assert counts.count() >= ROWS
