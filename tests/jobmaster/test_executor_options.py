"""An option an executor does not have is refused naming the executor, the option and the options
it has (before: the simulator raised `TypeError: SimExecutor.__init__() got an unexpected keyword
argument 'slots_per_worker'` for a Ray-only option)."""

from __future__ import annotations

import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.jobmaster.registry import ExecutorOptionError, check_options


def _env() -> StreamEnvironment:
    env = StreamEnvironment(parallelism=1)
    env.from_collection([{"a": 1}, {"a": 2}]).sink_to(CollectSink("out"))
    return env


def test_a_ray_only_option_on_the_simulator_names_executor_option_and_the_simulators_options() -> None:
    with pytest.raises(ExecutorOptionError) as caught:
        _env().execute("j", executor="sim", slots_per_worker=2)
    message = str(caught.value)
    assert "executor 'sim' has no option slots_per_worker" in message
    assert "seed" in message and "faults" in message  # what it has instead
    assert isinstance(caught.value, TypeError)  # what Python raises for an unknown keyword


def test_every_unknown_option_is_named_once() -> None:
    def accepting(self, graph, *, seed: int = 0, progress=None, **_hidden) -> None: ...

    with pytest.raises(ExecutorOptionError, match="has no option bogus, typo_seed; its options are: progress, seed"):
        check_options("x", {"typo_seed": 1, "seed": 2, "bogus": 3}, accepting)
    check_options("x", {"seed": 1, "progress": None}, accepting)  # known options pass


def test_the_simulators_own_options_still_run() -> None:
    result = _env().execute("j", executor="sim", seed=3, max_time=100.0)
    assert sorted(r["a"] for r in result.output("out")) == [1, 2]
