"""Restart strategies: exponential delay (the default) and failure rate as Flink
applies them, a record a function always rejects fails the job after a few quick restarts with a
bounded message, a transient fault is still restarted past."""

from __future__ import annotations

import random

import pytest

from operators import CollectSink, OperatorError
from runtime import FaultPlan
from runtime.api.environment import DEFAULT_RESTART_STRATEGY, StreamEnvironment
from runtime.jobmaster.lifecycle.restart import RestartBackoff
from runtime.jobmaster.result import JobFailedError
from runtime.sim.executor import SimExecutor
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

# --------------------------------------------------------------------------- the backoff itself


def backoffs(strategy: RestartStrategy, times: list[float], seed: int = 0) -> list[tuple[bool, float]]:
    backoff = RestartBackoff(strategy, random.Random(seed))
    out = []
    for now in times:
        backoff.notify_failure(now)
        out.append((backoff.can_restart(), backoff.backoff_time))
    return out


def test_exponential_delay_grows_by_the_multiplier_up_to_the_max_and_gives_up_after_the_attempts() -> None:
    strategy = RestartStrategy.exponential_delay(initial_backoff=1.0, max_backoff=5.0, backoff_multiplier=2.0,
                                                 jitter_factor=0.0, attempts_before_reset_backoff=4)
    got = backoffs(strategy, [0.0, 2.0, 5.0, 10.0, 16.0])
    assert got == [(True, 1.0), (True, 2.0), (True, 4.0), (True, 5.0), (False, 5.0)]


def test_exponential_delay_starts_over_after_a_healthy_threshold() -> None:
    strategy = RestartStrategy.exponential_delay(initial_backoff=1.0, backoff_multiplier=2.0, jitter_factor=0.0,
                                                 reset_backoff_threshold=100.0, attempts_before_reset_backoff=2)
    # 100 + 4 s after the third failure (the threshold + the current backoff): a fresh start
    got = backoffs(strategy, [0.0, 1.0, 3.0, 3.0 + 100.0 + 4.0, 108.0, 109.0])
    assert got == [(True, 1.0), (True, 2.0), (False, 4.0), (True, 1.0), (True, 2.0), (False, 4.0)]
    # just short of it: still in a row
    assert backoffs(strategy, [0.0, 100.5])[-1] == (True, 2.0)


def test_exponential_delay_jitter_stays_within_the_factor_and_replays_by_seed() -> None:
    strategy = RestartStrategy.exponential_delay(initial_backoff=1.0, backoff_multiplier=2.0, max_backoff=1000.0,
                                                 jitter_factor=0.25, attempts_before_reset_backoff=10)
    times = [float(i) for i in range(8)]
    first = [b for _, b in backoffs(strategy, times, seed=1)]
    assert first == [b for _, b in backoffs(strategy, times, seed=1)]
    assert first != [b for _, b in backoffs(strategy, times, seed=2)]
    assert first[0] == 1.0
    for before, after in zip(first, first[1:]):
        assert 2.0 * before * 0.75 - 1e-9 <= after <= 2.0 * before * 1.25 + 1e-9


def test_failure_rate_counts_failures_within_the_interval() -> None:
    strategy = RestartStrategy.failure_rate(max_failures_per_interval=2, failure_rate_interval=10.0, delay=0.5)
    got = backoffs(strategy, [0.0, 1.0, 2.0])
    assert got == [(True, 0.5), (True, 0.5), (False, 0.5)]
    # the first failure left the window: three failures, but only two within 10 s
    assert [ok for ok, _ in backoffs(strategy, [0.0, 5.0, 10.5, 12.0])] == [True, True, True, False]


def test_fixed_delay_and_no_restart() -> None:
    assert backoffs(RestartStrategy.fixed_delay(2, 0.3), [0.0, 100.0, 1e6]) == [(True, 0.3), (True, 0.3),
                                                                               (False, 0.3)]
    assert backoffs(RestartStrategy.no_restart(), [0.0]) == [(False, 0.0)]
    backoff = RestartBackoff(RestartStrategy.no_restart())
    backoff.notify_failure(0.0)
    assert "restarts are off" in backoff.exhausted()


def test_the_default_is_a_bounded_exponential_delay() -> None:
    assert RestartStrategy.exponential_delay() == DEFAULT_RESTART_STRATEGY
    assert DEFAULT_RESTART_STRATEGY.kind == "exponential-delay"
    assert DEFAULT_RESTART_STRATEGY.attempts_before_reset_backoff == 5
    env = StreamEnvironment()
    env.enable_checkpointing(interval=0.01)
    env.from_collection([{"a": 1}]).sink_to(CollectSink("out"))
    assert env.get_job_graph("j").restart_strategy == DEFAULT_RESTART_STRATEGY


# --------------------------------------------------------------------------- whole jobs

ROWS = [{"i": i, "key": f"k{i % 5}"} for i in range(400)]
POISON = 250


def poison_env(rows: list[dict], strategy: RestartStrategy | None = None) -> StreamEnvironment:
    def reject(record: dict) -> dict:
        if record["i"] == POISON:
            raise ValueError(f"malformed record {record['i']}")
        return {"key": record["key"]}

    env = StreamEnvironment(parallelism=2, buffer_size=8)
    env.enable_checkpointing(interval=0.002, tolerable_failures=100)
    if strategy is not None:
        env.set_restart_strategy(strategy)
    env.from_collection(rows, splits=2).map(reject, name="reject").key_by("key").process(
        CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


def test_a_poison_record_fails_the_job_after_a_few_restarts_with_growing_delays() -> None:
    sim = SimExecutor(poison_env(ROWS).get_job_graph("poison"), seed=3, trace=True)
    with pytest.raises(JobFailedError) as info:
        sim.run()
    message = str(info.value)
    assert "failed after 5 restart(s)" in message and "'reject'" in message and "malformed record 250" in message
    assert "exponential_delay" in message and "6 failures in a row" in message, message
    assert isinstance(info.value.cause, OperatorError)
    failovers = [t for t, *event in sim.trace if event[:1] == ["failover"]]
    deploys = [t for t, *event in sim.trace if event[:1] == ["deploy"]][1:]
    delays = [d - f for f, d in zip(failovers, deploys)]
    assert len(delays) == 5 and delays[0] == pytest.approx(0.1)
    for before, after in zip(delays, delays[1:]):
        assert 1.5 * 0.9 * before - 1e-9 <= after <= 1.5 * 1.1 * before + 1e-9, delays


def test_a_poison_record_of_10_mb_gives_a_bounded_message_naming_it_by_prefix_and_size() -> None:
    rows = [dict(r) for r in ROWS]
    rows[POISON]["blob"] = "x" * (10 << 20)
    sim = SimExecutor(poison_env(rows, RestartStrategy.fixed_delay(2, 0.001)).get_job_graph("big"), seed=1)
    with pytest.raises(JobFailedError) as info:
        sim.run()
    message = str(info.value)
    assert len(message) < 2000, len(message)
    assert "'reject' failed on record {'i': 250, 'key': 'k0', 'blob': 'xxx" in message
    assert f"[record of {len(repr(rows[POISON])):,} characters]" in message  # 10,485,795
    assert len(sim.failures) == 3 and sum(len(f) for f in sim.failures) < 6000


def test_a_transient_crash_recovers_with_the_default_strategy() -> None:
    env = poison_env([{**r, "i": r["i"] + 10_000} for r in ROWS])  # nothing is poisoned
    reference = poison_env([{**r, "i": r["i"] + 10_000} for r in ROWS]).execute("ok", executor="sim", seed=2)
    faults = FaultPlan.of(TaskCrash(task="count[0]", after_records=60), TaskCrash(task="count[1]", after_records=90))
    result = env.execute("ok", executor="sim", seed=2, faults=faults)
    assert result.restarts == 2
    assert multiset(result.output("out")) == multiset(reference.output("out"))


def test_failure_rate_is_honoured_by_the_simulator() -> None:
    strategy = RestartStrategy.failure_rate(max_failures_per_interval=3, failure_rate_interval=60.0, delay=0.01)
    with pytest.raises(JobFailedError, match=r"after 3 restart\(s\).*4 failures within 60 s"):
        SimExecutor(poison_env(ROWS, strategy).get_job_graph("rate"), seed=0).run()
