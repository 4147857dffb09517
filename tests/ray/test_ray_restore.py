"""Issue 21's done-when, on Ray: a job that failed for good (no restarts, a poison record) is
restored from its checkpoint directory in a fresh environment, at another parallelism too, and
its `SparkSink` output is exactly once; every completed checkpoint is landed while the job runs.
(`tests/jobmaster/test_restore_failed_job.py`: the same on the simulator.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.tools import load_checkpoint
from runtime.result import JobFailedError
from tests.jobmaster.restore_jobs import committed_output, expected_output, restore_env

#: wall seconds per record in "check": the first execution completes checkpoints before the poison
DELAY = 0.0003


def fail_then_restore(tmp_path: Path, parallelism: int, *, unaligned: bool = False, listeners=()):
    first, out = tmp_path / "first", tmp_path / "out"
    with pytest.raises(JobFailedError, match="failed after 0 restart.*poison record 2200"):
        restore_env(first, out, parallelism=2, poison=True, unaligned=unaligned, interval=0.05,
                    buffer_size=64, delay=DELAY).execute("job", executor="ray")
    restored_from = load_checkpoint(str(first))[0].checkpoint_id
    env = restore_env(tmp_path / "second", out, parallelism=parallelism, poison=False, unaligned=unaligned,
                      interval=0.05, buffer_size=64)
    env._checkpoint_listeners.extend(listeners)
    result = env.restore_from(str(first)).execute("job", executor="ray")
    assert all(c.id > restored_from for c in result.checkpoints)  # ids continue after the restored one
    assert result.metrics.records_in < 3000  # it resumed instead of starting over
    return result, out


@pytest.mark.parametrize("parallelism", [1, 3])
def test_a_failed_job_restores_aligned_at_another_parallelism_exactly_once(ray_session, tmp_path: Path,
                                                                            parallelism: int) -> None:
    _, out = fail_then_restore(tmp_path, parallelism)
    assert committed_output(out) == expected_output()


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_failed_job_restores_at_the_same_parallelism_exactly_once(ray_session, tmp_path: Path,
                                                                     unaligned: bool) -> None:
    _, out = fail_then_restore(tmp_path, 2, unaligned=unaligned)
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
