"""One job over every event-time operator on Ray (`runtime.workloads.combined`, the job
`tests/sim/test_combined_job.py` runs on the simulator): tumbling, sliding and session windows with
late data to a side output, a keyed co-process with event-time timers, an interval join, a window
join and a co-group commit exactly the plain-Python reference through crashes, aligned, unaligned
and with an alignment timeout, and after a restore at another parallelism.

Every run crashes the coordinator right after the first checkpoint became durable
(`CoordinatorCrashBeforeNotify(nth=0)`), so a recovery restores a completed checkpoint whatever
the pace of the machine; the task crashes sit at a fraction of their task's records (or at the
end of its input, if that comes first), before or after that checkpoint."""

from __future__ import annotations

import pytest

from runtime import FaultPlan, JobFailedError, StreamEnvironment, TaskCrash
from runtime.workloads.combined import build_combined_job, check, combined_rows
from vocabulary.fault_plan import CoordinatorCrashBeforeNotify, TaskCrashDuringRecovery
from vocabulary.options import RestartStrategy

LEFT, RIGHT = combined_rows(300)
#: tasks per worker actor: the job has 21 vertices, and an actor process per task would take most of the run
SLOTS = 32
#: a crash in a session merge's operator, in the co-process with timers, in the interval join, in the window join
TASK_CRASH = {"aligned": "sessions[0]", "unaligned": "balance[0]", "aligned-timeout": "pair[0]",
              "at-least-once": "window-pair[0]"}


def combined_env(mode: str, parallelism: int, storage: str | None = None, attempts: int = 10) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=16, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, mode=mode, tolerable_failures=1000, storage=storage,
                             alignment_timeout=0.002 if mode == "aligned-timeout" else None)
    env.set_auto_watermark_interval(0.02)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=attempts, delay=0.01))
    build_combined_job(env, LEFT, RIGHT, splits=3)
    return env


def assert_both_crashes_struck(result, task: str) -> None:
    """The task crash failed the job over, and the coordinator crash struck: listed as a failover of
    its own, or not listed when it came while the task's failover was cancelling the attempt (that
    failover covers it; how soon the first checkpoint completes decides which)."""
    failures = sorted(f.split(": injected fault: ")[0] for f in result.failures)
    assert failures in (["coordinator crash", f"task {task} failed"], [f"task {task} failed"]), result.failures
    assert result.coordinator_crashes == 1, (result.coordinator_crashes, result.failures)


@pytest.mark.ray
@pytest.mark.parametrize("mode", ["aligned", "unaligned", "aligned-timeout"])
def test_the_combined_job_commits_exactly_the_reference_through_crashes_on_ray(ray_session, mode) -> None:
    task = TASK_CRASH[mode]
    plan = FaultPlan.of(CoordinatorCrashBeforeNotify(nth=0), TaskCrash(task=task, at_fraction=0.7))
    result = combined_env(mode, 2).execute("combined-ray", executor="ray", slots_per_worker=SLOTS, faults=plan)
    assert_both_crashes_struck(result, task)
    # the recovery from the coordinator crash restored checkpoint 1 or a later one
    assert [c for c in result.restored_checkpoints if c is not None], result.restored_checkpoints
    check(result, LEFT, RIGHT)


@pytest.mark.ray
def test_the_combined_job_loses_nothing_at_least_once_through_crashes_on_ray(ray_session) -> None:
    """The tracker never blocks a channel, so a restored checkpoint may hold the effect of records
    that are replayed: results may repeat or count a record twice, but every reference result is
    there, and nothing is that the reference lacks."""
    task = TASK_CRASH["at-least-once"]
    plan = FaultPlan.of(CoordinatorCrashBeforeNotify(nth=0), TaskCrash(task=task, at_fraction=0.7))
    result = combined_env("at-least-once", 2).execute("combined-ray", executor="ray", slots_per_worker=SLOTS,
                                                      faults=plan)
    assert_both_crashes_struck(result, task)
    assert [c for c in result.restored_checkpoints if c is not None], result.restored_checkpoints
    check(result, LEFT, RIGHT, exactly_once=False)


@pytest.mark.ray
def test_the_combined_job_restores_at_another_parallelism_on_ray(ray_session, tmp_path) -> None:
    """The first run fails for good once checkpoint 1 is durable (its one restart goes to the
    coordinator crash, the task crash during that recovery ends it); a run at parallelism 3
    restores its checkpoint, and the two commit the reference together."""
    storage = str(tmp_path / "ckpt")
    first = FaultPlan.of(CoordinatorCrashBeforeNotify(nth=0), TaskCrashDuringRecovery(task="balance[0]", nth=0))
    with pytest.raises(JobFailedError, match="TaskCrashDuringRecovery"):
        combined_env("unaligned", 2, storage, attempts=1).execute("combined-ray", executor="ray",
                                                                  slots_per_worker=SLOTS, faults=first)
    result = combined_env("aligned", 3, storage).restore_from(storage).execute(
        "combined-ray", executor="ray", slots_per_worker=SLOTS)
    assert result.restored_from.checkpoint_id is not None, result.restored_from
    check(result, LEFT, RIGHT)  # committed by both executions, each result once
