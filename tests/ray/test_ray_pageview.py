"""The page-view job on real Ray: exactly-once under actor kills, at-least-once loses nothing,
a failure-free run agrees with the simulator (an agreement test across executors), its
stream unioned with itself counts every record twice, NaN keys are one key, and a `DiscardingSink`
keeps nothing while the counts stay exact through a crash."""

from __future__ import annotations

import pytest
from ray_jobs import SlowCountPerKey, expected_counts, pageview_env, pageview_rows, self_union_env

from runtime import FaultPlan, StreamEnvironment
from runtime.workloads.scenarios import nan_key_counts, nan_keys_job
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import CheckpointingMode

ROWS = pageview_rows(6000)
EXPECTED = expected_counts(ROWS)
APP_COUNTS = {app: sum(1 for r in ROWS if r["app"] == app) for app in {r["app"] for r in ROWS}}

PLANS = [
    pytest.param(FaultPlan.random(seed=11, crashes=1), id="1-random-kill"),
    pytest.param(FaultPlan.random(seed=12, crashes=3), id="3-random-kills"),
    pytest.param(FaultPlan.of(TaskCrash(task="count[1]", after_records=1500),
                              TaskCrash(task="Source: collection[0]", at_fraction=0.6)), id="2-named-kills"),
]


@pytest.mark.ray
@pytest.mark.parametrize("faults", PLANS)
def test_exactly_once_with_task_actors_killed(ray_session, faults: FaultPlan) -> None:
    result = pageview_env(ROWS).execute("pv", executor="ray", faults=faults)
    assert result.executor == "ray"
    assert result.restarts >= 1, f"no kill happened: {result.failures}"
    # the driver killed each frozen actor and reports the injected crash as the simulator does
    assert all("injected fault: TaskCrash" in f for f in result.failures), result.failures
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    assert result.final_state["count"]["count"] == APP_COUNTS
    assert result.completed_checkpoints, "no checkpoint completed"
    assert result.metrics.records_in > len(ROWS)  # sources rewound and replayed


@pytest.mark.ray
def test_exactly_once_with_buffer_debloating_and_a_kill(ray_session) -> None:
    """Debloating on Ray: the buffer size rides on the returned credits (`add_credits`) and the
    senders cut smaller buffers mid-run; a kill and a restore must not notice. The count takes
    0.2 ms a record, so it measures at most 5,000 records/s and wants at most 10 records in flight
    over 2 channels x 4 credits: a buffer of 64 can only be announced if debloating does not work
    (a fast count's throughput over its busy time alone is machine-dependent and can ask for 64)."""
    env = pageview_env(ROWS, count=SlowCountPerKey("app"))
    env.set_buffer_debloating(target=0.002, period=0.002, samples=2)
    result = env.execute("pv", executor="ray", faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=1500)))
    assert result.restarts == 1, result.failures
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    assert set(result.metrics.buffer_sizes) == set(result.metrics.smallest_buffer_sizes) == {"count[0]", "count[1]"}
    # the senders were asked for buffers smaller than the job's (the latest size can be 64 again:
    # the end-of-input drain measures a high throughput)
    assert min(result.metrics.smallest_buffer_sizes.values()) < 64


@pytest.mark.ray
def test_at_least_once_loses_nothing_with_kills(ray_session) -> None:
    env = pageview_env(ROWS, mode=CheckpointingMode.AT_LEAST_ONCE)
    result = env.execute("pv", executor="ray", faults=FaultPlan.random(seed=5, crashes=2))
    assert result.restarts >= 1
    assert not (EXPECTED - multiset(result.output("pv"))), "records were lost"


def barrier_events(result, checkpoint_id: int) -> list[tuple]:
    """(kind, task, input channel or None) of each traced barrier event of one checkpoint, sorted."""
    return sorted((e[1], e[3], e[4] if e[1] == "barrier-in" else None)
                  for e in result.trace if e[1] in ("barrier-in", "snapshot", "ack") and e[2] == checkpoint_id)


@pytest.mark.ray
def test_failure_free_run_agrees_with_the_simulator(ray_session) -> None:
    on_ray = pageview_env(ROWS).execute("pv", executor="ray", trace_barriers=True)
    on_sim = pageview_env(ROWS).execute("pv", executor="sim", seed=3, trace_barriers=True)
    assert on_ray.restarts == 0 and on_sim.restarts == 0
    assert multiset(on_ray.output("pv")) == multiset(on_sim.output("pv")) == EXPECTED
    assert on_ray.final_state == on_sim.final_state
    assert on_ray.sink_names == on_sim.sink_names
    assert on_ray.metrics.records_in == on_sim.metrics.records_in == len(ROWS)
    assert on_ray.completed_checkpoints and all(c.duration >= 0 for c in on_ray.completed_checkpoints)

    # the barrier trace: every completed checkpoint on Ray has the simulator's events (a barrier
    # on each input channel of each task, a snapshot and an acknowledgement from each task), in
    # causal order on the wall clock between the trigger and the completion
    sim_checkpoint = on_sim.completed_checkpoints[0].id
    expected_events = barrier_events(on_sim, sim_checkpoint)
    assert {e[0] for e in expected_events} == {"barrier-in", "snapshot", "ack"}
    for checkpoint in on_ray.completed_checkpoints:
        assert barrier_events(on_ray, checkpoint.id) == expected_events, checkpoint.id
        events = [e for e in on_ray.trace if e[2] == checkpoint.id]
        for task in {e[3] for e in events}:
            barriers_in = [e[0] for e in events if e[3] == task and e[1] == "barrier-in"]
            (snapshot,) = [e[0] for e in events if e[3] == task and e[1] == "snapshot"]
            (ack,) = [e[0] for e in events if e[3] == task and e[1] == "ack"]
            assert checkpoint.trigger_time <= min(barriers_in, default=snapshot)
            assert max(barriers_in, default=snapshot) <= snapshot <= ack <= checkpoint.end_time, (checkpoint.id, task)
            # the per-subtask phases (the acknowledgement's timing) follow one another from the
            # trigger: start delay, alignment and sync end when the write starts (the "snapshot"
            # event), the async part when the task acknowledges
            sub = checkpoint.subtasks[task]
            phases = (sub.start_delay, sub.alignment_duration, sub.sync_duration, sub.async_duration)
            assert all(p >= 0 for p in phases), (checkpoint.id, sub)
            # (the same wall clock read a moment apart: 10 ms allows for a preempted thread)
            write_start = checkpoint.trigger_time + sum(phases[:3])
            assert write_start == pytest.approx(snapshot, abs=0.01), (checkpoint.id, sub)
            assert write_start + sub.async_duration <= ack + 0.01
            assert ack - 0.01 <= checkpoint.trigger_time + sub.end_to_end_duration <= checkpoint.end_time + 1e-6


@pytest.mark.ray
def test_self_union_counts_every_record_twice_on_both_executors(ray_session) -> None:
    """Two edges between the same vertices are two channels on Ray as on the simulator."""
    rows = ROWS[:2000]
    faults = FaultPlan.of(TaskCrash(task="count[0]", after_records=1500))
    on_ray = self_union_env(rows).execute("union", executor="ray", faults=faults)
    on_sim = self_union_env(rows).execute("union", executor="sim", seed=3, faults=faults)
    assert on_ray.restarts == on_sim.restarts == 1, (on_ray.failures, on_sim.failures)
    assert multiset(on_ray.output("pv")) == multiset(on_sim.output("pv")) == expected_counts(rows + rows)


@pytest.mark.ray
@pytest.mark.parametrize("vectorised", [False, True], ids=["records", "vectorised"])
def test_nan_records_count_as_one_key_on_ray(ray_session, vectorised: bool) -> None:
    """Every NaN is one key (each record carries its own NaN object), through a crash that restores
    the NaN key from a checkpoint (`tests/sim/test_nan_keys.py` for the simulator)."""
    env = StreamEnvironment(parallelism=2, buffer_size=64)
    env.enable_checkpointing(interval=0.02)
    nan_keys_job(env, 2000, vectorised=vectorised)
    # NaN is in key group 120 of 128: count[1]'s
    result = env.execute("nans", executor="ray", faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=1500)))
    assert result.restarts == 1 and result.restored_checkpoints, result.failures
    assert nan_key_counts(result) == {"count": [2000], "per-key": [2000]}


@pytest.mark.ray
def test_a_discarding_sink_keeps_nothing_through_a_crash_while_the_counts_stay_exact(ray_session) -> None:
    from operators import DiscardingSink

    plan = FaultPlan.of(TaskCrash(task="count[1]", after_records=1500))
    result = pageview_env(ROWS, sink=DiscardingSink("pv")).execute("pv-discard", executor="ray", faults=plan)
    assert result.restarts == 1 and result.completed_checkpoints, (result.failures, result.checkpoints)
    assert result.output("pv") == [] and result.committer.transactions("pv") == []
    assert result.final_state["count"]["count"] == APP_COUNTS
    # nothing to commit: the coordinator sends the committer no call per checkpoint
    assert result.metrics.coordinator_calls.get("commit", 0) == 0, result.metrics.coordinator_calls
