"""`runtime.jobmaster.faults.schedule.FaultSchedule`: one meaning of a `FaultPlan` on every executor —
targets from the plan's seed, occurrences counted over the run across attempts (whether the
executor sees each one or its processes count them), at-most-once firing, progress points in
records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import FaultPlan
from runtime.jobmaster.faults.schedule import FaultSchedule
from runtime.sim.executor import SimExecutor
from runtime.workloads.scenarios import relay_job
from vocabulary.fault_plan import (
    ChannelDelay,
    CoordinatorCrash,
    CoordinatorCrashBeforeNotify,
    CoordinatorStorageFailure,
    LostAcknowledgement,
    ProcessKill,
    SlowStorage,
    StorageWriteFailure,
    TaskCrash,
    TaskCrashDuringRecovery,
)
from vocabulary.handles import TaskId

SRC = [TaskId("src", 0), TaskId("src", 1)]
MID = [TaskId("mid", 0), TaskId("mid", 1)]
TASKS = SRC + MID


def schedule(*faults, seed: int = 0, source_total: int = 1000) -> FaultSchedule:
    return FaultSchedule(FaultPlan.of(*faults, seed=seed), TASKS, SRC, {t: 2 for t in MID},
                         dict.fromkeys(TASKS, source_total // 2), source_total)


# ---------------------------------------------------------------------- occurrences across attempts

@settings(max_examples=200, deadline=None)
@given(nths=st.lists(st.integers(0, 30), min_size=1, max_size=6),
       attempts=st.lists(st.integers(0, 12), min_size=1, max_size=6))
def test_counting_in_the_attempts_fires_the_faults_counting_each_occurrence_would(nths, attempts) -> None:
    """Ray's task actors count writes themselves (`upcoming` at the start of an attempt, `advance`
    at its end); the simulator asks per write. Both fire the same faults at the same run-wide
    occurrence, each at most once, whatever the attempts' lengths (on Ray too, not in the first
    attempt only)."""
    task = MID[1]
    faults = [StorageWriteFailure(task=str(task), nth=n) for n in nths]
    per_write, per_attempt = schedule(*faults), schedule(*faults)
    seen_direct: list[int] = []
    seen_remote: list[int] = []
    occurrence = 0
    for length in attempts:
        # the attempt fails these of its writes (offsets from its start)
        offsets = {n for n, _ in per_attempt.upcoming("write", task)}
        for i in range(length):
            if i in offsets:
                seen_remote.append(occurrence + i)
        per_attempt.advance("write", task, length)
        for _ in range(length):
            if per_write.write(task).fail:
                seen_direct.append(occurrence)
            occurrence += 1
    assert seen_remote == seen_direct == sorted({n for n in nths if n < occurrence})
    assert per_write.count("write", task) == per_attempt.count("write", task) == occurrence
    assert sorted(per_write.fired) == sorted(per_attempt.fired)
    assert len(set(per_attempt.fired)) == len(per_attempt.fired)  # at most once each


def test_an_acknowledgement_fault_after_the_first_attempt_is_offset_into_the_attempt_it_falls_in() -> None:
    s = schedule(LostAcknowledgement(task="mid[0]", nth=5))
    assert s.upcoming("ack", MID[0]) == [(5, s.plan.faults[0])]
    s.advance("ack", MID[0], 3)  # the first attempt acknowledged 3 checkpoints, then failed over
    assert [n for n, _ in s.upcoming("ack", MID[0])] == [2]
    assert s.fired == []
    s.advance("ack", MID[0], 4)
    assert s.fired == [0] and s.upcoming("ack", MID[0]) == []


# ---------------------------------------------------------------------- at most once, records not time

def test_progress_faults_are_due_at_a_fraction_of_the_sources_records_once() -> None:
    s = schedule(CoordinatorCrash(at_fraction=0.5), SlowStorage(at_fraction=0.25, duration=1.0, factor=5.0),
                 CoordinatorCrash(at=2.0))
    assert s.due(249, now=0.1) == []
    assert [i for i, _ in s.due(250, now=0.2)] == [1]
    assert s.write_slowdown(0.2) == 5.0 and s.write_slowdown(1.2) == 1.0  # the window opened at 0.2
    assert [i for i, _ in s.due(10_000, now=0.3)] == [0]
    assert s.due(10_000, now=0.4) == []
    assert [(at, i) for at, i, _ in s.timed()] == [(2.0, 2)]  # `at`: seconds, the executor's clock


def test_a_process_kill_is_a_progress_point_or_a_time_and_strikes_the_task_it_names() -> None:
    s = schedule(ProcessKill("worker", task="mid[1]", at_fraction=0.4), ProcessKill("committer", at=1.5))
    assert s.due(399, now=0.1) == []
    assert [i for i, _ in s.due(400, now=0.2)] == [0]
    assert s.target(0) == MID[1]
    assert [(at, i) for at, i, _ in s.timed()] == [(1.5, 1)]


def test_at_fraction_zero_means_the_start_not_the_middle() -> None:
    # regression: `at_fraction or 0.5` read 0.0 as "unset"
    s = schedule(CoordinatorCrash(at_fraction=0.0), TaskCrash(task="mid[0]", at_fraction=0.0))
    assert [i for i, _ in s.due(1, now=0.0)] == [0]
    assert s.next_crash(MID[0]) == 1


def test_task_crashes_after_records_fire_once_in_order() -> None:
    s = schedule(TaskCrash(task="mid[0]", after_records=300), TaskCrash(task="mid[0]", after_records=100))
    assert s.next_crash(MID[0]) == 100
    assert s.crash_due(MID[0], 99) is None
    assert s.crash_due(MID[0], 250) == 100  # one crash per check: the job fails over
    assert s.next_crash(MID[0]) == 300 and s.crash_due(MID[0], 250) is None
    assert s.crash_due(MID[0], 400) == 300 and s.next_crash(MID[0]) is None
    assert s.crash_due(MID[0], 10**6) is None and s.fired == [1, 0]


def test_a_crash_at_a_fraction_also_fires_at_the_end_of_the_tasks_input() -> None:
    from runtime.jobmaster.faults.counts import AttemptFaults, RunCounts

    s = schedule(TaskCrash(task="mid[0]", at_fraction=0.5), TaskCrash(task="mid[1]", after_records=500))
    assert s.crash_due(MID[0], 10, input_ended=False) is None
    assert s.crash_at_end_of_input(MID[0]) and not s.crash_at_end_of_input(MID[1])
    assert s.crash_due(MID[1], 10, input_ended=True) is None  # a number of records never fires early
    after = s.next_crash(MID[0])
    assert s.crash_due(MID[0], 10, input_ended=True) == after and s.fired == [0]
    attempt = AttemptFaults(RunCounts(schedule(TaskCrash(task="mid[0]", at_fraction=0.5)), TASKS).task_faults(MID[0], 0.0))
    assert not attempt.crash_due(10, input_ended=False) and attempt.crash_due(10, input_ended=True)
    assert attempt.crash_due(after, input_ended=False)


def test_notify_and_recovery_crashes_fire_once() -> None:
    s = schedule(CoordinatorCrashBeforeNotify(nth=1), TaskCrashDuringRecovery(task="mid[1]", nth=0))
    assert [s.completion_announced(c) for c in (1, 1, 2, 2, 3)] == [False, False, True, False, False]
    assert s.recovery_started() == [(MID[1], s.plan.faults[1])]
    assert s.recovery_started() == []


def test_coordinator_storage_failures_count_their_kind_over_the_run_and_any_counts_both() -> None:
    plan = (CoordinatorStorageFailure(nth=1, what="counter"), CoordinatorStorageFailure(nth=0, what="metadata"),
            CoordinatorStorageFailure(nth=4, what="any"))
    direct = schedule(*plan)
    writes = ["counter", "counter", "metadata", "counter", "metadata", "counter"]
    assert [direct.coordinator_write(what) for what in writes] == [False, True, True, False, True, False]
    assert direct.fired == [0, 1, 2]
    # a replaced coordinator (Ray: `arm_faults` with its predecessor's `fault_counts`) counts on
    first = schedule(*plan)
    assert [first.coordinator_write(what) for what in writes[:3]] == [False, True, True]
    second = schedule(*plan)
    for (what, task_id), n in first.counts().items():
        second.advance(what, task_id, n)
    assert [second.coordinator_write(what) for what in writes[3:]] == [False, True, False]
    assert sorted(second.fired) == [0, 1, 2]


# ---------------------------------------------------------------------- targets from the plan's seed

@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_open_targets_are_drawn_from_the_plan_seed_identically_on_both_executors(seed: int) -> None:
    """Both executors build the run's schedule from the plan alone: the executor's `seed` plays no
    part (Ray's docstrings said it did)."""
    from runtime.ray.executor import RayExecutor  # builds no actor: Ray does not start

    graph = relay_job().get_job_graph("job")
    plan = FaultPlan.random(seed, crashes=2, lost_acks=2, storage_failures=2, stalls=1)
    targets = []
    for executor_seed in (0, 7):
        sim = SimExecutor(graph, seed=executor_seed, faults=plan)
        sim._resolve_faults()
        ray_executor = RayExecutor(graph, seed=executor_seed, faults=plan)
        ray_executor._resolve_faults()
        for s in (sim.schedule, ray_executor.schedule):
            targets.append([str(s.target(i)) if hasattr(f, "task") else None for i, f in enumerate(plan.faults)])
    assert all(t == targets[0] for t in targets), targets


def test_a_channel_delay_draws_its_channel_after_its_task() -> None:
    a = schedule(ChannelDelay(at=0.0), seed=3)
    b = schedule(ChannelDelay(at=0.0), seed=3)
    assert (a.target(0), a.channel(0)) == (b.target(0), b.channel(0)) and a.target(0) in MID


# ---------------------------------------------------------------------- the simulator places at_fraction by records

def test_a_coordinator_crash_at_a_fraction_strikes_when_the_sources_read_that_fraction_on_the_simulator() -> None:
    """Regression: the simulator placed it at a fraction of an estimated virtual duration (so a slow
    job lost its coordinator early), Ray at a fraction of the source records."""
    graph = relay_job(rows=400).get_job_graph("job")
    sim = SimExecutor(graph, seed=0, faults=FaultPlan.of(CoordinatorCrash(at_fraction=0.6)))
    seen: list[int] = []
    crash = sim.crash_coordinator

    def crashing() -> None:
        seen.append(sim.metrics.records_in)
        crash()

    sim.crash_coordinator = crashing  # type: ignore[method-assign]
    result = sim.run()
    assert len(seen) == 1 and result.restarts == 1, (seen, result.failures)
    assert 240 <= seen[0] < 240 + 2 * graph.buffer_size, seen


def test_each_attempt_gets_the_faults_still_ahead_as_offsets() -> None:
    """Regression: the Ray executor gave lost acknowledgements and failed writes to the first
    attempt only (the task actor's counters restart with each attempt); now each attempt gets the
    faults still ahead in the run, as offsets from what earlier attempts counted (`RunCounts`, what
    the Ray driver hands each task actor it deploys)."""
    from runtime.jobmaster.faults.counts import RunCounts
    from vocabulary.fault_plan import DelayedControlMessage, TornWrite

    graph = relay_job().get_job_graph("job")
    task = TaskId("count", 0)
    plan = FaultPlan.of(LostAcknowledgement(task="count[0]", nth=4), StorageWriteFailure(task="count[0]", nth=1),
                        TornWrite(task="count[0]", nth=6), DelayedControlMessage("ack", task="count[0]", nth=5),
                        TaskCrash(task="count[0]", after_records=100))
    counts = RunCounts(FaultSchedule.for_graph(plan, graph), graph.task_ids())
    first = counts.task_faults(task, now=0.0)
    assert first["crash_after"] == 100 and first["failed_writes"] == [1] and first["torn_writes"] == [(6, 0.5, False)]
    assert first["acks"] == {4: (True, 1, 0.0), 5: (False, 1, 0.05)}
    counts.attempt_ended(task, {"records": 60, "acks": 3, "writes": 3})  # the first attempt failed over
    second = counts.task_faults(task, now=1.0)
    assert second["crash_after"] == 40 and second["failed_writes"] == [] and second["torn_writes"] == [(3, 0.5, False)]
    assert second["acks"] == {1: (True, 1, 0.0), 2: (False, 1, 0.05)}
    assert counts.schedule.fired == [1]  # the write failed in the first attempt
    assert counts.records(task, 5) == 65


def test_windows_are_handed_to_an_attempt_while_still_open() -> None:
    from runtime.jobmaster.faults.counts import RunCounts

    graph = relay_job().get_job_graph("job")
    plan = FaultPlan.of(SlowStorage(at=0.1, duration=2.0, factor=3.0),
                        ChannelDelay(task="count[0]", channel=0, at=0.1, duration=1.0, delay=0.5))
    counts = RunCounts(FaultSchedule.for_graph(plan, graph), graph.task_ids())
    slow = counts.open_slow_storage(plan.faults[0], now=10.0)
    spike = counts.open_channel_delay(TaskId("relay", 0), 1, plan.faults[1], now=10.0)
    assert slow == (10.0, 12.0, 3.0) and spike == (1, 10.0, 11.0, 0.5)
    during = counts.task_faults(TaskId("relay", 0), now=10.5)
    assert during["slow_writes"] == [slow] and during["channel_delays"] == [spike]
    after = counts.task_faults(TaskId("relay", 0), now=11.5)
    assert after["slow_writes"] == [slow] and after["channel_delays"] == []
    assert counts.task_faults(TaskId("relay", 0), now=12.0)["slow_writes"] == []


@settings(max_examples=100, deadline=None)
@given(nths=st.lists(st.integers(0, 12), min_size=1, max_size=4), attempts=st.lists(st.integers(0, 6), min_size=1,
                                                                                    max_size=4))
def test_attempts_applying_their_own_faults_fire_what_the_schedule_fires(nths, attempts) -> None:
    """`RunCounts.task_faults` -> one `AttemptFaults` per attempt (what a Ray task actor holds) ->
    its `counts()` -> `RunCounts.attempt_ended`: the acknowledgements and writes that fail are the
    ones a schedule asked at every occurrence (the simulator) fails, whatever the attempts' lengths."""
    from runtime.jobmaster.faults.counts import AttemptFaults, RunCounts

    task = MID[0]
    faults = [LostAcknowledgement(task=str(task), nth=n) for n in nths] + \
        [StorageWriteFailure(task=str(task), nth=n + 1) for n in nths]
    counts, direct = RunCounts(schedule(*faults), TASKS), schedule(*faults)
    lost_remote, failed_remote, lost_direct, failed_direct = [], [], [], []
    occurrence = 0
    for length in attempts:
        attempt = AttemptFaults(counts.task_faults(task, now=0.0))
        for i in range(length):
            lost_remote += [occurrence + i] if attempt.ack().lost else []
            failed_remote += [occurrence + i] if attempt.write()[0] else []
            lost_direct += [occurrence + i] if direct.control("ack", task).lost else []
            failed_direct += [occurrence + i] if direct.write(task).fail else []
        counts.attempt_ended(task, attempt.counts())
        occurrence += length
    assert (lost_remote, failed_remote) == (lost_direct, failed_direct)
    assert sorted(counts.schedule.fired) == sorted(direct.fired)
