"""On Ray: a job that failed for good (no restarts, a poison record) is
restored from its checkpoint directory in a fresh environment, at another parallelism too, and
its `SparkSink` output is exactly once; every completed checkpoint is landed while the job runs.
(`tests/jobmaster/test_restore_failed_job.py`: the same on the simulator.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from checkpoint.io.tools import load_checkpoint
from runtime.jobmaster.result import JobFailedError
from tests.jobmaster.restore_jobs import committed_output, expected_output, restore_env

pytestmark = pytest.mark.ray

#: wall seconds per record in "check": the first execution completes checkpoints before the poison
DELAY = 0.0003


@pytest.fixture(scope="module")
def failed(ray_session, tmp_path_factory):
    """mode -> (checkpoint directory, output directory) of a run that failed for good; each mode's
    run happens once and is shared (the restores copy its output directory)."""
    runs: dict[str, tuple[Path, Path]] = {}

    def get(mode: str) -> tuple[Path, Path]:
        if mode not in runs:
            root = tmp_path_factory.mktemp(f"failed-{mode}")
            with pytest.raises(JobFailedError, match="failed after 0 restart.*poison record 2200"):
                restore_env(root / "first", root / "out", parallelism=2, poison=True, unaligned=mode == "unaligned",
                            interval=0.05, buffer_size=64, delay=DELAY).execute("job", executor="ray")
            runs[mode] = root / "first", root / "out"
        return runs[mode]

    return get


def restore(failed, tmp_path: Path, parallelism: int, mode: str = "aligned") -> Path:
    first, failed_out = failed(mode)
    out = tmp_path / "out"
    shutil.copytree(failed_out, out)
    restored_from = load_checkpoint(str(first))[0].checkpoint_id
    env = restore_env(tmp_path / "second", out, parallelism=parallelism, poison=False,
                      unaligned=mode == "unaligned", interval=0.05, buffer_size=64)
    result = env.restore_from(str(first)).execute("job", executor="ray")
    assert all(c.id > restored_from for c in result.checkpoints)  # ids continue after the restored one
    assert result.metrics.records_in < 3000  # it resumed instead of starting over
    return out


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_failed_job_restores_at_another_parallelism_exactly_once(failed, tmp_path: Path, parallelism: int,
                                                                   mode: str) -> None:
    assert committed_output(restore(failed, tmp_path, parallelism, mode)) == expected_output()


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_failed_job_restores_at_the_same_parallelism_exactly_once(failed, tmp_path: Path, mode: str) -> None:
    assert committed_output(restore(failed, tmp_path, 2, mode)) == expected_output()


def test_a_job_failed_before_its_first_checkpoint_restores_from_the_beginning_exactly_once(ray_session,
                                                                                            tmp_path: Path) -> None:
    """The interval is longer than the failed run, so no checkpoint of it began: the run's record of
    its job in the directory makes the restore start over, every record once."""
    first, out = tmp_path / "first", tmp_path / "out"
    with pytest.raises(JobFailedError, match="poison record 2200"):
        restore_env(first, out, parallelism=2, poison=True, interval=600.0, buffer_size=64).execute(
            "job", executor="ray")
    assert not list((first / "job").glob("chk-*")), "a checkpoint began"
    env = restore_env(tmp_path / "second", out, parallelism=3, poison=False, interval=0.05, buffer_size=64)
    result = env.restore_from(str(first)).execute("job", executor="ray")
    assert result.restored_from.describe(result.parallelism).startswith("the beginning: no checkpoint of job 'job'")
    assert committed_output(out) == expected_output()


class RecordingListener:
    """A checkpoint listener as `land_checkpoints_to` installs (its `close` is called at the end)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.closed = False

    def __call__(self, completed, storage) -> None:
        # the files are readable when the listener runs, even if the store deleted them since
        self.seen.append((completed.checkpoint_id, sum(len(storage.read_task_file(h))
                                                        for h in completed.state_handles())))

    def close(self) -> None:
        self.closed = True


def test_every_completed_checkpoint_reaches_the_listeners_while_the_job_runs(ray_session, tmp_path: Path) -> None:
    listener = RecordingListener()
    env = restore_env(tmp_path / "ckpt", tmp_path / "out", parallelism=2, poison=False, interval=0.05,
                      buffer_size=64, delay=DELAY / 3)
    env._checkpoint_listeners.append(listener)
    result = env.execute("job", executor="ray")
    assert [i for i, _ in listener.seen] == [c.id for c in result.completed_checkpoints]
    assert len(listener.seen) >= 2 and all(size > 0 for _, size in listener.seen) and listener.closed
