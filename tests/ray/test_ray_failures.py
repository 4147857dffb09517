"""Failures on Ray: a UDF that rejects a record, records Arrow cannot carry or whose field types mix,
a function that never returns, a job that stops moving, checkpoint storage errors."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import Counter
from typing import Any

import pytest
from ray_jobs import (
    MIXED_FROM,
    UNSTAGEABLE,
    expected_counts,
    int_or_str,
    mixed_types_env,
    pageview_env,
    pageview_rows,
    unstageable_env,
)

from runtime import FaultPlan
from runtime.jobmaster.result import JobFailedError
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import ChannelStall, StorageWriteFailure, TaskCrash

ROWS = pageview_rows(4000)
BAD = 3000  # the index of the record the UDF rejects


def reject_one(record: dict[str, Any]) -> dict[str, Any]:
    if record["i"] == BAD:
        raise ValueError("malformed page view")
    time.sleep(0.0002)  # so checkpoints complete before the bad record, however fast the data path
    return {"app": record["app"]}


@pytest.mark.ray
def test_udf_rejecting_a_record_restarts_then_fails_naming_operator_and_record(ray_session) -> None:
    env = pageview_env(ROWS, attempts=2, fn=reject_one, interval=0.02)
    with pytest.raises(JobFailedError) as info:
        env.execute("bad", executor="ray")
    message = str(info.value)
    assert "after 2 restart(s)" in message
    assert "'to-app'" in message and f"'i': {BAD}" in message and "malformed page view" in message
    committed = info.value.committer.output("pv")
    assert committed, "checkpoints before the bad record should have committed output"
    seen = multiset(committed)
    assert max(seen.values()) == 1, "a record was committed twice"
    assert not (seen - expected_counts(ROWS)), "committed output that a correct run never produces"


@pytest.mark.ray
def test_a_poison_record_fails_within_seconds_with_the_default_restart_strategy(ray_session, caplog) -> None:
    # regression: the default restarted it 20 times, 0.1 s apart; exponential delay gives up after
    # 5 restarts in a row (~1.3 s of backoff in all)
    env = pageview_env(ROWS, attempts=None, fn=reject_one, interval=0.02)
    with caplog.at_level(logging.INFO, logger="barrierflow.ray"), pytest.raises(JobFailedError) as info:
        env.execute("poison", executor="ray")
    message = str(info.value)
    assert "after 5 restart(s)" in message and "exponential_delay" in message, message
    assert "'to-app'" in message and f"'i': {BAD}" in message and len(message) < 2000, message
    failovers = [r.created for r in caplog.records if "failover" in r.getMessage()]
    assert len(failovers) == 6, failovers  # the first failure and 5 restarts, not 20


@pytest.mark.ray
def test_a_record_the_sink_cannot_stage_fails_the_job_naming_operator_and_record(ray_session) -> None:
    """A record Arrow cannot carry reaching a chained sink fails the task before the sink takes it,
    with the simulator's error (not at the stage, on the writer thread)."""
    with pytest.raises(JobFailedError) as info:
        unstageable_env(ROWS).execute("unstageable", executor="ray")
    message = str(info.value)
    expected = f"holds {2**70} (int), which does not fit in int64, the widest int Arrow holds"
    assert "records emitted by operator 'emit': field 'n' of record" in message and expected in message, message
    assert f"'i': {UNSTAGEABLE}" in message, message
    committed = info.value.committer.output("pv")
    assert all(r["n"] == 1 for r in committed), "the record Arrow cannot carry was committed"
    assert max(Counter(r["i"] for r in committed).values(), default=1) == 1, "a record was committed twice"
    with pytest.raises(JobFailedError) as on_sim:
        unstageable_env(ROWS).execute("unstageable", executor="sim", seed=1)
    assert str(on_sim.value.cause) in message


@pytest.mark.ray
def test_mixed_types_in_a_field_fail_alike_on_ray_and_the_simulator(ray_session) -> None:
    """Ints, then strs in field "x": the same error naming operator, field, types and record at
    every buffer size on both executors, whether or not the two share a buffer."""
    rows = ROWS[:MIXED_FROM + 100]
    expected = (
        f"records emitted by operator 'shape': field 'x' is string in record {int_or_str(rows[MIXED_FROM])!r}, "
        "but int64 in earlier records; a field keeps one Arrow type per stream (None fits any type, ints widen "
        "to floats)"
    )
    for buffer_size in (1, 256):
        with pytest.raises(JobFailedError) as on_sim:
            mixed_types_env(rows, buffer_size).execute("mixed", executor="sim", seed=1)
        assert str(on_sim.value.cause) == expected
    with pytest.raises(JobFailedError) as on_ray:
        mixed_types_env(rows, 256).execute("mixed", executor="ray")
    assert f"task Source: collection[0] failed: {expected} (executor=ray" in str(on_ray.value), str(on_ray.value)


@pytest.mark.ray
def test_a_function_that_never_returns_is_a_hung_task_replaced_by_the_watchdog(ray_session, tmp_path) -> None:
    """Its heartbeats still answer (the work thread is stuck, not the actor), so the watchdog finds
    it: nothing moves, and its step has run stall_timeout. The attempt fails over and the job
    finishes exactly once."""
    marker = str(tmp_path / "hung")
    env = pageview_env(ROWS, fn=lambda r, m=marker: _hang_with(m, r))
    result = env.execute("hang", executor="ray", stall_timeout=5.0)
    assert os.path.exists(marker)
    assert result.restarts == 1, result.failures
    assert "is hung: in one step" in result.failures[0] and "stall_timeout=5.0" in result.failures[0], result.failures
    assert multiset(result.output("pv")) == expected_counts(ROWS)


@pytest.mark.ray
def test_a_job_that_stops_making_progress_fails_after_stall_timeout_naming_it(ray_session) -> None:
    # count[0]'s input is held back ten minutes: every task answers its heartbeats (nothing is
    # hung), the sources block on credits, nothing moves. The job must fail long before the stall
    # would end (by the watchdog, ~1.5 s after progress stopped; the bound leaves room for a
    # loaded machine), not wait it out. The map takes ~1 s per subtask, so the stall, 0.1 s after
    # deployment, lands while count[0] still has input to wait for: at full speed a warm Ray ran
    # the whole job before it, and the stall held nothing
    env = pageview_env(ROWS, fn=_slow_to_app)
    stalled = FaultPlan.of(ChannelStall(task="count[0]", at=0.1, duration=600.0))
    started = time.time()
    with pytest.raises(JobFailedError) as failed:
        env.execute("stuck", executor="ray", faults=stalled, stall_timeout=1.5)
    assert time.time() - started < 300, "the job waited for the stall to end instead of failing it"
    message = str(failed.value)
    assert "job made no progress for" in message and "stall_timeout=1.5" in message, message
    assert "unfinished tasks" in message and "count[0]" in message, message
    # a pause shorter than stall_timeout is not a stall: the job finishes, exactly once
    paused = FaultPlan.of(ChannelStall(task="count[0]", at=0.1, duration=2.0))
    result = env.execute("paused", executor="ray", faults=paused, stall_timeout=6.0)
    assert result.restarts == 0
    assert multiset(result.output("pv")) == expected_counts(ROWS)


def _slow_to_app(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.0005)
    return {"app": record["app"]}


def _hang_with(marker: str, record: dict[str, Any]) -> dict[str, Any]:
    if record["i"] == 2000 and not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(3600)
    return {"app": record["app"]}


@pytest.mark.ray
def test_storage_failures_decline_checkpoints_and_files_on_shared_storage(ray_session, tmp_path) -> None:
    plan = FaultPlan.of(StorageWriteFailure(task="count[0]", nth=0), StorageWriteFailure(task="count[1]", nth=1))
    env = pageview_env(ROWS, storage=str(tmp_path / "chk"))
    result = env.execute("store", executor="ray", faults=plan)
    reasons = Counter(c.failure_reason.value for c in result.aborted_checkpoints)
    assert reasons.get("storage failure", 0) >= 1, reasons
    assert multiset(result.output("pv")) == expected_counts(ROWS)
    assert os.listdir(tmp_path / "chk" / "store"), "checkpoint files were not written to the storage path"


@pytest.mark.ray
def test_failovers_leave_no_orphan_checkpoint_files(ray_session, tmp_path) -> None:
    # regression: each failover left the directory of the checkpoint in progress behind
    from checkpoint.io.tools import collect_garbage, open_checkpoints

    plan = FaultPlan.of(TaskCrash(task="count[0]", at_fraction=0.3), TaskCrash(task="count[1]", at_fraction=0.6))
    env = pageview_env(ROWS, storage=str(tmp_path / "chk"), interval=0.01)
    result = env.execute("orphans", executor="ray", faults=plan)
    assert result.restarts == 2 and multiset(result.output("pv")) == expected_counts(ROWS)
    chk_dirs = sorted(p.name for p in (tmp_path / "chk" / "orphans").glob("chk-*"))
    assert len(chk_dirs) == 1, chk_dirs  # retained=1: the final checkpoint, nothing of the failed attempts
    report = collect_garbage(open_checkpoints(str(tmp_path / "chk")), "orphans", dry_run=True)
    assert [p for p, _ in report.removed if not p.endswith("_checkpoint_counter")] == []


@pytest.mark.ray
@pytest.mark.parametrize("what", ["storage", "zookeeper"])
def test_unreachable_storage_or_zookeeper_fails_in_seconds_naming_it(what: str, silent_port: int) -> None:
    # checked in the driver before Ray starts, not in the actors' constructors (redeployed until
    # "actors kept dying" for storage, or until leader election gave up after 70 s for ZooKeeper)
    from checkpoint.io.recovery import HighAvailabilityError
    from checkpoint.storage.layout import StorageError

    address = f"127.0.0.1:{silent_port}"
    if what == "storage":
        env = pageview_env(ROWS, storage=f"s3://bucket/chk?endpoint_override={address}&scheme=http")
        env.checkpoint_config = dataclasses.replace(env.checkpoint_config, storage_timeout=1.0)
    else:
        env = pageview_env(ROWS)
        env.set_high_availability("zookeeper", hosts=address, operation_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(StorageError if what == "storage" else HighAvailabilityError, match=address):
        env.execute("unreachable", executor="ray")
    assert time.monotonic() - started < 15.0


@pytest.mark.ray
def test_a_coordinator_dying_as_the_last_task_finishes_fails_over_instead_of_escaping(ray_session,
                                                                                     monkeypatch) -> None:
    """The coordinator dies after its last status and before the end (here: in the very poll
    that finds every task finished, as an injected crash can): the job fails over, restores its
    final checkpoint, ends at once, and commits its output exactly once — no raw ActorDiedError."""
    import ray

    from runtime.ray.executor import RayExecutor

    all_finished = RayExecutor._all_finished
    killed = []

    def killing_the_coordinator_once(self) -> bool:
        done = all_finished(self)
        if done and not killed:
            killed.append(self.coordinator)
            ray.kill(self.coordinator, no_restart=True)
        return done

    monkeypatch.setattr(RayExecutor, "_all_finished", killing_the_coordinator_once)
    result = pageview_env(ROWS).execute("pv", executor="ray")
    assert killed and result.restarts == 1 and result.failures[0].startswith("checkpoint coordinator died")
    assert multiset(result.output("pv")) == expected_counts(ROWS)


@pytest.mark.ray
def test_a_coordinator_dying_after_its_final_notifications_fails_over_instead_of_escaping(ray_session,
                                                                                         monkeypatch) -> None:
    """`ray.kill` is asynchronous: the coordinator may still answer `wait_notifications` and be
    dead by the final status read. Killed (and seen dead) between the two, the job fails over the
    same way and commits its output exactly once."""
    import ray
    from ray.exceptions import RayActorError

    from runtime.ray.executor import RayExecutor
    from runtime.ray.job_services import JobServices

    check_committer = JobServices.check_committer
    executors: list[RayExecutor] = []
    killed = []
    run = RayExecutor._final_commit_failed

    def remembering(self):
        executors.append(self)
        return run(self)

    def killing_the_coordinator_once(self):
        if executors and not killed:
            coordinator = executors[-1].coordinator
            killed.append(coordinator)
            ray.kill(coordinator, no_restart=True)
            with pytest.raises(RayActorError):  # dead for certain before the status read
                for _ in range(100):
                    ray.get(coordinator.status.remote(), timeout=30)
                    time.sleep(0.05)
        return check_committer(self)

    monkeypatch.setattr(RayExecutor, "_final_commit_failed", remembering)
    monkeypatch.setattr(JobServices, "check_committer", killing_the_coordinator_once)
    result = pageview_env(ROWS).execute("pv", executor="ray")
    assert killed and result.restarts == 1 and result.failures[0].startswith("checkpoint coordinator died")
    assert multiset(result.output("pv")) == expected_counts(ROWS)

