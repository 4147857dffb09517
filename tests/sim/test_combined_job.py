"""One job over every event-time operator on the simulator (`runtime.workloads.combined`): tumbling,
sliding and session windows with late data to a side output, a keyed co-process with timers, an
interval join, a window join and a co-group, over out-of-order sources, commits exactly the output
of a plain-Python reference through crashes in every exactly-once mode, loses nothing under
at-least-once, and restores from a failed run's checkpoint at another parallelism."""

from __future__ import annotations

import pytest
from sim_jobs import event_time_env

from runtime import FaultPlan, JobFailedError, StreamEnvironment, TaskCrash
from runtime.checker.invariants import InvariantChecker
from runtime.workloads.combined import build_combined_job, check, combined_rows

#: whole jobs of every event-time operator, several seconds each: the full run's
pytestmark = pytest.mark.slow

LEFT, RIGHT = combined_rows(600)
#: crashes in a session merge's operator, the co-process with timers, the interval join and the window join
CRASHES = FaultPlan.of(TaskCrash(task="sessions[0]", after_records=100), TaskCrash(task="balance[0]", after_records=300),
                       TaskCrash(task="pair[0]", after_records=500), TaskCrash(task="window-pair[0]", after_records=700))


def combined_env(mode: str = "aligned", parallelism: int = 2, storage: str | None = None, restarts: bool = True,
                 **options) -> StreamEnvironment:
    env = event_time_env(mode, parallelism, storage, restarts, **options)
    build_combined_job(env, LEFT, RIGHT, splits=3)
    return env


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "aligned-timeout"])
def test_the_combined_job_commits_exactly_the_reference_through_crashes(mode):
    checker = InvariantChecker()
    result = combined_env(mode).execute("combined", executor="sim", seed=4, faults=CRASHES, invariants=checker)
    assert result.restarts == 4, result.failures
    check(result, LEFT, RIGHT)
    assert checker.checks["window-fires-after-end"] > 0 and checker.checks["window-record-accounted"] > 0


def test_the_combined_job_loses_nothing_at_least_once():
    result = combined_env("at-least-once").execute("combined", executor="sim", seed=4, faults=CRASHES)
    assert result.restarts == 4, result.failures
    check(result, LEFT, RIGHT, exactly_once=False)


@pytest.mark.parametrize(("backend", "merging", "mode", "parallelism"),
                         [("incremental", True, "aligned", 3), ("memory", False, "unaligned", 1)])
def test_the_combined_job_restores_at_another_parallelism(tmp_path, backend, merging, mode, parallelism):
    storage = str(tmp_path / "ckpt")
    options = {"state_backend": backend, "file_merging": merging}
    with pytest.raises(JobFailedError):
        combined_env(mode, storage=storage, restarts=False, **options).execute(
            "combined", executor="sim", seed=4, faults=FaultPlan.of(TaskCrash(task="balance[0]", after_records=300)))
    restored = combined_env(mode, parallelism=parallelism, storage=storage, **options).restore_from(storage)
    result = restored.execute("combined", executor="sim", seed=4, invariants=True,
                              faults=FaultPlan.of(TaskCrash(task="window-group[0]", after_records=100)))
    assert result.restarts == 1, result.failures
    check(result, LEFT, RIGHT)  # committed by both executions, each result once
