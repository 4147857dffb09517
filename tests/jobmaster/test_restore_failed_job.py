"""On the simulator: a job that failed for good (no restarts, a poison
record) is restored from its checkpoint directory in a fresh environment, at another parallelism
too, and its `SparkSink` output is exactly once. (`tests/ray/test_ray_restore.py`: the same on Ray.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.io.tools import CheckpointToolError, list_jobs, load_checkpoint, open_checkpoints
from runtime import FaultPlan, TaskCrash
from runtime.jobmaster.result import JobFailedError
from tests.jobmaster.restore_jobs import collect_job, committed_output, expected_output, restore_env


def fail_then_restore(tmp_path: Path, parallelism: int, *, unaligned: bool) -> tuple[object, Path]:
    first, out = tmp_path / "first", tmp_path / "out"
    with pytest.raises(JobFailedError, match="failed after 0 restart.*poison record 2200"):
        restore_env(first, out, parallelism=2, poison=True, unaligned=unaligned).execute("job", executor="sim", seed=5)
    restored_from = load_checkpoint(str(first))[0].checkpoint_id  # it failed after a checkpoint
    env = restore_env(tmp_path / "second", out, parallelism=parallelism, poison=False, unaligned=unaligned)
    result = env.restore_from(str(first)).execute("job", executor="sim", seed=6)
    assert min(c.id for c in result.checkpoints) > restored_from  # ids continue after the restored one
    return result, out


def channel_state_bytes(location: Path) -> int:
    """Persisted in-flight data in the newest checkpoint at `location` (unaligned: > 0 means a
    rescaling restore redistributes channel state, not just keyed state)."""
    completed, _ = load_checkpoint(str(location))
    return sum(h.size for ack in completed.acks.values()
               for kind in ("input_channels", "output_channels") for h in ack.handles.get(kind, ()))


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_failed_job_restores_at_another_parallelism_exactly_once(tmp_path: Path, parallelism: int,
                                                                   unaligned: bool) -> None:
    result, out = fail_then_restore(tmp_path, parallelism, unaligned=unaligned)
    if unaligned:
        assert channel_state_bytes(tmp_path / "first") > 0
    assert committed_output(out) == expected_output()
    assert result.metrics.records_in < 3000  # it resumed instead of starting over


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_failed_job_restores_at_the_same_parallelism_exactly_once(tmp_path: Path, unaligned: bool) -> None:
    result, out = fail_then_restore(tmp_path, 2, unaligned=unaligned)
    assert committed_output(out) == expected_output()
    assert result.metrics.records_in < 3000


@pytest.fixture
def failed_before_any_checkpoint(tmp_path: Path) -> Path:
    """A run that failed for good after triggering checkpoint 1 (its files and a staged sink
    transaction are there) but before completing any checkpoint."""
    with pytest.raises(JobFailedError):
        collect_job(tmp_path / "ckpts").execute("job", executor="sim", seed=1,
                                                faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=3000)))
    assert list((tmp_path / "ckpts" / "job" / "chk-1").rglob("*.operator")), "checkpoint 1 was begun"
    assert not (tmp_path / "ckpts" / "job" / "chk-1" / "_metadata").exists()
    return tmp_path / "ckpts"


def test_a_run_that_completed_no_checkpoint_restores_from_the_beginning(failed_before_any_checkpoint: Path,
                                                                        caplog) -> None:
    env = collect_job(failed_before_any_checkpoint, parallelism=3).restore_from(str(failed_before_any_checkpoint))
    assert "starts from the beginning, as a failover would have" in caplog.text
    result = env.execute("job", executor="sim", seed=2)
    assert sorted((r["k"], r["count"]) for r in result.output("out")) == \
        sorted((k, n) for k in range(3) for n in range(1, 2001))  # every record once
    assert result.restored_checkpoints == [None] and result.restored_from.checkpoint_id is None
    assert result.restored_from.describe(result.parallelism).startswith(
        "the beginning: no checkpoint of job 'job' in ")


def test_starting_over_is_refused_when_output_was_committed(failed_before_any_checkpoint: Path) -> None:
    committed = next((failed_before_any_checkpoint / "job" / "committed").iterdir())
    (committed / "commit-0000000001.txn").write_bytes(b"output a completed checkpoint once made visible")
    with pytest.raises(CheckpointToolError, match=r"committer holds committed output .*commit-0000000001.txn"):
        collect_job(failed_before_any_checkpoint).restore_from(str(failed_before_any_checkpoint))


def test_a_run_that_failed_before_its_first_checkpoint_began_restores_from_the_beginning(tmp_path: Path,
                                                                                         caplog) -> None:
    """No checkpoint was triggered at all (a crash in the first records, or a slow start on Ray):
    the job's directory still says the job ran there, so the restore starts over, as it does when
    checkpoint 1 began and never completed."""
    env = collect_job(tmp_path / "ckpts")
    env.enable_checkpointing(interval=60.0, storage=str(tmp_path / "ckpts"))  # never before the crash
    with pytest.raises(JobFailedError):
        env.execute("job", executor="sim", seed=1, faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=5)))
    assert not list((tmp_path / "ckpts" / "job").glob("chk-*")), "no checkpoint was begun"
    assert list_jobs(open_checkpoints(str(tmp_path / "ckpts"))) == ["job"]
    env = collect_job(tmp_path / "ckpts", parallelism=3).restore_from(str(tmp_path / "ckpts"), job_id="job")
    assert "no checkpoint of job 'job' in" in caplog.text and "was taken" in caplog.text
    result = env.execute("job", executor="sim", seed=2)
    assert sorted((r["k"], r["count"]) for r in result.output("out")) == \
        sorted((k, n) for k in range(3) for n in range(1, 2001))  # every record once
    assert result.restored_checkpoints == [None]


def test_a_job_that_never_ran_in_the_directory_is_not_started_over(tmp_path: Path) -> None:
    """Starting over is for a job known to have run there: a job named wrongly, or a directory
    given wrongly, is an error naming the jobs that are there."""
    collect_job(tmp_path / "ckpts").execute("job", executor="sim", seed=1)
    with pytest.raises(CheckpointToolError, match=r"no checkpoints of job 'jbo' in .*; jobs: \['job'\]"):
        collect_job(tmp_path / "ckpts").restore_from(str(tmp_path / "ckpts"), job_id="jbo")
