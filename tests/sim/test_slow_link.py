"""Slow links (`vocabulary.links`): everything one task sends arrives later, in order."""

from __future__ import annotations

import pytest

from operators import CollectSink
from operators.sources import GeneratorSource
from runtime import StreamEnvironment
from runtime.sim.network import NetworkOptions
from vocabulary.handles import TaskId
from vocabulary.links import resolve_link_delays


def _job() -> StreamEnvironment:
    env = StreamEnvironment(parallelism=1, buffer_size=4, buffer_timeout=0.001)
    fast = env.from_source(GeneratorSource(count=200, rate=2_000.0, name="fast"))
    slow = env.from_source(GeneratorSource(count=200, rate=2_000.0, fn=lambda i: {"i": -1 - i}, name="slow"))
    fast.union(slow).sink_to(CollectSink("out"))
    return env


def test_a_slow_link_delays_what_its_task_sends_and_nothing_else() -> None:
    plain = _job().execute("j", executor="sim", seed=3)
    slow = _job().execute("j", executor="sim", seed=3,
                          network=NetworkOptions(link_delays={"Source: slow": 0.05}))
    # same records, each channel in order
    assert sorted(r["i"] for r in slow.output("out")) == sorted(r["i"] for r in plain.output("out"))
    late = [r["i"] for r in slow.output("out") if r["i"] < 0]
    assert late == sorted(late, reverse=True)
    # the records of the slow source waited the link's delay, the others did not
    assert len(slow.output("out")) == 400
    assert slow.metrics.latency_percentile(25) < 0.01
    assert slow.metrics.latency_percentile(75) > 0.05
    assert plain.metrics.latency_percentile(75) < 0.01


def test_link_delays_name_tasks_or_vertices_and_bad_ones_are_clear_errors() -> None:
    tasks = [TaskId("a", 0), TaskId("a", 1), TaskId("b", 0)]
    assert resolve_link_delays({"a": 0.1, "a[1]": 0.2}, tasks) == {TaskId("a", 0): 0.1, TaskId("a", 1): 0.2}
    assert resolve_link_delays(None, tasks) == {}
    with pytest.raises(ValueError, match="link_delays names unknown task or vertex 'c'"):
        resolve_link_delays({"c": 0.1}, tasks)
    with pytest.raises(ValueError, match=r"link_delays\['b'\] must be a number of seconds >= 0"):
        resolve_link_delays({"b": -1}, tasks)
    with pytest.raises(ValueError, match="unknown task or vertex"):
        _job().execute("j", executor="sim", network=NetworkOptions(link_delays={"nope": 0.1}))
