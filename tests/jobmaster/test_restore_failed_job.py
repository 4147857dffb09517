"""Issue 21's done-when, on the simulator: a job that failed for good (no restarts, a poison
record) is restored from its checkpoint directory in a fresh environment, at another parallelism
too, and its `SparkSink` output is exactly once. (`tests/ray/test_ray_restore.py`: the same on Ray.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.io.tools import load_checkpoint
from runtime.jobmaster.result import JobFailedError
from tests.jobmaster.restore_jobs import committed_output, expected_output, restore_env


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
