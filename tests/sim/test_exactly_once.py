"""Exactly-once (`docs/semantics.md`) on the simulator, proven over random jobs, seeds and fault plans.

The reference for a job is its failure-free run without checkpointing; the workloads in
`runtime.workloads.seeded` have order-free output multisets, so any fault schedule must commit
the identical multiset and end in the identical keyed state.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from runtime.checker.invariants import InvariantChecker
from runtime.jobmaster.committer.collect import CollectCommitter, transaction_checkpoint
from runtime.sim.executor import SimExecutor
from runtime.workloads.seeded import SINK, CountPerKey, make_env, multiset, random_spec
from vocabulary.fault_plan import CoordinatorCrashBeforeNotify, LostControlMessage, TaskCrash
from vocabulary.options import RestartStrategy

_REFERENCES: dict[int, tuple] = {}


def reference(job_seed: int) -> tuple:
    if job_seed not in _REFERENCES:
        spec = random_spec(job_seed)
        result = make_env(spec, mode="none").execute("job", executor="sim", seed=0)
        _REFERENCES[job_seed] = (multiset(result.output(SINK)), result.final_state)
    return _REFERENCES[job_seed]


def run(job_seed: int, mode: str, sim_seed: int, crashes: int, **more):
    spec = random_spec(job_seed)
    faults = FaultPlan.random(seed=sim_seed, crashes=crashes, **more)
    return make_env(spec, mode=mode).execute("job", executor="sim", seed=sim_seed, faults=faults)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
EXACTLY_ONCE_MODES = ["aligned", "unaligned", "timeout"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", EXACTLY_ONCE_MODES)
@SETTINGS
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 3))
@example(job_seed=0, sim_seed=0, crashes=2)
# a task of the failed execution kept sending during the restart delay (stale-epoch sends)
@example(job_seed=0, sim_seed=187, crashes=1)
# unaligned: in-flight records of the final checkpoint (channel state) were never committed
@example(job_seed=84, sim_seed=84, crashes=0)
@example(job_seed=93, sim_seed=93, crashes=1)
def test_exactly_once_under_crashes(mode: str, job_seed: int, sim_seed: int, crashes: int) -> None:
    expected_output, expected_state = reference(job_seed)
    result = run(job_seed, mode, sim_seed, crashes)
    assert multiset(result.output(SINK)) == expected_output, result.replay
    assert result.final_state == expected_state, result.replay
    # every transaction a failed attempt staged past its restored checkpoint was aborted
    assert result.committer.staged_transactions(SINK) == [], result.replay


def test_recovery_aborts_what_failed_attempts_staged_and_nothing_else() -> None:
    expected_output, _ = reference(13)
    result = run(13, "aligned", 13, 2)
    assert result.restarts == 2
    # three transactions were staged by attempts that failed before their checkpoint completed
    assert result.committer.aborted_transactions == 3
    assert result.committer.staged_transactions(SINK) == []
    assert multiset(result.output(SINK)) == expected_output, result.replay


@pytest.mark.slow
@pytest.mark.parametrize("mode", EXACTLY_ONCE_MODES)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 2),
       lost_acks=st.integers(0, 1), stalls=st.integers(0, 2), storage_failures=st.integers(0, 1))
def test_exactly_once_under_mixed_faults(mode, job_seed, sim_seed, crashes, lost_acks, stalls,
                                         storage_failures) -> None:
    expected_output, expected_state = reference(job_seed)
    result = run(job_seed, mode, sim_seed, crashes, lost_acks=lost_acks, stalls=stalls,
                 storage_failures=storage_failures, coordinator_crashes=0)
    assert multiset(result.output(SINK)) == expected_output, result.replay
    assert result.final_state == expected_state, result.replay


@pytest.mark.slow
@pytest.mark.parametrize("mode", EXACTLY_ONCE_MODES)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 3))
def test_exactly_once_with_buffer_debloating(mode: str, job_seed: int, sim_seed: int, crashes: int) -> None:
    """Buffer debloating changes the buffer size senders cut at, mid-run and across restarts;
    an aggressive setting (recalculated every 0.2 ms, sizes down to one record) makes it do so
    even in these short jobs. Exactly-once must not notice."""
    expected_output, expected_state = reference(job_seed)
    spec = random_spec(job_seed)
    env = make_env(spec, mode=mode)
    env.set_buffer_debloating(target=0.0005, period=0.0002, samples=2, threshold=0.0)
    result = env.execute("job", executor="sim", seed=sim_seed, faults=FaultPlan.random(seed=sim_seed, crashes=crashes))
    assert multiset(result.output(SINK)) == expected_output, result.replay
    assert result.final_state == expected_state, result.replay


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 3))
def test_at_least_once_loses_nothing(job_seed: int, sim_seed: int, crashes: int) -> None:
    expected_output, _ = reference(job_seed)
    result = run(job_seed, "at_least_once", sim_seed, crashes)
    got = multiset(result.output(SINK))
    missing = expected_output - got
    assert not missing, f"lost {sum(missing.values())} records; {result.replay}"


def test_same_seed_same_trace_and_output() -> None:
    spec = random_spec(11)
    runs = []
    for _ in range(2):
        env = make_env(spec, mode="aligned")
        result = env.execute("job", executor="sim", seed=5, faults=FaultPlan.random(seed=5, crashes=2), trace=True)
        runs.append(result)
    assert runs[0].trace == runs[1].trace
    assert len(runs[0].trace) > 10
    assert runs[0].output(SINK) == runs[1].output(SINK)
    assert [c.id for c in runs[0].checkpoints] == [c.id for c in runs[1].checkpoints]


def test_different_seeds_give_different_interleavings() -> None:
    spec = random_spec(11)
    traces = {
        tuple(make_env(spec).execute("job", executor="sim", seed=s, trace=True).trace) for s in (1, 2, 3)
    }
    assert len(traces) > 1


# ------------------------------------------------------------------ one commit per checkpoint


class _SpyCommitter(CollectCommitter):
    """Notes every commit made before the checkpoint it belongs to completed, and the global
    committer's calls (`commit_checkpoint`)."""

    def __init__(self) -> None:
        super().__init__()
        self.executor: Any = None
        self.early: list[Any] = []
        self.checkpoint_commits: list[int] = []

    def _completed(self) -> int:
        latest = self.executor.store.get_latest_checkpoint()
        return latest.checkpoint_id if latest is not None else 0

    def commit(self, sink: str, transaction_id: str, records: Any = None) -> None:
        checkpoint = transaction_checkpoint(transaction_id)
        if records is None and checkpoint is not None and checkpoint > self._completed():
            self.early.append(transaction_id)
        super().commit(sink, transaction_id, records)

    def commit_checkpoint(self, checkpoint_id: int) -> list[tuple[str, str]]:
        if checkpoint_id > self._completed():
            self.early.append(checkpoint_id)
        self.checkpoint_commits.append(checkpoint_id)
        return super().commit_checkpoint(checkpoint_id)


@pytest.mark.parametrize("unaligned", [False, True])
@pytest.mark.parametrize("plan", [
    FaultPlan(),
    # the coordinator dies with checkpoint 2 durable and uncommitted: the restored sinks commit it
    FaultPlan.of(CoordinatorCrashBeforeNotify(nth=1), TaskCrash(task="count[1]", after_records=300)),
    # a sink never hears of a completion: the checkpoint is committed all the same
    FaultPlan.of(LostControlMessage("complete", task="count[0]", nth=1),
                 TaskCrash(task="count[0]", after_records=400)),
], ids=["none", "coordinator-crash-before-notify", "lost-notification"])
def test_each_completed_checkpoint_is_committed_once_for_every_sink_never_before(plan: FaultPlan,
                                                                                unaligned: bool) -> None:
    env = StreamEnvironment(parallelism=2, buffer_size=16, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, unaligned=unaligned, tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=5, delay=0.01))
    rows = [{"key": f"k{i % 7}", "i": i} for i in range(1200)]
    env.from_collection(rows, splits=2).key_by("key").process(CountPerKey(), name="count") \
        .sink_to(CollectSink(SINK))
    spy = _SpyCommitter()
    executor = SimExecutor(env.get_job_graph("job"), seed=5, faults=plan, committer=spy, invariants=InvariantChecker())
    spy.executor = executor
    result = executor.run()
    expected = Counter((f"k{k}", n) for k in range(7) for n in range(1, 1200 // 7 + (k < 1200 % 7) + 1))
    assert Counter((r["key"], r["count"]) for r in result.output(SINK)) == expected, result.replay
    assert spy.early == [], f"committed before their checkpoint completed: {spy.early}"
    assert (result.restarts > 0) == bool(plan.faults), result.replay
    # one global commit per completed checkpoint (the sinks' notifications commit nothing)
    completed = [c.id for c in result.completed_checkpoints]
    assert spy.checkpoint_commits and set(spy.checkpoint_commits) <= set(completed), (spy.checkpoint_commits,
                                                                                      completed)
    assert len(spy.checkpoint_commits) == len(set(spy.checkpoint_commits))
    assert spy.duplicate_commits <= 2 * result.restarts, "sinks committed what the global committer did"
