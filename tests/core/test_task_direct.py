"""`Task` driven by hand (no executor): behaviours the end-to-end tests reach only by chance.

Each test scripts a task's input and reads what it sends and snapshots: a task that learned a
newer completion than a barrier carries forwards the newer one (so the sinks behind it learn it),
and an unaligned barrier takes the part of a buffer the task has not processed yet into the
snapshot as channel state (else those records would be lost on a restore).
"""

from __future__ import annotations

from typing import Any

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.core.subtask_checkpoint import TaskRestore
from runtime.core.task import Task
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.records.messages import Buffer, BufferOrEvent, CheckpointBarrier, CheckpointOptions
from vocabulary.handles import TaskId
from vocabulary.ports import ManualClock, ManualTimers

TO_APP = "to-app"


class Ports:
    """The `TaskPorts` a test reads back: snapshots handed over for writing, completions learned."""

    def __init__(self) -> None:
        self.snapshots: list[Any] = []
        self.learned: list[int] = []

    def acknowledge(self, ack: Any) -> None:
        pass

    def decline(self, task_id: TaskId, checkpoint_id: int, reason: Any) -> None:
        raise AssertionError(f"{task_id} declined {checkpoint_id}: {reason}")

    def source_finished(self, task_id: TaskId) -> None:
        pass

    def write_snapshot(self, snapshot: Any) -> None:
        self.snapshots.append(snapshot)

    def buffer_consumed(self, task_id: TaskId, input_channel: int) -> None:
        pass

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        self.learned.append(checkpoint_id)


def to_app_task(*, unaligned: bool = False, restore: TaskRestore | None = None) -> tuple[Task, Ports]:
    """Subtask 0 of "to-app" (one input channel) of source -> to-app -> sink, unchained."""
    env = StreamEnvironment(parallelism=1, buffer_size=8)
    env.disable_chaining()
    env.enable_checkpointing(interval=1.0, unaligned=unaligned)
    rows = [{"i": i} for i in range(10)]
    env.from_collection(rows).map(lambda r: {"i": r["i"]}, name=TO_APP).sink_to(CollectSink("out"))
    graph = env.get_job_graph("direct")
    clock = ManualClock()
    ports = Ports()
    task = Task(TaskId(TO_APP, 0), graph, graph.vertex(TO_APP), clock=clock, timers=ManualTimers(clock),
                ports=ports, committer=CollectCommitter(), restore=restore)
    return task, ports


def sent_barriers(task: Task) -> list[CheckpointBarrier]:
    return [payload for _, payload in task.drain_sendable() if isinstance(payload, CheckpointBarrier)]


def run(task: Task) -> None:
    while task.has_work() and task.step():
        pass


def test_a_task_forwards_the_newest_completion_it_knows_on_its_barriers() -> None:
    """Told of checkpoint 5 (as a completion listener is), the task stamps 5 on the barrier of
    checkpoint 6 that reached it stamped 3: the listener-less sinks behind it learn of 5 from it."""
    task, _ = to_app_task()
    task.notify_checkpoint_complete(5)
    task.push(BufferOrEvent(0, CheckpointBarrier(6, 0.0, CheckpointOptions(), completed=3)))
    run(task)
    assert [(b.id, b.completed) for b in sent_barriers(task)] == [(6, 5)]


def test_a_task_learns_a_completion_from_a_barrier_and_passes_it_on() -> None:
    task, ports = to_app_task()
    task.push(BufferOrEvent(0, CheckpointBarrier(8, 0.0, CheckpointOptions(), completed=7)))
    run(task)
    assert ports.learned == [7] and task.completed_id == 7
    assert [(b.id, b.completed) for b in sent_barriers(task)] == [(8, 7)]


def test_an_unaligned_barrier_takes_the_unprocessed_rest_of_a_buffer_into_channel_state() -> None:
    """Records of a buffer go one per step (`records_per_step`); the barrier arriving after the
    first step overtakes the other two, which are channel state of the snapshot, not lost."""
    task, ports = to_app_task(unaligned=True)
    task.records_per_step = 1
    task.push(BufferOrEvent(0, Buffer.from_records([{"i": 0}, {"i": 1}, {"i": 2}])))
    assert task.step() == 1  # record 0 only
    task.push(BufferOrEvent(0, CheckpointBarrier(1, 0.0, CheckpointOptions(unaligned=True))))
    run(task)
    (snapshot,) = ports.snapshots
    assert [r for buffer in snapshot.input_channel_state[0] for r in buffer.to_records()] == [{"i": 1}, {"i": 2}]
    assert task.records_in == 3  # the rest is still processed after the barrier, as in-flight data


def test_an_unaligned_barrier_takes_restored_channel_state_not_yet_replayed() -> None:
    """Restored in-flight records the task has not replayed yet are still in flight: the next
    unaligned snapshot holds them (ahead of the rest of a buffer in progress), or a second
    failure would lose them."""
    restored = [Buffer.from_records([{"i": 0}, {"i": 1}]), Buffer.from_records([{"i": 2}])]
    task, ports = to_app_task(unaligned=True, restore=TaskRestore(1, input_channel_state={0: restored}))
    task.records_per_step = 1
    assert task.step() == 1  # record 0 of the first restored buffer
    task.push(BufferOrEvent(0, CheckpointBarrier(2, 0.0, CheckpointOptions(unaligned=True))))
    run(task)
    (snapshot,) = ports.snapshots
    assert [r for buffer in snapshot.input_channel_state[0] for r in buffer.to_records()] == [{"i": 1}, {"i": 2}]


def test_a_source_reads_at_most_records_per_step() -> None:
    """A slow function chained into a source runs in the source's steps: those are bounded too."""
    env = StreamEnvironment(parallelism=1, buffer_size=8)
    env.from_collection([{"i": i} for i in range(5)]).map(lambda r: r, name=TO_APP).sink_to(CollectSink("out"))
    graph = env.get_job_graph("direct")
    (vertex,) = graph.source_vertices
    clock = ManualClock()
    task = Task(TaskId(vertex.name, 0), graph, vertex, clock=clock, timers=ManualTimers(clock), ports=Ports(),
                committer=CollectCommitter())
    task.records_per_step = 2
    assert [task.step() for _ in range(3)] == [2, 2, 1]
    task.records_per_step = None
    assert task.step() == 0 and task.records_in == 5
