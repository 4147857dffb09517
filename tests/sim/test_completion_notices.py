"""Completion notifications ride on barriers (`runtime.jobmaster.coordination.completions`): a task without a
completion listener gets no call of its own for a non-final completed checkpoint; it learns the
newest one from its trigger (a source) or from the barriers it receives, before handling them.
Tasks with a listener, and every task for the final checkpoint, are notified directly.

A two-phase-commit sink whose transactions the global committer commits (`CollectSink`) is no
listener: on a completion it only forgets its pending transaction ids, so it may learn late. Its
guarantees are checked here where learning late could break them: a crash after a checkpoint
completed but before the sink learned it, a restore (in the same or a new execution) from a
checkpoint whose completion the sink never heard of, and the final checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_jobs import EXPECTED, pageview

from checkpoint.io.snapshot_writer import SnapshotWriter
from operators import CollectSink
from operators.base import StreamOperator
from runtime import FaultPlan, JobFailedError, RestartStrategy, StreamEnvironment
from runtime.core.graph import JobVertex, OperatorFactory
from runtime.core.task import Task
from runtime.sim.fault_actions import SimFaultActions
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import LostControlMessage, TaskCrash
from vocabulary.handles import TaskId
from vocabulary.options import CheckpointingMode

SINKS = {"pv"}


class ListeningSink(CollectSink):
    """A user's sink that does something of its own on every completion: it still listens."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)


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


def test_which_chains_listen_for_completions() -> None:
    """A `CollectSink` does not (the global committer commits its transactions); a sink or
    operator of the user's that overrides `notify_checkpoint_complete` does; an operator not built
    from a template does."""
    assert not CollectSink("pv").listens_for_completion()
    assert ListeningSink("pv").listens_for_completion()

    class Listener(StreamOperator):
        def process_batch(self, records):
            return records

        def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
            pass

    class Plain(StreamOperator):
        def process_batch(self, records):
            return records

    assert Listener().listens_for_completion() and not Plain().listens_for_completion()
    for chaining in (True, False):
        graph = pageview(CheckpointingMode.EXACTLY_ONCE, chaining=chaining).get_job_graph("pv")
        assert not any(v.listens_for_completion for v in graph.vertices), chaining
    source = graph.source_vertices[0].source

    def vertex(*operators: Any) -> JobVertex:
        return JobVertex("v", 1, 8, source=source, operator_factories=list(operators),
                         operator_names=[f"op{i}" for i in range(len(operators))])

    assert not vertex(OperatorFactory(Plain()), OperatorFactory(CollectSink("pv"))).listens_for_completion
    assert vertex(OperatorFactory(Listener()), OperatorFactory(CollectSink("pv"))).listens_for_completion
    assert vertex(OperatorFactory(ListeningSink("pv"))).listens_for_completion
    assert vertex(lambda: Plain()).listens_for_completion  # no template: counts as listening


def test_a_spark_sink_needs_no_notification() -> None:
    # the global committer writes its files when it commits the checkpoint (`staged_in_committer`):
    # its output is visible at the completion, whenever the notification arrives
    from spark_bridge.io.sink import SparkSink

    assert not SparkSink("/tmp/out").listens_for_completion()


def listening_env(mode: CheckpointingMode, **options: Any) -> StreamEnvironment:
    """The unchained page-view job with `ListeningSink` instead of `CollectSink`."""
    return unchained(mode, sink=ListeningSink("pv"), **options)


@pytest.mark.parametrize("listening_sink", [False, True], ids=["collect-sink", "listening-sink"])
@pytest.mark.parametrize("mode,unaligned", [
    (CheckpointingMode.EXACTLY_ONCE, False),
    (CheckpointingMode.EXACTLY_ONCE, True),
    (CheckpointingMode.AT_LEAST_ONCE, False),
], ids=["aligned", "unaligned", "at-least-once"])
def test_tasks_without_a_listener_learn_completions_from_barriers(monkeypatch, mode, unaligned,
                                                                  listening_sink: bool) -> None:
    notices = Notices(monkeypatch)
    env = (listening_env if listening_sink else unchained)(mode, unaligned=unaligned)
    graph = env.get_job_graph("notices")

    def listening(task: TaskId) -> bool:
        return listening_sink and task.vertex == "Sink: pv"

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


# ---------------------------------------------------------------------- a sink that learns late


def sink_task(chaining: bool) -> str:
    """The sink subtask that gets records (every app's key lands on subtask 0)."""
    return "count[0]" if chaining else "Sink: pv[0]"


class CrashWindow:
    """At every injected task crash: the transactions the crashed task's sink still held as
    pending although the global committer had committed them (their checkpoint completed; the
    sink had not learned it yet), and the newest completed checkpoint then."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.crashes: list[tuple[str, list[str], int]] = []
        crash = SimFaultActions.crash_task
        window = self

        def recording(actions: SimFaultActions, task_id: TaskId, what: str) -> None:
            executor = actions.sim
            task = executor.tasks.get(task_id)
            latest = executor.coordinator.stats.latest_completed
            if task is not None:
                committed = set(executor.committer.transactions("pv"))
                unlearned = [txn for op in task.operators if isinstance(op, CollectSink)
                             for txn in op.pending_transactions if txn in committed]
                window.crashes.append((str(task_id), unlearned, latest.id if latest else 0))
            crash(actions, task_id, what)

        monkeypatch.setattr(SimFaultActions, "crash_task", recording)

    @property
    def hit(self) -> list[tuple[str, list[str], int]]:
        """The crashes that struck a sink between a completion and its learning of it."""
        return [c for c in self.crashes if c[1]]


@pytest.mark.slow
@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_sink_crashing_before_it_learned_a_completion_loses_and_duplicates_nothing(monkeypatch, chaining: bool,
                                                                                     unaligned: bool) -> None:
    """VOPR-style: one seed per run, the crash point drawn from it. The global committer committed
    the checkpoint; the sink still held its transactions as pending; the restore (from that
    checkpoint, whose completion the sink never heard of) commits them again, a no-op."""
    window = CrashWindow(monkeypatch)
    for seed in range(12):
        plan = FaultPlan.of(TaskCrash(task=sink_task(chaining), at_fraction=0.35 + 0.05 * seed))
        env = pageview(CheckpointingMode.EXACTLY_ONCE, unaligned=unaligned, chaining=chaining)
        result = env.execute("late", executor="sim", seed=seed, faults=plan, invariants=True)
        assert result.restarts >= 1, (seed, result.failures)
        assert multiset(result.output("pv")) == EXPECTED, result.replay
    # (a crash before the first completion, or after the final one, cannot strike in the window)
    assert len(window.hit) >= 3, window.crashes


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), fraction=st.floats(0.05, 0.95), unaligned=st.booleans(),
       chaining=st.booleans(), max_concurrent=st.sampled_from([1, 2]), crashes=st.integers(1, 3))
def test_sinks_learning_late_keep_exactly_once_under_random_crashes(seed: int, fraction: float, unaligned: bool,
                                                                    chaining: bool, max_concurrent: int,
                                                                    crashes: int) -> None:
    plan = FaultPlan.random(seed=seed, crashes=crashes)
    plan = FaultPlan.of(*plan.faults, TaskCrash(task=sink_task(chaining), at_fraction=fraction))
    env = pageview(CheckpointingMode.EXACTLY_ONCE, unaligned=unaligned, chaining=chaining,
                   max_concurrent=max_concurrent)
    result = env.execute("late", executor="sim", seed=seed, faults=plan, invariants=True)
    assert multiset(result.output("pv")) == EXPECTED, result.replay


def test_a_new_execution_restores_a_checkpoint_whose_completion_the_sink_never_learned(tmp_path,
                                                                                        monkeypatch) -> None:
    window = CrashWindow(monkeypatch)
    env = pageview(CheckpointingMode.EXACTLY_ONCE, storage=str(tmp_path))
    env.set_restart_strategy(RestartStrategy.no_restart())
    with pytest.raises(JobFailedError):
        env.execute("late", executor="sim", seed=4, faults=FaultPlan.of(TaskCrash(task="count[0]", at_fraction=0.5)))
    [(_, unlearned, latest)] = window.crashes
    assert unlearned, "the crash did not strike between a completion and the sink learning of it"
    assert max(int(txn.rsplit("/", 1)[1]) for txn in unlearned) == latest
    # a fresh execution restores that checkpoint; its sink commits the restored pending ids again
    result = pageview(CheckpointingMode.EXACTLY_ONCE, storage=str(tmp_path / "second")) \
        .restore_from(str(tmp_path), job_id="late", checkpoint_id=latest).execute("late", executor="sim", seed=5)
    assert multiset(result.output("pv")) == EXPECTED, result.replay


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_the_final_checkpoint_reaches_the_sinks_directly(monkeypatch, unaligned: bool) -> None:
    """No barrier follows the final checkpoint: the sinks hear of it by a call, and commit what
    arrived after it (unaligned: its channel state) at end of input; a crash after it replays
    into the same transactions."""
    notices = Notices(monkeypatch)
    plan = FaultPlan.of(TaskCrash(task="count[0]", at_fraction=0.99))
    result = pageview(CheckpointingMode.EXACTLY_ONCE, unaligned=unaligned).execute(
        "final", executor="sim", seed=2, faults=plan)
    assert multiset(result.output("pv")) == EXPECTED, result.replay
    final = max(c.id for c in result.checkpoints if c.completed)
    for subtask in (0, 1):
        task = TaskId("count", subtask)
        assert {c for c, final_ in notices.direct[task] if final_} == {final}, notices.direct[task]
        assert not [c for c, final_ in notices.direct[task] if not final_], notices.direct[task]
