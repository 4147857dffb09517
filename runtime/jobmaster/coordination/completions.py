"""Who hears of a completed checkpoint by a call of its own, and how the others learn of it.

Flink tells every task of every completed checkpoint (`notifyCheckpointComplete`). A task whose
chain has no completion listener (`JobVertex.listens_for_completion`: no user listener, no sink
committing its own transactions) only tidies its bookkeeping on it (forgotten cancellations, the
snapshot writer's base for an incremental snapshot, a `CollectSink`'s pending transaction ids —
the coordinator's global committer already committed them), so it may learn late, and a later
completion subsumes an earlier one:

* a source task learns with its next trigger (`CompletionNotices.take`), and puts the newest
  completion it knows into the barriers it emits (`CheckpointBarrier.completed`);
* any other such task takes it from the barriers it receives (the highest seen), before the
  barrier is handled (`Task.push`).

Tasks with a listener, and every task for the final checkpoint (a source waits for it to end its
input; no later barrier would carry it), are notified at once. Aborts are always notified.
Both executors route through this class, so what a task knows, and when, is the same on both.
"""

from __future__ import annotations

from typing import Any

from vocabulary.handles import TaskId


class CompletionNotices:
    """The routing of completion notifications for one job graph, and what each source is owed.

    Args:
        graph: the `JobGraph` (its vertices' `listens_for_completion` and sources).
    """

    def __init__(self, graph: Any) -> None:
        self.direct = frozenset(t for v in graph.vertices if v.listens_for_completion for t in v.task_ids())
        self.sources = frozenset(graph.source_task_ids())
        self._owed: dict[TaskId, int] = {}

    def is_direct(self, task_id: TaskId, final: bool) -> bool:
        """Whether `task_id` is told of this completion by a call of its own; if so, whatever it
        was owed is subsumed."""
        if final or task_id in self.direct:
            self._owed.pop(task_id, None)
            return True
        return False

    def owe(self, task_id: TaskId, checkpoint_id: int) -> None:
        """A completion `task_id` is not called for: a source keeps the newest for its next
        trigger; any other task takes it from a barrier."""
        if task_id in self.sources:
            self._owed[task_id] = max(checkpoint_id, self._owed.get(task_id, checkpoint_id))

    def take(self, task_id: TaskId) -> int | None:
        """The completion to send along with `task_id`'s trigger (None: nothing new)."""
        return self._owed.pop(task_id, None)

    def clear(self) -> None:
        """A new execution attempt: nothing of the old one is owed."""
        self._owed.clear()
