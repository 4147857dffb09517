"""Liveness on Ray: a slow user function is a live job, a function that never returns is a hung one.

A task answers its heartbeats whatever its work thread does (waiting for the lock a step holds,
300 records of 0.2 s would make a 51 s step, "no heartbeat for 30 s", five restarts, a failed
job), its steps are sized in wall time (one slow record per step: checkpoints and barriers
get in between), and the watchdog counts a step in progress as progress until it has run
`stall_timeout`. The default settings' decisions are pinned by plain tests
(`tests/jobmaster/test_watchdog.py`, `tests/ray/test_step_pacing.py`); here a record takes
twice as long as a heartbeat may stay unanswered (`heartbeat_timeout=1.0`), so the old
lock-bound heartbeat would fail it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.ray.worker_actor import WorkerActor

SECONDS_PER_RECORD = 2.0


def model_call(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(SECONDS_PER_RECORD)  # a model call, a remote lookup
    return {"i": record["i"], "scored": True}


@pytest.mark.ray
@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])
def test_a_function_slower_than_the_heartbeat_timeout_finishes_with_checkpoints(ray_session, chaining: bool) -> None:
    env = StreamEnvironment()  # defaults: parallelism 1, buffers of 256, the default restart strategy
    if not chaining:
        env.disable_chaining()
    env.enable_checkpointing(interval=0.5)
    env.from_collection([{"i": i} for i in range(3)]).map(model_call, name="score").sink_to(CollectSink("out"))
    result = env.execute("slow", executor="ray", heartbeat_timeout=SECONDS_PER_RECORD / 2)
    assert result.restarts == 0, result.failures
    assert sorted(r["i"] for r in result.output("out")) == [0, 1, 2]
    completed = result.completed_checkpoints
    assert completed, "no checkpoint completed"
    if chaining:  # the source reads a record per step: periodic checkpoints complete between them
        assert len(completed) >= 2, [c.id for c in result.checkpoints]


@pytest.mark.ray
def test_starting_a_subtask_never_waits_for_its_step_in_progress(ray_session, tmp_path) -> None:
    """In one worker, a sibling started first may hand a subtask input before the driver's
    `start` for it arrives; its work thread is then in a step of the slow function, and a
    `start` that waited for the step held the worker's main thread, so every heartbeat of the
    worker went unanswered ("Source: collection[0] is hung: no heartbeat for 1.0 s")."""
    env = StreamEnvironment()  # one task: the source, the slow function and the sink, chained
    env.enable_checkpointing(interval=60.0)
    env.from_collection([{"i": i} for i in range(3)]).map(model_call, name="score").sink_to(CollectSink("out"))
    graph = env.get_job_graph()
    [task] = graph.task_ids()
    worker = WorkerActor(graph, 0, [task], {task: {"committer": None, "storage": ("uri", str(tmp_path)),
                                                   "job_id": "liveness"}})
    worker.deploy(task, 1, None, {}, {}, {}, None)
    worker.call(task, "start", 1)
    deadline = time.monotonic() + 5.0
    while worker.call(task, "heartbeat")["busy_for"] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.call(task, "heartbeat")["busy_for"] is not None, "the slow step never began"
    began = time.monotonic()
    worker.call(task, "start", 1)  # what a late `start` does while the step runs
    took = time.monotonic() - began
    worker.call(task, "cancel")
    assert took < SECONDS_PER_RECORD / 4, f"start waited {took:.2f} s for the step in progress"
