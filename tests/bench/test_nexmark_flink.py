"""Flink SQL beside barrierflow on NexMark (`benchmarks.nexmark_flink`): the same events through the
PyFlink peers venv, and Flink's results against barrierflow's committed output. A real Flink: it
fails, naming what is missing, when the venv is not there (`python -m benchmarks.peers --setup-venv`)."""

from __future__ import annotations

import pytest

from benchmarks import peers
from benchmarks.nexmark_flink import compare, flink_outputs, run_flink
from benchmarks.nexmark_job import build_job, make_env, query_output
from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.queries import QUERIES

#: a real Flink (a JVM per job): slow, and alone on the machine
pytestmark = [pytest.mark.slow, pytest.mark.serial]

EVENTS = 3_000
#: 3,000 events over 60 s of event time (several 10 s windows, hop windows and sessions), each
#: event up to 140 ms behind one before it: the watermark's bound on both sides
CONFIG = NexmarkConfig(seed=5, event_rate=50, out_of_order_group_size=8)


def ours(query: str) -> list[dict]:
    env = make_env("aligned", parallelism=2, interval=0.002, alignment_timeout=0.0, storage=None)
    build_job(env, QUERIES[query], CONFIG, EVENTS, rate=None, anchor=None)
    return query_output(env.execute(f"nexmark-{query}", executor="sim", seed=1))


def test_flink_sql_windows_and_joins_compute_what_barrierflow_commits_over_the_same_events() -> None:
    assert peers.interpreter_for("pyflink") is not None, f"PyFlink is not installed: {peers.INSTALL_HINT}"
    # one Flink job for all of them: a decimal, a regular join, the sliding, tumbling and session
    # windows and the window join
    queries = ["q1", "q3", "q5", "q8", "q11"]
    theirs = flink_outputs(queries, "aligned", CONFIG, EVENTS)
    assert sorted(theirs) == sorted(queries)
    for q in queries:
        mine = ours(q)
        assert mine, f"{q}: barrierflow committed nothing, so the comparison would say nothing"
        assert compare(QUERIES[q], mine, theirs[q]) == "equal", q


def test_a_flink_row_has_throughput_checkpoints_and_results_equal_to_ours() -> None:
    assert peers.interpreter_for("pyflink") is not None, f"PyFlink is not installed: {peers.INSTALL_HINT}"
    # q7: a tumbling-window maximum joined back with the bids, read in event order
    rows = run_flink(["q7"], ["aligned"], CONFIG, EVENTS, ours={"q7": ours("q7")})
    assert [(r["query"], r["mode"]) for r in rows] == [("q7", "aligned")]
    row = rows[0]
    assert row["status"] == "ok", row["status"]
    assert row["results"] == "equal", row["results"]
    assert row["throughput"] > 0 and row["flink_rows"] > 0
    assert row["checkpoints_completed"] >= 1 and row["checkpoint_duration_p50"] is not None
    # Flink's own per-checkpoint figures from its REST API: every checkpoint it completed (as many
    # as its log says), each with its longest subtask alignment and start delay
    assert row["rest_checkpoints_read"] == row["rest_checkpoints_completed"] == row["checkpoints_completed"]
    assert 0 <= row["alignment_time_p50"] <= row["alignment_time_p99"] <= row["alignment_time_max"]
    assert row["start_delay_p50"] >= 0 and row["checkpointed_bytes_p50"] > 0
    assert row["persisted_bytes"] == 0  # aligned: no in-flight data in any checkpoint
    # written as files, as barrierflow writes its own: in the JobManager's memory a checkpoint above
    # 5 MB fails and the job restarts for ever (q7's join at 1M events)
    assert row["checkpoints_in_files"] == row["rest_checkpoints_read"]


def test_a_difference_names_the_rows_on_each_side() -> None:
    q2 = QUERIES["q2"]
    mine = [{"auction": 1107, "price": 5}, {"auction": 1230, "price": 7}]
    assert compare(q2, mine, list(mine)) == "equal"
    assert compare(q2, mine, mine[:1]) == "q2: Flink misses 1 row(s), e.g. [{'auction': 1230, 'price': 7}]"
    assert compare(q2, mine[:1], mine) == "q2: Flink has, barrierflow not: 1 row(s), e.g. [{'auction': 1230, 'price': 7}]"
    assert compare(q2, None, mine).startswith("not compared")


def test_rounds_merge_into_a_median_row_with_spreads_and_every_verdict() -> None:
    from benchmarks import peer_rows
    from benchmarks.nexmark_flink import merged_rows

    def run(throughput: float, results: str) -> dict:
        row = peer_rows.row("flink-sql", "aligned", throughput=throughput, records=1_000)
        return {**row, "scenario": "nexmark-q1", "query": "q1", "results": results}

    failed = {**peer_rows.failed("flink-sql", "aligned", "the JVM died"), "scenario": "nexmark-q1", "query": "q1"}
    [row] = merged_rows({("q1", "aligned"): [run(300.0, "equal"), failed, run(100.0, "equal"), run(200.0, "equal")]})
    assert row["throughput"] == 200.0 and row["throughput_spread"] == [100.0, 300.0]
    assert row["results"] == "equal; failed: the JVM died"
    assert len(row["runs"]) == 4


@pytest.mark.parametrize(("load", "contended"), [(3.0, False), (4.0, True)])
def test_a_flink_row_is_contended_only_by_what_else_ran(monkeypatch, load, contended) -> None:
    """Flink's own JVM (1.5 cores here) is the run, not contention: a load of 3 on 2 cores is 1.5
    beyond it; a load of 4 is 2.5, more than the cores."""
    import os

    from benchmarks import nexmark_flink, peer_rows
    from runtime.calibration.machine_load import LoadSampler

    cpu = {"own": 0.0}
    now = {"t": 0.0}

    def run_one(query, mode, directory, config, events):
        cpu["own"] += 1.5
        now["t"] += 1.0
        return peer_rows.row("flink-sql", mode, throughput=10.0, records=events), []

    def sampler() -> LoadSampler:
        return LoadSampler(period=60.0, clock=lambda: now["t"], loadavg=lambda: load,
                           machine_cpu=lambda: cpu["own"], process_cpu=lambda pid: cpu["own"],
                           descendants=lambda root: [root], cores=2)

    monkeypatch.setattr(nexmark_flink, "run_one", run_one)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    with nexmark_flink.FlinkRounds(["q1"], ["aligned"], NexmarkConfig(seed=5), 20, sampler=sampler) as rounds:
        rounds.run_round(0)
    [row] = rounds.runs[("q1", "aligned")]
    assert row["contended"] is contended
    assert row["load_average"] == load and row["other_cpu_share"] == 0.0 and row["cores"] == 2
