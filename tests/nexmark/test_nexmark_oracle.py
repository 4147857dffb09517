"""NexMark against Spark SQL: every query of `queries.QUERIES`, run on the simulator and on Ray with
crashes in every checkpoint mode, commits what Spark computes over the same events (Parquet files
the generator wrote): equal as a multiset under exactly-once (or the final row per key, for
updating queries), nothing missing under at-least-once. All queries share one job per run, each
into a sink of its own name."""

from __future__ import annotations

import pytest

from checkpoint.options import RestartStrategy
from runtime import FaultPlan, StreamEnvironment
from runtime.workloads import nexmark
from runtime.workloads.nexmark.dataset import write_events
from runtime.workloads.nexmark.oracle import disagreement, sink_queries, spark_answers
from runtime.workloads.nexmark.queries import QUERIES

EVENTS = 4_000
CONFIG = nexmark.NexmarkConfig(seed=3)
MODES = ["aligned", "unaligned", "aligned-timeout", "at-least-once"]


@pytest.fixture(scope="module")
def answers(spark, tmp_path_factory) -> tuple[str, dict]:
    path = str(tmp_path_factory.mktemp("nexmark"))
    write_events(CONFIG, EVENTS, path, files=2, row_group_rows=500)
    rows = spark_answers(spark, path, QUERIES.values())
    assert all(rows.values()), {name: len(r) for name, r in rows.items()}  # no query checks an empty answer
    return path, rows


def job(mode: str, *, interval: float, alignment_timeout: float, parquet: str | None = None,
        vectorised: bool = False) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=interval, mode=mode, tolerable_failures=1000,
                             alignment_timeout=alignment_timeout if mode == "aligned-timeout" else None)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.01))
    events = nexmark.events(env, CONFIG, EVENTS) if parquet is None else env.from_parquet(parquet, vectorised=vectorised)
    sink_queries(events, QUERIES.values(), vectorised=vectorised)
    return env


def check(result, answers: dict, mode: str) -> None:
    assert result.restarts >= 1, f"no crash happened: {result.failures}"
    problems = [problem for q in QUERIES.values()
                if (problem := disagreement(q, result.output(q.name), answers[q.name],
                                            exactly_once=mode != "at-least-once"))]
    assert not problems, "\n".join(problems) + f"\nreplay: {result.replay}"


@pytest.mark.spark
@pytest.mark.parametrize("mode", MODES)
def test_the_simulator_commits_what_spark_computes(answers, mode) -> None:
    seed = 30 + MODES.index(mode)
    result = job(mode, interval=0.002, alignment_timeout=0.0002).execute(
        "nexmark", executor="sim", seed=seed, faults=FaultPlan.random(seed=seed, crashes=2))
    check(result, answers[1], mode)


@pytest.mark.spark
def test_the_vectorised_queries_over_the_parquet_events_commit_what_spark_computes(answers) -> None:
    path, rows = answers
    result = job("unaligned", interval=0.002, alignment_timeout=0.0, parquet=path, vectorised=True).execute(
        "nexmark", executor="sim", seed=35, faults=FaultPlan.random(seed=35, crashes=2))
    check(result, rows, "unaligned")


@pytest.mark.spark
@pytest.mark.ray
@pytest.mark.parametrize("mode", MODES)
def test_ray_commits_what_spark_computes(ray_session, answers, mode) -> None:
    # plans whose crashes reach their record points in this job (a plan resolves the same way on the simulator)
    seed = 41 + MODES.index(mode)
    # two workers of six task slots: starting twelve actor processes would take most of the run
    result = job(mode, interval=0.05, alignment_timeout=0.002).execute(
        "nexmark", executor="ray", slots_per_worker=6, faults=FaultPlan.random(seed=seed, crashes=2))
    check(result, answers[1], mode)
