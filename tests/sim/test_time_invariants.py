"""The event-time invariants of the checker (`runtime.checker.time_invariants`): each fails on a bug
planted for the test only (monkeypatched), and a clean run checks them without a violation."""

from __future__ import annotations

import pytest

from operators.keyed import KeyedProcessOperator
from runtime import StreamEnvironment
from runtime.checker.invariants import InvariantChecker, InvariantViolation
from runtime.core.task_time import TaskTime
from runtime.records.messages import Watermark
from runtime.workloads.event_time import build_event_time_job, event_rows
from state.timer_queue import TimerQueue


def env() -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002)
    env.set_auto_watermark_interval(0.001)
    build_event_time_job(env, event_rows(300), splits=2)
    return env


def violation() -> InvariantViolation:
    with pytest.raises(InvariantViolation) as info:
        env().execute("et", executor="sim", seed=1, invariants=True)
    return info.value


def test_a_clean_run_checks_every_event_time_invariant():
    checker = InvariantChecker()
    env().execute("et", executor="sim", seed=1, invariants=checker)
    for name in ("watermark-monotonic", "timer-fires-once", "event-timers-fire-by-end"):
        assert checker.checks[name] > 0, name


def test_a_watermark_going_backwards_is_caught(monkeypatch):
    on_input = TaskTime.on_input

    def backwards(self, channel, event):
        out = on_input(self, channel, event)
        return out + [Watermark(-1)] if out and isinstance(out[-1], Watermark) and out[-1].timestamp > 0 else out

    monkeypatch.setattr(TaskTime, "on_input", backwards)
    found = violation()
    assert found.invariant == "watermark-monotonic" and "went from" in found.detail


def test_a_timer_firing_twice_is_caught(monkeypatch):
    poll = TimerQueue.poll
    repeated: set = set()

    def fires_twice(self, up_to):
        head = self._head()
        if head is not None and head[0] <= up_to and head[1] not in repeated:
            repeated.add(head[1])
            return head[0], head[2], head[3]  # handed out, but left in the queue and the state
        return poll(self, up_to)

    monkeypatch.setattr(TimerQueue, "poll", fires_twice)
    found = violation()
    assert found.invariant == "timer-fires-once" and "not registered" in found.detail


def test_timers_that_never_fire_are_caught(monkeypatch):
    monkeypatch.setattr(KeyedProcessOperator, "process_watermark", lambda self, watermark: [watermark])
    found = violation()
    assert found.invariant == "event-timers-fire-by-end"
