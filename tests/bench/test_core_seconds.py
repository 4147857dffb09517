"""benchmarks.core_seconds: every process of the run in one category, the categories adding up to
the measured total; the arithmetic on made-up readings, then a tiny real run on Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.core_seconds import CATEGORIES, account, category, step_cores, worker_calls_per_s
from benchmarks.run_queue import steady_readings
from benchmarks.steady_jobs import SteadyJob, steady_job
from vocabulary.task_metrics import StepTimes

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cmdline,expected", [
    ("ray::WorkerActor", "task work"),
    ("ray::WorkerActor.call()", "task work"),
    ("ray::CoordinatorActor.status", "coordinator"),
    ("ray::CommitterService", "committer"),
    ("ray::BlobStoreService", "job services"),
    ("ray::IDLE", "idle workers"),
    ("ray::DashboardAgent", "dashboard agent"),
    ("ray::RuntimeEnvAgent", "runtime-env agent"),
    ("/x/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp", "GCS"),
    ("/x/ray/core/src/ray/raylet/raylet --raylet_socket_name=s", "raylet"),
    ("python /x/ray/dashboard/dashboard.py --host=127.0.0.1", "dashboard (API server)"),
    ("python -u /x/ray/_private/log_monitor.py --session-dir=s", "log monitor"),
    ("python -u /x/ray/autoscaler/_private/monitor.py --logs-dir=l", "autoscaler monitor"),
    ("python /x/ray/_private/workers/default_worker.py --node-ip-address=127.0.0.1", "idle workers"),
    ("python -c pass", None),
])
def test_a_process_is_known_by_its_command_line(cmdline: str, expected: str | None) -> None:
    assert category(cmdline) == expected


def test_the_categories_add_up_to_the_total_and_the_threads_to_the_task_work() -> None:
    before = {"roles": {1: "driver", 2: "task work", 3: "GCS"}, "cpu": {1: 1.0, 2: 10.0, 3: 0.5},
              "threads": {2: {20: ("main", 6.0), 21: ("io", 3.0), 22: ("gone", 1.0)}}}
    after = {"roles": {1: "driver", 2: "task work", 3: "GCS", 4: "idle workers"},  # 4: started in the window
             "cpu": {1: 1.5, 2: 13.0, 3: 0.75, 4: 0.25},
             "threads": {2: {20: ("main", 7.5), 21: ("io", 4.0), 23: ("work", 0.25)}}}
    window = account(before, after, 2.0)
    rows = {r["category"]: r for r in window["categories"]}
    assert window["total_core_s"] == pytest.approx(0.5 + 3.0 + 0.25 + 0.25)
    assert sum(r["core_s"] for r in rows.values()) == pytest.approx(window["total_core_s"])
    assert rows["task work"]["cores"] == pytest.approx(1.5)
    assert rows["idle workers"]["core_s"] == pytest.approx(0.25)
    threads = {r["thread"]: r["core_s"] for r in window["task_threads"]}
    assert threads == {"main": pytest.approx(1.5), "io": pytest.approx(1.0), "work": pytest.approx(0.25),
                       "threads ended": pytest.approx(0.25)}


@pytest.mark.ray
def test_a_tiny_run_accounts_for_every_core_second(tmp_path: Path) -> None:
    out = tmp_path / "core_seconds.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.core_seconds", "--quick", "--rate", "1000",
                           "--json", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    [run] = json.loads(out.read_text())["rounds"]
    rows = {r["category"]: r for r in run["categories"]}
    assert set(rows) <= set(CATEGORIES)
    assert sum(r["core_s"] for r in rows.values()) == pytest.approx(run["total_core_s"])
    for name in ("task work", "driver", "raylet", "GCS"):
        assert rows[name]["processes"] >= 1, rows
    assert rows["task work"]["processes"] == 2  # one worker actor per pipeline (parallelism 2)
    assert "other" not in rows, rows  # every process of the tree is recognised
    assert sum(t["core_s"] for t in run["task_threads"]) == pytest.approx(rows["task work"]["core_s"])
    assert "task work" in done.stdout and "total" in done.stdout


def test_step_cores_needs_every_task_in_a_process_of_its_own_for_the_cpu_outside_the_steps() -> None:
    alone = [StepTimes(steps=10, records=100, busy=1.0, cpu=1.5, calls=40),
             StepTimes(steps=5, records=50, busy=0.5, cpu=2.5, calls=20)]
    measured = step_cores(alone, 4.0)
    assert measured == {"steps_cores": pytest.approx(0.375), "outside_steps_cores": pytest.approx(0.625),
                        "data_calls_per_s": pytest.approx(15.0)}
    shared = [alone[0], StepTimes(steps=5, records=50, busy=0.5, calls=20)]  # cpu None: shares a process
    assert step_cores(shared, 4.0)["outside_steps_cores"] is None


def test_worker_calls_are_summed_over_workers_per_second_and_a_control_call_counts_once() -> None:
    calls = {"a[0]": {"push": 30, "heartbeat": 10, "control": 4, "control: trigger_source": 4,
                      "control: notify_complete": 4, "report (sent)": 4},
             "b[0]": {"push": 10, "add_credits": 20, "heartbeat": 10, "report (sent)": 2, "data frames (socket)": 30}}
    rates = worker_calls_per_s(calls, 2.0)
    assert rates["push"] == 20.0 and rates["heartbeat"] == 10.0 and rates["add_credits"] == 10.0
    assert rates["data frames (socket)"] == 15.0  # b's push and credits came as frames: counted once below
    assert rates["control"] == 2.0 and rates["control: trigger_source"] == 2.0 and rates["report (sent)"] == 3.0
    assert rates["all received"] == (40 + 20 + 20 + 4) / 2.0
    assert list(rates)[0] == "push"  # most first
    assert worker_calls_per_s({}, 2.0) == {"all received": 0.0}


def test_a_steady_job_knows_its_worker_actors_and_an_unknown_one_is_named() -> None:
    pipelines = steady_job("nexmark-q8", checkpoints=True, rate=100.0, seconds=1.0)
    alone = steady_job("nexmark-q8", checkpoints=True, rate=100.0, seconds=1.0, slots=1)
    assert pipelines.workers == 2  # parallelism 2, a worker per pipeline
    assert alone.workers > pipelines.workers  # a worker per subtask
    assert steady_job("udf", checkpoints=False, rate=100.0, seconds=1.0).workers == 2
    with pytest.raises(ValueError, match="nexmark-q99"):
        steady_job("nexmark-q99", checkpoints=True, rate=100.0, seconds=1.0)


def test_a_run_that_ends_before_the_second_reading_says_when_its_workers_were_up_and_when_it_ended() -> None:
    short = SteadyJob("short", lambda: time.sleep(0.3), workers=0, seconds=0.3, checkpoints=False)
    with pytest.raises(RuntimeError, match=r"short: the run ended 0\.\d s after submission, its 0 worker actors up "
                                           r"after 0\.\d s, before the second reading \(--start \+ --window = 1\.1 s"):
        steady_readings(short, 0.1, 1.0, os.getpid(), dict)


@pytest.mark.ray
def test_a_nexmark_query_with_an_actor_per_subtask_accounts_for_its_cores_inside_and_outside_the_steps(
        tmp_path: Path) -> None:
    out = tmp_path / "core_seconds.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.core_seconds", "--quick", "--job", "nexmark-q3",
                           "--slots-per-worker", "1", "--rate", "500", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    [run] = json.loads(out.read_text())["rounds"]
    rows = {r["category"]: r for r in run["categories"]}
    workers = steady_job("nexmark-q3", checkpoints=True, rate=500.0, seconds=5.0, slots=1).workers
    assert rows["task work"]["processes"] == workers, rows
    assert run["steps_cores"] > 0 and run["outside_steps_cores"] > 0 and run["data_calls_per_s"] > 0, run
    received = run["worker_calls_per_s"]
    # every subtask polled by heartbeats, data pushed, the sources triggered through control calls
    assert received["heartbeat"] > 0 and received["push"] > 0 and received["control: trigger_source"] > 0, received
    assert received["all received"] >= received["push"] + received["heartbeat"] + received["control"], received
    assert "worker calls per second: push" in done.stdout
    assert run["latency_p99_ms"] is None  # NexMark's sink stamps commit times, not latencies
    assert "outside the steps" in done.stdout and "the sink stamps no latency" in done.stdout
