"""A job on a cluster of separately started Ray nodes (`ray start` head and worker processes on
127.0.0.1, token authentication on: `ray_nodes.py`) with its checkpoints on an S3 server (moto's:
`tests/s3_server.py`), as a user who outgrows one machine runs it:

1. submitted with `env.execute(executor="ray", address=...)`: with its checkpoints in a local
   folder it is refused (the nodes do not share it); with them on S3 its tasks run on both nodes;
   the worker node is killed mid-run (every one of its processes, by PID) and the job recovers on
   the head node, exactly once;
2. submitted with `barrierflow run --address ...` (a new worker node joined): its tasks run on both
   nodes; mid-run the whole cluster goes down (the driver and every node killed);
3. a new cluster: `restore_from("s3://...")` finishes that job with another parallelism, its
   output exactly once across both executions; then `benchmarks.throughput --address` makes a
   tiny run there (its figures are not looked at: a test measures nothing).

Each driver is a process of its own (`cluster_job.py`, or the CLI): a Ray driver keeps the token
and cluster it first joined. The S3 endpoint and credentials reach the drivers and the nodes as
environment variables (`AWS_ENDPOINT_URL`...), so the URIs are plain `s3://bucket/prefix`.
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_job import RECORDS, expected_output
from ray_nodes import RayCluster, RayNodeError

from runtime.ray.cluster import is_loopback

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.s3, pytest.mark.timeout(900)]

HERE = Path(__file__).resolve().parent
#: seconds a driver may take for a step (generous: the machine is shared)
STEP_TIMEOUT = 300.0


class Driver:
    """A driver process whose output lines are collected as they come (`PROGRESS`/`RESULT` JSON
    lines of `cluster_job.py`, or the CLI's plain progress lines)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path = HERE) -> None:
        self.process = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, matches: Callable[[str], Any], timeout: float = STEP_TIMEOUT) -> Any:
        """The first truthy `matches(line)` of a new line; fails when the driver ends or times out first."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._new.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                pytest.fail(f"the driver ended (code {self.process.wait()}) first:\n{self.output()}", pytrace=False)
            found = matches(line)
            if found:
                return found
        pytest.fail(f"not seen within {timeout:g} s:\n{self.output()}", pytrace=False)

    def line(self, kind: str) -> dict[str, Any]:
        """The JSON of the next `KIND {json}` line of `cluster_job.py`."""
        return self.wait_for(lambda line: line.startswith(f"{kind} ") and json.loads(line[len(kind) + 1:]))

    def result(self) -> dict[str, Any]:
        return self.line("RESULT")

    def progress(self) -> list[dict[str, Any]]:
        return [json.loads(line[len("PROGRESS "):]) for line in self.lines if line.startswith("PROGRESS ")]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=60)

    def output(self) -> str:
        return "\n".join(self.lines[-60:])


def job_driver(mode: str, cluster: RayCluster, storage: str, parallelism: int, job: str) -> Driver:
    return Driver([sys.executable, str(HERE / "cluster_job.py"), mode, cluster.address, storage, str(parallelism),
                   job], cluster.env)


def running(at_least: float) -> Callable[[str], dict[str, Any] | None]:
    """A `PROGRESS` line of the running phase past `at_least` of the input, a checkpoint completed."""
    def matches(line: str) -> dict[str, Any] | None:
        if not line.startswith("PROGRESS "):
            return None
        info = json.loads(line[len("PROGRESS "):])
        ok = (info.get("phase") == "running" and info["records in"] >= at_least * RECORDS
              and info["checkpoints completed"] >= 1)
        return info if ok else None
    return matches


def cli_running(at_least: float) -> Callable[[str], bool]:
    """A plain progress line of `barrierflow run`: running on two nodes past `at_least` of the
    input, a checkpoint completed."""
    def matches(line: str) -> bool:
        found = re.search(r"running: .*records in ([\d,]+), checkpoints completed ([\d,]+)", line)
        return bool(found and "task nodes 2" in line and int(found[1].replace(",", "")) >= at_least * RECORDS
                    and int(found[2].replace(",", "")) >= 1)
    return matches


def start_cluster(s3_server, name: str) -> RayCluster:
    # a short directory of its own: Ray's socket paths under it must fit in ~107 bytes
    cluster = RayCluster(Path(tempfile.mkdtemp(prefix=f"bf-{name}-", dir="/tmp")), env=s3_server.env())
    try:
        return cluster.start()
    except RayNodeError as exc:
        shutil.rmtree(cluster.tmp_dir, ignore_errors=True)
        pytest.fail(f"could not start a Ray cluster of separate nodes: {exc}", pytrace=False)


def stop_cluster(cluster: RayCluster) -> None:
    cluster.stop()
    shutil.rmtree(cluster.tmp_dir, ignore_errors=True)


def committed(output: list[list[Any]]) -> Counter:
    return Counter((app, count) for app, count in output)


def cli_launcher(folder: Path) -> Path:
    """A script running this checkout's `barrierflow` as the installed command does: from outside
    the current folder, which `run` then imports the job module from (and the workers with it)."""
    launcher = folder / "barrierflow_cli.py"
    launcher.write_text("import sys\nfrom runtime.cli import main\nsys.exit(main())\n")
    return launcher


def run_benchmark(cluster: RayCluster, storage: str, out: Path) -> dict[str, Any]:
    """A tiny `benchmarks.throughput --address` run on `cluster`; its JSON."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.throughput", "--executor", "ray", "--address",
                           cluster.address, "--checkpoint-dir", storage, "--records", "1500", "--rate", "1000",
                           "--steady-seconds", "1", "--warmup", "0.2", "--repeat", "1", "--no-bound",
                           "--json", str(out)],
                          env=cluster.env, cwd=HERE.parents[1], capture_output=True, text=True, timeout=STEP_TIMEOUT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return json.loads(out.read_text())


def test_a_job_on_separate_ray_nodes_survives_a_lost_node_and_restores_on_a_new_cluster(s3_server, s3_bucket,
                                                                                        tmp_path: Path) -> None:
    first = start_cluster(s3_server, "first")
    cli_storage = f"s3://{s3_bucket}/cli"
    try:
        # 1. env.execute(executor="ray", address=...): the worker node dies mid-run
        driver = job_driver("execute", first, f"s3://{s3_bucket}/execute", 2, "pv")
        refusal = driver.line("LOCAL_PATH")
        assert refusal["error"] and "shared pyarrow.fs URI" in refusal["error"], refusal
        before = driver.wait_for(running(0.3))
        sockets = first.head.listening()  # the head listens on loopback only; a worker node's raylet and
        # actors bind every interface where the machine has a default route (Ray's choice for a node
        # whose head it reached by name), behind the cluster's token
        assert {"gcs_server", "raylet"} <= {name for name, *_ in sockets}, sockets
        assert not [entry for entry in sockets if not is_loopback(entry[2])], f"listening beyond loopback: {sockets}"
        assert before["task nodes"] == 2, f"the tasks did not run on both nodes: {before}"
        assert first.workers[0].kill(), "the worker node had no processes"
        result = driver.result()
        assert committed(result["output"]) == expected_output(), "not exactly once after losing a node"
        assert any("died" in failure for failure in result["failures"]), result["failures"]
        # (the "restarting" line still counts the failed attempt's nodes; a replacement attempt
        # reports "task nodes" 0 until its tasks' first statuses arrive)
        recovered = [p["task nodes"] for p in driver.progress()
                     if p["restarts"] >= 1 and p["phase"] != "restarting" and p["task nodes"]]
        assert recovered and set(recovered) == {1}, driver.output()

        # 2. barrierflow run --address: a new worker node joins; the whole cluster goes down mid-run
        first.add_worker()
        cli = Driver([sys.executable, str(cli_launcher(tmp_path)), "run", "cluster_job:fragile", "--executor", "ray",
                      "--address", first.address, "--checkpoint-dir", cli_storage], first.env)
        cli.wait_for(cli_running(0.3))
        cli.kill()
        for node in [*first.workers, first.head]:
            node.kill()
    finally:
        stop_cluster(first)

    # 3. a new cluster restores the job from S3 with another parallelism
    second = start_cluster(s3_server, "second")
    try:
        restore = job_driver("restore", second, cli_storage, 3, "fragile")
        result = restore.result()
        assert result["restored"], "the job did not start from a checkpoint"
        assert committed(result["output"]) == expected_output(), "not exactly once across the two clusters"
        assert any(p["task nodes"] == 2 for p in restore.progress()), restore.output()
        bench = run_benchmark(second, f"s3://{s3_bucket}/bench", tmp_path / "throughput.json")
    finally:
        stop_cluster(second)
    assert bench["summary"]["nodes"] == 2 and bench["summary"]["address"] == second.address, bench["summary"]
    assert [r["run"] for r in bench["runs"]] == ["max rate aligned", "max rate no checkpoints", "steady aligned"]
