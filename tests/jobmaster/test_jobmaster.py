"""The pure `JobMaster` with a fake gateway and a manual clock: restart budget, backoff delays,
failing for good, the restore plan of a rescaled job, the result, and the executor registry."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from checkpoint.io.tools import load_checkpoint
from operators import CollectSink
from runtime import StreamEnvironment
from runtime.core.graph import JobGraphError
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.master import JobMaster, TaskFinal
from runtime.jobmaster.registry import executor_names, get_executor, register_executor
from runtime.jobmaster.restore.match import StateMismatchError
from runtime.jobmaster.result import JobMetrics, RestoredFrom, SuppressRestartsError
from tests.jobmaster.restore_jobs import Count, restore_env
from vocabulary.fault_plan import FaultPlan, TaskCrashDuringRecovery
from vocabulary.histogram import LatencyHistogram
from vocabulary.options import RestartStrategy
from vocabulary.ports import ManualClock, ManualTimers
from vocabulary.reasons import CheckpointFailureReason


class FakeGateway:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, float]] = []
        self.clock: ManualClock | None = None

    def cancel_attempt(self, attempt: int, reason: CheckpointFailureReason) -> None:
        self.calls.append(("cancel", attempt, self.clock.now()))

    def deploy_attempt(self, attempt: int) -> None:
        self.calls.append(("deploy", attempt, self.clock.now()))

    def crash_during_recovery(self, task_id, at: float) -> None:
        self.calls.append(("recovery-crash", str(task_id), at))


def small_graph(strategy: RestartStrategy, parallelism: int = 2):
    env = StreamEnvironment(parallelism=parallelism)
    env.set_restart_strategy(strategy)
    env.from_collection([{"key": "a"}]).key_by("key").process(Count(), name="count").sink_to(CollectSink("out"))
    return env.get_job_graph("job")


def master_for(graph, **options) -> tuple[JobMaster, FakeGateway, ManualTimers]:
    clock = ManualClock()
    timers = ManualTimers(clock)
    gateway = FakeGateway()
    gateway.clock = clock
    return JobMaster(graph, executor="fake", gateway=gateway, clock=clock, timers=timers, seed=7, run_id="run-1", **options), \
        gateway, timers


def test_restarts_after_the_delay_until_the_budget_is_spent() -> None:
    master, gateway, timers = master_for(small_graph(RestartStrategy.fixed_delay(attempts=2, delay=0.5)))
    master.start()
    for attempt in (1, 2):
        master.failover(f"boom {attempt}", RuntimeError("boom"))
        assert gateway.calls[-1][:2] == ("cancel", attempt - 1)
        timers.advance(0.49)
        assert gateway.calls[-1][0] == "cancel", "deployed before the restart delay"
        timers.advance(0.01)
        assert gateway.calls[-1][:2] == ("deploy", attempt) and master.error is None
    master.failover("boom 3", RuntimeError("boom"))
    timers.advance(10)
    assert gateway.calls[-1] == ("cancel", 2, 1.0)
    assert master.done and "failed after 2 restart(s): boom 3" in str(master.error)
    assert "(fixed-delay" in str(master.error) or "attempts" in str(master.error)
    assert master.failures == ["boom 1", "boom 2", "boom 3"]


def test_a_second_death_found_while_cancelling_joins_the_failover_under_way() -> None:
    """Two processes dying in one poll: one failover, one restart, and its reason names both."""
    master, gateway, timers = master_for(small_graph(RestartStrategy.fixed_delay(attempts=1, delay=0.5)))
    master.start()
    gateway.cancel_attempt = lambda attempt, reason: master.also_failed("checkpoint coordinator died: gone")
    master.failover("task count[1] died: killed", RuntimeError("killed"))
    timers.advance(0.5)
    assert master.failures == ["task count[1] died: killed; checkpoint coordinator died: gone"]
    assert master.error is None, "the second death spent a restart of its own"


def test_exponential_backoff_delays_grow() -> None:
    strategy = RestartStrategy.exponential_delay(initial_backoff=1.0, backoff_multiplier=2.0, max_backoff=10.0,
                                                 jitter_factor=0.0)
    master, gateway, timers = master_for(small_graph(strategy))
    master.start()
    deployed_at = []
    for _ in range(3):
        failed_at = timers.clock.now()
        master.failover("boom", RuntimeError("boom"))
        timers.advance(20)
        deployed_at.append(next(t for kind, _, t in reversed(gateway.calls) if kind == "deploy") - failed_at)
    assert deployed_at == [1.0, 2.0, 4.0]


def test_a_later_failover_supersedes_a_pending_restart() -> None:
    master, gateway, timers = master_for(small_graph(RestartStrategy.fixed_delay(attempts=5, delay=1.0)))
    master.failover("first", RuntimeError("a"))
    timers.advance(0.5)
    master.failover("second", RuntimeError("b"))  # e.g. a crash during recovery
    timers.advance(5)
    assert [c[:2] for c in gateway.calls] == [("cancel", 0), ("cancel", 1), ("deploy", 2)]


def test_an_error_no_restart_can_fix_fails_for_good_without_cancelling() -> None:
    master, gateway, timers = master_for(small_graph(RestartStrategy.fixed_delay(attempts=5, delay=0.1)))
    master.start()
    master.task_failed("count[0]", SuppressRestartsError("conflict"))
    timers.advance(5)
    assert gateway.calls == [("deploy", 0, 0.0)]
    assert "failed without restarting: task count[0] failed: conflict" in str(master.error)
    assert "executor='fake', seed=7" in str(master.error)  # the replay line
    master.failover("late", RuntimeError("ignored"))  # nothing happens after failing for good
    assert gateway.calls == [("deploy", 0, 0.0)] and master.failures == ["task count[0] failed: conflict"]


def test_only_a_failover_that_restarts_is_a_recovery_for_the_fault_plan() -> None:
    """`TaskCrashDuringRecovery(nth=...)` counts recoveries: a failover the restart budget refuses
    (or one no restart can fix) is none, on every executor. Ray counted it before the budget check,
    the simulator after; the failing one fired the fault on Ray only."""
    plan = FaultPlan.of(TaskCrashDuringRecovery(task="count[1]", nth=0, delay=0.25),
                        TaskCrashDuringRecovery(task="count[0]", nth=1, delay=0.0))
    master, gateway, timers = master_for(small_graph(RestartStrategy.fixed_delay(attempts=1, delay=1.0)), faults=plan)
    master.start()
    master.task_failed("count[0]", SuppressRestartsError("conflict"))  # fails for good: no recovery
    assert master.schedule.fired == [] and not any(c[0] == "recovery-crash" for c in gateway.calls)

    master, gateway, timers = master_for(small_graph(RestartStrategy.fixed_delay(attempts=1, delay=1.0)), faults=plan)
    master.start()
    timers.advance(2.0)
    master.failover("first", RuntimeError("a"))  # recovery 0: restarts
    assert gateway.calls[-2:] == [("cancel", 0, 2.0), ("recovery-crash", "count[1]", 2.25)]
    timers.advance(1.0)
    master.failover("second", RuntimeError("b"))  # the budget is spent: no recovery 1
    assert master.error is not None
    assert master.schedule.fired == [0] and [c for c in gateway.calls if c[0] == "recovery-crash"] == [
        ("recovery-crash", "count[1]", 2.25)]


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory) -> Path:
    """A finished run's checkpoints (parallelism 2)."""
    root = tmp_path_factory.mktemp("checkpoints")
    restore_env(root / "ckpt", root / "out", parallelism=2, poison=False).execute("job", executor="sim", seed=1)
    return root / "ckpt"


def test_the_restore_plan_redistributes_to_another_parallelism(checkpoint_dir: Path, tmp_path: Path) -> None:
    given = load_checkpoint(str(checkpoint_dir))
    graph = restore_env(tmp_path / "c", tmp_path / "out", parallelism=3, poison=False).get_job_graph("job")
    master, gateway, _ = master_for(graph, restore_from=given)
    assert master.first_checkpoint_id == given[0].checkpoint_id + 1
    plan = master.plan_attempt(lambda: (None, {}), None, next_checkpoint_id=1)
    assert plan is not None and plan.checkpoint_id == given[0].checkpoint_id
    assert sorted(str(t) for t in plan.restores if t.vertex == "count") == ["count[0]", "count[1]", "count[2]"]
    # restoring the given checkpoint, every transaction staged past it is the earlier execution's
    assert (plan.abort_after, plan.abort_before) == (given[0].checkpoint_id, sys.maxsize)
    # the run says where it started: that checkpoint, its run, the parallelism then and now
    assert master.restored_checkpoints == [given[0].checkpoint_id]
    assert master.restored_from == RestoredFrom(given[0].checkpoint_id, given[0].run_id,
                                                {"Source: collection": 2, "count": 2})
    assert master.restored_from.describe({"Source: collection": 2, "count": 3}) == \
        f"checkpoint {given[0].checkpoint_id} of run {given[0].run_id} (rescaled: count 2 -> 3)"
    # a later attempt restores this run's own newest checkpoint, and counts as a restart
    master.failures.append("boom")
    own = load_checkpoint(str(checkpoint_dir))
    plan = master.plan_attempt(lambda: (own[0], {"x": 1}), None, next_checkpoint_id=40)
    assert (plan.restores, plan.abort_before) == ({"x": 1}, 40)
    assert master.restored_checkpoints == [given[0].checkpoint_id, own[0].checkpoint_id]


def test_a_checkpoint_that_does_not_fit_is_refused_before_anything_runs(checkpoint_dir: Path) -> None:
    env = StreamEnvironment(parallelism=2)
    env.from_collection([{"key": "a"}]).key_by("key").process(Count(), name="renamed").sink_to(CollectSink("out"))
    with pytest.raises(StateMismatchError, match="count"):
        master_for(env.get_job_graph("job"), restore_from=load_checkpoint(str(checkpoint_dir)))


def test_a_restore_that_fails_on_a_restart_fails_the_job_for_good() -> None:
    from runtime.jobmaster.restore.state_assignment import NoValidCheckpointError

    master, _, _ = master_for(small_graph(RestartStrategy.fixed_delay(attempts=5, delay=0.1)))
    master.failures.append("boom")

    def corrupt():
        raise NoValidCheckpointError("no retained checkpoint can be restored: checkpoint 3: bad")

    assert master.plan_attempt(corrupt, None, 4) is None
    assert "cannot recover: no retained checkpoint can be restored: checkpoint 3" in str(master.error)


def test_the_result_merges_what_every_task_reported() -> None:
    master, _, _ = master_for(small_graph(RestartStrategy.no_restart()))
    master.failures.append("boom")
    committer = CollectCommitter()
    committer.stage("out", "out/0/1", [{"key": "a", "count": 1}, {"key": "b", "count": 1}])
    committer.commit("out", "out/0/1")
    latencies = LatencyHistogram()
    latencies.record(0.5)
    finals = [TaskFinal(_task("count", 0), {"count": {"a": 1}}, latencies, 1.0, 2.0, 8),
              TaskFinal(_task("count", 1), {"count": {"b": 1}}, None, 0.5, 3.0)]
    result = master.result(committer=committer, checkpoints=[], metrics=JobMetrics(), finals=finals)
    assert result.final_state == {"count": {"count": {"a": 1, "b": 1}}}
    assert (result.metrics.records_out, result.restarts, result.failures) == (2, 1, ["boom"])
    assert (result.metrics.first_created_at, result.metrics.last_arrival_at) == (0.5, 3.0)
    assert result.metrics.buffer_sizes == {"count[0]": 8} and len(result.metrics.latencies) == 1
    assert (result.executor, result.seed, result.run_id) == ("fake", 7, master.run_id)
    assert result.replay == "env.execute('job', executor='fake', seed=7, faults=None)"
    assert result.output("out") == [{"key": "a", "count": 1}, {"key": "b", "count": 1}]


def _task(vertex: str, subtask: int):
    from vocabulary.handles import TaskId

    return TaskId(vertex, subtask)


# --------------------------------------------------------------------------- the registry


def test_an_unknown_executor_names_the_registered_ones() -> None:
    env = StreamEnvironment()
    env.from_collection([{"key": "a"}]).sink_to(CollectSink("out"))
    with pytest.raises(JobGraphError, match=r"unknown executor 'flink'; registered executors: sim, ray"):
        env.execute("job", executor="flink")


def test_a_new_executor_registers_without_touching_the_api() -> None:
    seen = []

    def run_job(graph, **options):
        seen.append((graph.job_name, options))
        return get_executor("sim")(graph, **options)

    register_executor("recording", run_job)
    try:
        env = StreamEnvironment()
        env.from_collection([{"key": "a"}]).sink_to(CollectSink("out"))
        result = env.execute("job", executor="recording", seed=3)
        assert seen == [("job", {"seed": 3})] and result.output("out") == [{"key": "a"}]
        assert "recording" in executor_names()
    finally:
        from runtime.jobmaster import registry

        registry._EXECUTORS.pop("recording")


def test_a_bad_executor_path_is_a_clear_error() -> None:
    register_executor("broken", "no_such_module:run_job")
    try:
        with pytest.raises(JobGraphError, match="executor 'broken': cannot load no_such_module:run_job"):
            get_executor("broken")
    finally:
        from runtime.jobmaster import registry

        registry._EXECUTORS.pop("broken")


def test_the_result_lists_the_dead_coordinators_checkpoints_first() -> None:
    """The coordinator succession: a crash keeps the dead coordinator's checkpoint statistics and
    its time, a promotion its time and the checkpoint the standby recovered (both executors)."""
    master, _, timers = master_for(small_graph(RestartStrategy.no_restart()))
    timers.advance(1.5)
    master.coordinators.crashed(["chk-1", "chk-2"])
    timers.advance(0.25)
    master.coordinators.promoted(2)
    master.coordinators.promoted(None, at=9.0)
    result = master.result(committer=CollectCommitter(), checkpoints=["chk-3"], metrics=JobMetrics(), finals=[])
    assert result.checkpoints == ["chk-1", "chk-2", "chk-3"]
    assert master.coordinators.crash_times == [1.5]
    assert master.coordinators.promotion_times == [1.75, 9.0]
    assert master.coordinators.recovered_checkpoints == [2, None]
