"""Completion notifications ride on barriers (`runtime.jobmaster.completions`): a task without a
completion listener gets no call of its own for a non-final completed checkpoint; it learns the
newest one from its trigger (a source) or from the barriers it receives, before handling them.
Tasks with a listener, and every task for the final checkpoint, are notified directly."""

from __future__ import annotations

from typing import Any

import pytest
from sim_jobs import EXPECTED, pageview

from checkpoint.handles import TaskId
from checkpoint.io.snapshot_writer import SnapshotWriter
from checkpoint.options import CheckpointingMode
from runtime import FaultPlan, StreamEnvironment
from runtime.core.task import Task
from runtime.jobmaster.faults import LostControlMessage, TaskCrash
from runtime.workloads.seeded import multiset

SINKS = {"pv"}


def unchained(mode: CheckpointingMode, **options: Any) -> StreamEnvironment:
    """source -> to-app -> count -> sink, each its own vertex: three listener-less vertices
    (two of them no source), one listening (the sink)."""
    return pageview(mode, chaining=False, **options)


class Notices:
    """What every task was told of completions: directly (`notify_checkpoint_complete` from the
    executor) or learned (from a barrier or its trigger), per task, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.direct: dict[TaskId, list[tuple[int, bool]]] = {}
        self.learned: dict[TaskId, list[int]] = {}
        self._learning = False
        notify, learn = Task.notify_checkpoint_complete, getattr(Task, "_learn_completion", None)
        notices = self

        def recording_notify(task: Task, checkpoint_id: int, *, final: bool = False) -> None:
            if not notices._learning:
                notices.direct.setdefault(task.task_id, []).append((checkpoint_id, final))
            notify(task, checkpoint_id, final=final)

        def recording_learn(task: Task, checkpoint_id: int) -> None:
            notices.learned.setdefault(task.task_id, []).append(checkpoint_id)
            notices._learning = True
            try:
                learn(task, checkpoint_id)
            finally:
                notices._learning = False

        monkeypatch.setattr(Task, "notify_checkpoint_complete", recording_notify)
        if learn is not None:  # (the code before notifications rode on barriers had none)
            monkeypatch.setattr(Task, "_learn_completion", recording_learn)


def listening(task: TaskId) -> bool:
    return task.vertex.startswith("Sink")


@pytest.mark.parametrize("mode,unaligned", [
    (CheckpointingMode.EXACTLY_ONCE, False),
    (CheckpointingMode.EXACTLY_ONCE, True),
    (CheckpointingMode.AT_LEAST_ONCE, False),
], ids=["aligned", "unaligned", "at-least-once"])
def test_tasks_without_a_listener_learn_completions_from_barriers(monkeypatch, mode, unaligned) -> None:
    notices = Notices(monkeypatch)
    env = unchained(mode, unaligned=unaligned)
    graph = env.get_job_graph("notices")
    assert {v.name for v in graph.vertices if v.listens_for_completion} == {t.vertex for t in graph.task_ids()
                                                                           if listening(t)}
    result = env.execute("notices", executor="sim", seed=7)
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    completed = [c.id for c in result.checkpoints if c.completed]
    final = completed[-1]
    assert len(completed) >= 5, completed
    for task in graph.task_ids():
        direct = notices.direct.get(task, [])
        if listening(task):  # every completion, at once
            assert [c for c, _ in direct if c != final] == completed[:-1], task
            assert task not in notices.learned, task
            continue
        # no call of its own but for the final checkpoint (repeated until the job ends)
        assert direct and {c for c, _ in direct} == {final} and all(f for _, f in direct), (task, direct)
        learned = notices.learned.get(task, [])
        assert learned == sorted(set(learned)) and set(learned) <= set(completed[:-1]), (task, learned)
        # the newest completion before the final one reached it with the final checkpoint's barrier
        assert learned and learned[-1] == completed[-2], (task, learned, completed)


def test_a_lost_completion_is_subsumed_by_the_next(monkeypatch) -> None:
    """A source's "complete" control message lost: it learns the next completion instead, and so
    do the tasks downstream of it (through its barriers); nothing waits for the lost one."""
    notices = Notices(monkeypatch)
    source = TaskId("Source: collection", 0)
    plan = FaultPlan.of(LostControlMessage(kind="complete", task=str(source), nth=1))
    result = unchained(CheckpointingMode.EXACTLY_ONCE).execute("lost", executor="sim", seed=3, faults=plan)
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    completed = [c.id for c in result.checkpoints if c.completed]
    assert completed[1] not in notices.learned[source], (notices.learned[source], completed)
    assert completed[2] in notices.learned[source]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exactly_once_with_crashes_and_incremental_state(seed: int, tmp_path, monkeypatch) -> None:
    """Failover epochs (a restored task knows no completion until a barrier tells it) and an
    incremental state backend (whose base moves on the learned completions) keep exactly-once."""
    heard: dict[str, set[int]] = {}
    forward = SnapshotWriter.notify_checkpoint_complete

    def recording(writer: SnapshotWriter, task_id: TaskId, checkpoint_id: int) -> None:
        heard.setdefault(str(task_id), set()).add(checkpoint_id)
        forward(writer, task_id, checkpoint_id)

    monkeypatch.setattr(SnapshotWriter, "notify_checkpoint_complete", recording)
    env = unchained(CheckpointingMode.EXACTLY_ONCE, storage=str(tmp_path), state_backend="incremental",
                    file_merging=True)
    plan = FaultPlan.of(TaskCrash(task="count[1]", at_fraction=0.3), TaskCrash(task="to-app[0]", at_fraction=0.7))
    result = env.execute("crashes", executor="sim", seed=seed, faults=plan)
    assert result.restarts >= 1
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    final = max(c.id for c in result.checkpoints if c.completed)
    for task in ("count[0]", "count[1]", "to-app[0]", "to-app[1]"):  # the writer's base moved on
        assert heard.get(task, set()) - {final}, (task, heard.get(task))
