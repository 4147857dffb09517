"""`env.restore_from_landed(spark, target)` in a new process, on both executors: the job's sinks
commit what the failed run staged (its committer, kept beside its checkpoints, is found in the
restoring job's checkpoint directory), then the rest — every record once, in a `CollectSink` and
in a `SparkSink`, at another parallelism."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from landed_restore_job import expected, landed_job

from runtime import FaultPlan, TaskCrash
from runtime.jobmaster.result import JobFailedError

pytestmark = pytest.mark.spark

RUNNER = Path(__file__).with_name("landed_restore_job.py")
#: a user's environment: the runner finds this checkout itself
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def failed(spark, tmp_path_factory) -> Path:
    """A run that failed for good after completing checkpoints, each landed as it completed."""
    root = tmp_path_factory.mktemp("landed")
    env = landed_job(str(root / "ckpts"), str(root / "out"), 2).land_checkpoints_to(spark, str(root / "landed"))
    with pytest.raises(JobFailedError, match="TaskCrash after 4000 records"):
        env.execute("landed", executor="sim", seed=1, faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=4000)))
    return root


@pytest.mark.parametrize(("executor", "parallelism"), [("sim", 3), pytest.param("ray", 1, marks=pytest.mark.ray)])
@pytest.mark.timeout(600)
def test_a_landed_checkpoint_restores_in_a_new_process_every_record_once(failed: Path, tmp_path: Path, executor: str,
                                                                       parallelism: int) -> None:
    for part in ("ckpts", "out", "landed"):  # each restore from the failed run's state
        shutil.copytree(failed / part, tmp_path / part)
    done = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "ckpts"), str(tmp_path / "landed"),
                           str(tmp_path / "out"), executor, str(parallelism)], cwd=tmp_path,
                          env=USER_ENV, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pv"] == expected()  # what the failed run staged, committed, and the rest: once
    files = ds.dataset(str(tmp_path / "out"), format="parquet").to_table()
    assert sorted(map(list, zip(files.column("k").to_pylist(), files.column("count").to_pylist()))) == expected()
    assert report["restored"].startswith("checkpoint ") and f"count 2 -> {parallelism}" in report["restored"]
