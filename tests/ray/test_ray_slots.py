"""Task slots on real Ray (`slots_per_worker`, `runtime.ray.worker_actor`): several subtasks per
worker actor keep exactly-once (aligned, unaligned) and at-least-once through a crash that kills
a worker, in-process channels keep the credit bound and hand records over without Arrow (the
channels between workers carry Arrow batches), and a checkpoint costs one trigger, one
notification and one acknowledgement call per worker (counted by the coordinator actor). Each
test is one job: most of its time is starting actor processes."""

from __future__ import annotations

import time

import pytest
from ray_jobs import expected_counts, pageview_env, pageview_rows

from runtime import FaultPlan
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import CheckpointingMode

ROWS = pageview_rows(3000)
EXPECTED = expected_counts(ROWS)


@pytest.mark.ray
@pytest.mark.parametrize("mode", ["aligned", "unaligned", "at-least-once"])
def test_two_slots_per_worker_survive_a_crash_that_kills_a_worker(ray_session, mode: str) -> None:
    # unchained: workers [source 0, to-app 0], [count 0, sink 0], [source 1, to-app 1], [count 1, sink 1];
    # count[1]'s crash kills its worker, sink[1] with it
    env = pageview_env(ROWS, unaligned=mode == "unaligned",
                       mode=CheckpointingMode.AT_LEAST_ONCE if mode == "at-least-once" else CheckpointingMode.EXACTLY_ONCE)
    env.disable_chaining()
    result = env.execute("slots", executor="ray", slots_per_worker=2,
                         faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=700)))
    assert result.failures == ["task count[1] failed: injected fault: TaskCrash after 700 records of task count[1]"]
    assert result.completed_checkpoints
    if mode == "at-least-once":
        assert not (EXPECTED - multiset(result.output("pv"))), "records were lost"
    else:
        assert multiset(result.output("pv")) == EXPECTED, result.replay
    tasks = result.metrics.tasks
    # the forward channels source -> to-app are in-process: no Ray call
    assert tasks["Source: collection[0]"].local_calls > 0 and tasks["Source: collection[0]"].calls == 0
    # the keyBy channels to-app -> count cross workers: every buffer arrives as an Arrow batch
    assert tasks["count[0]"].buffers_as_records == tasks["count[1]"].buffers_as_records == 0


def slow_to_app(record: dict) -> dict:
    time.sleep(0.002)
    return {"app": record["app"]}


@pytest.mark.ray
def test_one_worker_keeps_credits_and_sends_one_call_each_way_per_checkpoint(ray_session) -> None:
    """All 8 tasks in one worker: every channel is in-process. A fast source and a slow map: the
    source runs out of credits (4 per channel) and waits; were the in-process channel to ignore
    credits, the map would hold much more of its input. The coordinator actor counts its calls: a
    checkpoint's two triggers go in one call, the two sinks' notifications in one, and the eight
    acknowledgements in one report (unless a held one waited `ACK_FLUSH_DELAY`)."""
    rows = pageview_rows(800)
    env = pageview_env(rows, fn=slow_to_app, buffer_size=8).disable_chaining()
    result = env.execute("one-worker", executor="ray", slots_per_worker=8)
    assert multiset(result.output("pv")) == expected_counts(rows)
    for i in (0, 1):
        source, to_app = result.metrics.tasks[f"Source: collection[{i}]"], result.metrics.tasks[f"to-app[{i}]"]
        assert source.local_calls > 0 and source.calls == 0  # every buffer went in-process
        assert to_app.max_unconsumed == 4, to_app  # the window filled (backpressure), never more
    # in-process channels hand the records over as the sender's list: no Arrow batch is built
    # (aligned checkpoints persist no in-flight buffer; the page views all have the same fields)
    for task in ("to-app", "count", "Sink: pv"):
        assert all(result.metrics.tasks[f"{task}[{i}]"].buffers_as_records > 0 for i in (0, 1)), task
    calls = result.metrics.coordinator_calls
    completed = len(result.completed_checkpoints)
    assert completed >= 3, result.checkpoints
    # every task acknowledged every completed checkpoint; the eighth acknowledgement of a checkpoint
    # sends the report ("all acked"): exactly one such call per checkpoint all eight acknowledged.
    # Every other call is accounted for: the two sources' "finished" reports, and held
    # acknowledgements that waited `ACK_FLUSH_DELAY` ("timer": how many depends on the machine's
    # load, so it is not bounded here; `test_slots_unit` checks the timer itself).
    assert calls["acks"] >= 8 * completed, calls
    by_cause = {cause: calls.get(f"report ({cause})", 0) for cause in ("all acked", "timer", "at once")}
    assert completed <= by_cause["all acked"] <= len(result.checkpoints), calls
    assert by_cause["at once"] == 2, calls
    assert calls["report"] == sum(by_cause.values()), calls
    # two triggers in one call, the two sinks' notifications in one call, the final checkpoint's
    # eight notifications in one call (a batch of triggers only is a frame with sockets)
    assert calls["control"] + calls.get("control frames", 0) <= 0.6 * calls["control messages"], calls
    assert calls["commit"] == completed
