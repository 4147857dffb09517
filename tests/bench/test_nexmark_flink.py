"""Flink SQL beside barrierflow on NexMark (`benchmarks.nexmark_flink`): the same events through the
PyFlink peers venv, and Flink's results against barrierflow's committed output. A real Flink: it
fails, naming what is missing, when the venv is not there (`python -m benchmarks.peers --setup-venv`)."""

from __future__ import annotations

from benchmarks import peers
from benchmarks.nexmark_flink import compare, run_flink
from benchmarks.nexmark_job import build_job, make_env, query_output
from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.queries import QUERIES

CONFIG = NexmarkConfig(seed=5)
EVENTS = 3_000


def ours(query: str) -> list[dict]:
    env = make_env("aligned", parallelism=2, interval=0.002, alignment_timeout=0.0, storage=None)
    build_job(env, QUERIES[query], CONFIG, EVENTS, rate=None, anchor=None)
    return query_output(env.execute(f"nexmark-{query}", executor="sim", seed=1))


def test_flink_sql_computes_what_barrierflow_commits_over_the_same_events() -> None:
    assert peers.interpreter_for("pyflink") is not None, f"PyFlink is not installed: {peers.INSTALL_HINT}"
    queries = ["q1", "q3"]  # a decimal computed in both engines, and a join
    rows = run_flink(queries, ["aligned"], CONFIG, EVENTS, ours={q: ours(q) for q in queries})
    assert [(r["query"], r["mode"]) for r in rows] == [("q1", "aligned"), ("q3", "aligned")]
    for row in rows:
        assert row["status"] == "ok", row["status"]
        assert row["results"] == "equal", row["results"]
        assert row["throughput"] > 0 and row["flink_rows"] > 0


def test_a_difference_names_the_rows_on_each_side() -> None:
    q2 = QUERIES["q2"]
    mine = [{"auction": 1107, "price": 5}, {"auction": 1230, "price": 7}]
    assert compare(q2, mine, list(mine)) == "equal"
    assert compare(q2, mine, mine[:1]) == "q2: Flink misses 1 row(s), e.g. [{'auction': 1230, 'price': 7}]"
    assert compare(q2, mine[:1], mine) == "q2: Flink has, barrierflow not: 1 row(s), e.g. [{'auction': 1230, 'price': 7}]"
    assert compare(q2, None, mine).startswith("not compared")
