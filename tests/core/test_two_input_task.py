"""A two-input task driven by hand: both inputs' channels are one input gate for the barrier
handler (aligned: the side whose barrier came first waits for the other; unaligned: the barrier
overtakes the data of both inputs, which becomes channel state), and the operator's watermark is
the minimum of both inputs' (an idle input left out)."""

from __future__ import annotations

from typing import Any

from test_task_direct import Ports

from operators import CollectSink, KeyedCoProcessFunction, WatermarkStrategy
from operators.timestamps import TIMESTAMP_FIELD
from runtime import StreamEnvironment
from runtime.core.task import Task
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
)
from vocabulary.handles import TaskId
from vocabulary.ports import ManualClock, ManualTimers

CO = "co"
LEFT, RIGHT = 0, 1  # the co-process task's input channels (one upstream subtask per input)


class Sides(KeyedCoProcessFunction):
    """Emits each record with its side; a timer at each record's time reports the watermark."""

    def process_element1(self, record, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp())
        yield {"side": "left", "i": record["i"]}

    def process_element2(self, record, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp())
        yield {"side": "right", "i": record["i"]}

    def on_timer(self, timestamp, ctx):
        yield {"side": "timer", "i": timestamp}


def co_task(*, unaligned: bool = False) -> tuple[Task, Ports]:
    env = StreamEnvironment(parallelism=1, buffer_size=1)
    env.disable_chaining()  # the sink in a task of its own: the co-process task's output is on the network
    env.enable_checkpointing(interval=1.0, unaligned=unaligned)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, previous: r["i"])
    left = env.from_collection([{"k": "a", "i": 0}], name="left", watermark_strategy=strategy)
    right = env.from_collection([{"k": "a", "i": 0}], name="right", watermark_strategy=strategy)
    left.connect(right).key_by("k", "k").process(Sides(), name=CO).sink_to(CollectSink("out"))
    graph = env.get_job_graph("two-input")
    assert graph.channel_inputs(CO, 0) == [LEFT, RIGHT]
    clock = ManualClock()
    ports = Ports()
    task = Task(TaskId(CO, 0), graph, graph.vertex(CO), clock=clock, timers=ManualTimers(clock), ports=ports,
                committer=CollectCommitter())
    for _ in range(100):  # the sink's credits: what the task emits is sent at once
        task.add_credit(0)
    return task, ports


def run(task: Task) -> None:
    """Step the task until it has nothing to do (an event's step handles no record)."""
    for _ in range(1000):
        if not task.has_work():
            return
        task.step()
    raise AssertionError(f"{task} still has work after 1000 steps")


def data(i: int) -> Buffer:
    return Buffer.from_records([{"k": "a", "i": i, TIMESTAMP_FIELD: i}])


def barrier(unaligned: bool = False) -> CheckpointBarrier:
    return CheckpointBarrier(1, 0.0, CheckpointOptions(unaligned=unaligned))


def sent(task: Task) -> list[Any]:
    """What the task sent since the last call: `(side, i)` per record, barrier ids, watermarks."""
    task.flush()
    out: list[Any] = []
    for _, payload in task.drain_sendable():
        if isinstance(payload, Buffer):
            out += [(r["side"], r["i"]) for r in payload.to_records()]
        elif isinstance(payload, CheckpointBarrier):
            out.append(f"barrier {payload.id}")
        elif isinstance(payload, Watermark):
            out.append(payload)
    return out


def test_aligned_a_side_whose_barrier_came_first_waits_for_the_slow_side() -> None:
    task, ports = co_task()
    task.push(BufferOrEvent(LEFT, barrier()))
    task.push(BufferOrEvent(LEFT, data(1)))
    task.push(BufferOrEvent(RIGHT, data(2)))
    run(task)
    assert sent(task) == [("right", 2)]  # the left side is blocked until the right side's barrier
    assert not ports.snapshots
    task.push(BufferOrEvent(RIGHT, barrier()))
    task.push(BufferOrEvent(RIGHT, data(3)))
    run(task)
    assert sent(task) == ["barrier 1", ("left", 1), ("right", 3)]
    (snapshot,) = ports.snapshots
    assert not snapshot.input_channel_state  # aligned: no in-flight data in the snapshot


def test_unaligned_the_barrier_overtakes_the_data_of_both_inputs() -> None:
    task, ports = co_task(unaligned=True)
    task.push(BufferOrEvent(LEFT, data(1)))
    task.push(BufferOrEvent(RIGHT, data(2)))
    task.push(BufferOrEvent(LEFT, barrier(unaligned=True)))
    task.push(BufferOrEvent(RIGHT, barrier(unaligned=True)))
    run(task)
    assert sent(task) == ["barrier 1", ("left", 1), ("right", 2)]
    (snapshot,) = ports.snapshots
    state = {channel: [r["i"] for b in buffers for r in b.to_records()]
             for channel, buffers in snapshot.input_channel_state.items()}
    assert state == {LEFT: [1], RIGHT: [2]}


def test_the_watermark_is_the_minimum_of_both_inputs() -> None:
    task, _ = co_task()
    task.push(BufferOrEvent(LEFT, data(10)))
    task.push(BufferOrEvent(RIGHT, data(20)))
    task.push(BufferOrEvent(LEFT, Watermark(30)))
    run(task)
    assert sent(task) == [("left", 10), ("right", 20)]  # the right input has no watermark yet
    task.push(BufferOrEvent(RIGHT, Watermark(15)))
    run(task)
    assert sent(task) == [("timer", 10), Watermark(15)]
    task.push(BufferOrEvent(RIGHT, Watermark(40)))
    run(task)
    assert sent(task) == [("timer", 20), Watermark(30)]  # now the left input holds it back


def test_an_idle_input_does_not_hold_the_watermark_back() -> None:
    task, _ = co_task()
    task.push(BufferOrEvent(LEFT, data(10)))
    task.push(BufferOrEvent(RIGHT, data(20)))
    task.push(BufferOrEvent(RIGHT, Watermark(5)))
    task.push(BufferOrEvent(LEFT, Watermark(25)))
    run(task)
    assert sent(task) == [("left", 10), ("right", 20), Watermark(5)]
    task.push(BufferOrEvent(RIGHT, WatermarkStatus(True)))
    run(task)
    assert sent(task) == [("timer", 10), ("timer", 20), Watermark(25)]  # the left input's alone
    task.push(BufferOrEvent(LEFT, EndOfPartition()))
    task.push(BufferOrEvent(RIGHT, EndOfPartition()))
    run(task)
    assert sent(task) == [Watermark(float("inf"))]
