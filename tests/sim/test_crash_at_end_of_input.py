"""`TaskCrash(at_fraction=f)` fires at `f` x the records a failure-free run spreads over the task,
or at the end of the task's input if that comes first: a task behind a filter, or a source with
fewer splits than its siblings, crashes before it reports its input ended; an explicit
`after_records` never fires early."""

from __future__ import annotations

import pytest

from runtime import FaultPlan, TaskCrash
from runtime.sim.executor import SimExecutor
from runtime.workloads.filtered import (
    COUNT_TASK,
    SHORT_SOURCE,
    filtered_env,
    filtered_reference,
    filtered_rows,
)
from runtime.workloads.seeded import multiset

ROWS = filtered_rows(2000)
EXPECTED = filtered_reference(ROWS)


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
@pytest.mark.parametrize("task", [COUNT_TASK, SHORT_SOURCE])
def test_a_crash_placed_past_what_the_task_sees_fires_at_the_end_of_its_input(task, mode):
    env = filtered_env(ROWS)
    env.enable_checkpointing(interval=0.05, tolerable_failures=1000, unaligned=mode == "unaligned")
    graph = env.get_job_graph("filtered")
    sim = SimExecutor(graph, seed=3, faults=FaultPlan.of(TaskCrash(task=task, at_fraction=0.9)))
    result = sim.run()
    [failure] = result.failures
    assert failure.startswith(f"task {task} failed: injected fault: TaskCrash at the end of its input, after "), failure
    assert result.restarts == 1 and sim.schedule.fired == [0]
    assert multiset(result.output("pv")) == EXPECTED


def test_a_crash_within_what_the_task_sees_fires_at_its_fraction():
    graph = filtered_env(ROWS).get_job_graph("filtered")
    result = SimExecutor(graph, seed=3, faults=FaultPlan.of(TaskCrash(task=COUNT_TASK, at_fraction=0.05))).run()
    assert result.failures == [f"task {COUNT_TASK} failed: injected fault: TaskCrash after 50 records of task {COUNT_TASK}"]
    assert multiset(result.output("pv")) == EXPECTED


def test_an_explicit_record_count_past_the_end_never_fires():
    graph = filtered_env(ROWS).get_job_graph("filtered")
    sim = SimExecutor(graph, seed=3, faults=FaultPlan.of(TaskCrash(task=COUNT_TASK, after_records=10_000)))
    result = sim.run()
    assert result.failures == [] and sim.schedule.fired == []
    assert multiset(result.output("pv")) == EXPECTED
