"""Sinks: `Sink`, what `sink_to` takes; `CollectSink`, a two-phase-commit sink, end-to-end
exactly-once (`docs/semantics.md`, "Exactly-once sinks"); `DiscardingSink`, which drops its input.

Theory of operation
-------------------
Records are collected in an *open transaction*. When checkpoint k's barrier reaches the sink,
`snapshot_state(k)` pre-commits the open transaction: its records are *staged* in the external
system (`ctx.committer.stage`, durable but invisible) as transaction k, and the ids of every
pending transaction go into the operator state of checkpoint k — the records themselves never
enter the checkpoint (as with Flink's Kafka sink, whose state holds transaction handles). Only
when the coordinator says checkpoint k completed (`notify_checkpoint_complete(k)`) are pending
transactions with checkpoint <= k committed (`ctx.committer.commit`), which deduplicates by
transaction id — unless the committer `commits_checkpoints` (both executors: the coordinator
commits each completed checkpoint for every sink in one call, Flink's global committer); the sink
then only forgets them. That bookkeeping may happen late, so such a sink is no completion listener
(`listens_for_completion`): its task learns a non-final completion from the next barrier (or
trigger), before that barrier's snapshot, instead of by a call of its own
(`runtime.jobmaster.coordination.completions`). Until then its snapshots still name the committed ids as
pending; whatever restores them commits them again, a no-op by txn id. The final checkpoint is
still notified by a call, and end of input commits every pending id anyway.

* Abort of k: its pending transaction stays pending; a later completed checkpoint k' > k contains
  it (snapshots include every uncommitted transaction) and commits it.
* Failure: the task restores the state of the latest completed checkpoint c. Its pending
  transactions all belong to checkpoints <= c, which completed, so `restore_state` commits them
  at once (Flink's recoverAndCommit) from what the external system staged; a commit that already
  happened (by the global committer, or before a crash the sink had not learned of) is a no-op
  by txn id. (State written before staging existed carries the records
  themselves; they are committed from the state.)
  Records staged after c are replayed by the sources and staged again, under new ids; the
  executor aborts the failed attempt's stages past c before it redeploys
  (`CollectCommitter.abort_lingering`), so they do not linger in the external system.
* No checkpointing: nothing can ever complete, so `end_input` commits the open transaction.

Transaction ids are `"<sink>/<subtask>/<checkpoint>"` (and `"<sink>/<subtask>/final"`); checkpoint
ids strictly increase across restarts, so an id is never reused for different records.
"""

from __future__ import annotations

from typing import Any

from operators.base import DeclaredState, OperatorContext, Record, StreamOperator
from operators.columns import Batch, as_records, concat, num_rows
from operators.timestamps import split_batch, strip


class Sink(StreamOperator):
    """The end of a stream, what `DataStream.sink_to` takes: an operator with a job-wide unique
    name that emits nothing.

    Args:
        name: the sink name; unique per job.

    Raises:
        ValueError: `name` is empty or not a string, or contains '/'.
    """

    #: its transactions are staged in `ctx.committer`, which then has something to commit per
    #: completed checkpoint (`runtime.core.graph.JobVertex.stages_in_committer`)
    staged_in_committer = False

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"{type(self).__name__} name must be a non-empty string without '/', got {name!r}")
        self.sink_name = name
        self.name = f"Sink: {name}"


class CollectSink(Sink):
    """Collects records into the job result, committed in checkpoint-aligned transactions
    (without their event timestamps, as a Flink sink's values).

    Args:
        name: the sink name; unique per job, `result.output(name)` returns its committed records.

    Raises:
        ValueError: `name` is empty or not a string, or contains '/'.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        #: the open transaction: record lists and Arrow batches, in arrival order
        self._open: list[Batch] = []
        self._open_rows = 0
        #: pre-committed (staged) transactions, oldest first: {"txn", "checkpoint"}
        self._pending: list[dict[str, Any]] = []
        #: restored before `open()` gave us a committer: commit them in `open()`
        self._restored: list[dict[str, Any]] = []

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._last_checkpoint = ctx.restored_checkpoint_id or 0
        if self._restored:
            restored, self._restored = self._restored, []
            self._commit_all(restored)

    accepts_columns = True
    stages_records = True
    #: its transactions are staged in `ctx.committer` (which may commit them per checkpoint for
    #: every sink: `commits_checkpoints`); False for a subclass whose `_commit_all` commits
    #: transactions of its own (files)
    staged_in_committer = True

    def process_batch(self, records: list[Record]) -> list[Record]:
        self._open.append(strip(records))
        self._open_rows += len(records)
        return []

    def process_columns(self, batch: Any) -> list[Record]:
        self._open.append(split_batch(batch)[0])
        self._open_rows += num_rows(batch)
        return []

    def _take_open(self) -> list[Record] | Any:
        """Empty the open transaction; its records as one Arrow batch when they all came as
        batches of one schema (they travel and are kept that way), else as dicts."""
        pieces = concat(self._open)
        self._open, self._open_rows = [], 0
        if len(pieces) == 1:
            return pieces[0]
        return [record for piece in pieces for record in as_records(piece)]

    def snapshot_state(self, checkpoint_id: int) -> dict[str, list[Any]]:
        self._last_checkpoint = max(self._last_checkpoint, checkpoint_id)
        if self._open_rows:
            txn = f"{self.sink_name}/{self.ctx.subtask}/{checkpoint_id}"
            self.ctx.committer.stage(self.sink_name, txn, self._take_open())
            self._pending.append({"txn": txn, "checkpoint": checkpoint_id})
        # entries are never mutated once pending, so a shallow copy of the list is immutable enough
        return {"pending": list(self._pending)} if self._pending else {}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        done = [t for t in self._pending if t["checkpoint"] <= checkpoint_id]
        if done:
            self._pending = [t for t in self._pending if t["checkpoint"] > checkpoint_id]
            if not (self.staged_in_committer and getattr(self.ctx.committer, "commits_checkpoints", False)):
                self._commit_all(done)

    def listens_for_completion(self) -> bool:
        """False when the global committer commits this sink's transactions (`staged_in_committer`,
        and `notify_checkpoint_complete` not overridden): the notification then only forgets
        pending ids, which may happen late (see the module docstring). A sink committing its own
        transactions (`staged_in_committer` false: files) listens, so its output is visible at once."""
        return not self.staged_in_committer or \
            type(self).notify_checkpoint_complete is not CollectSink.notify_checkpoint_complete

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Pending transactions stay pending until a later checkpoint completes."""

    def declared_state(self) -> DeclaredState:
        return DeclaredState(operator=frozenset({"pending"}))

    def restore_state(self, state: dict[str, list[Any]]) -> None:
        restored = sorted(state.get("pending", []), key=lambda t: (t["checkpoint"], t["txn"]))
        if not restored:
            return
        if getattr(self, "ctx", None) is None:
            self._restored.extend(restored)
        else:
            self._commit_all(restored)

    def end_input(self) -> list[Record]:
        """All input arrived: commit what was staged after the last completed checkpoint.

        Without checkpointing that is everything. With checkpointing, input ends only after the
        job's final checkpoint completed (sources hold back their end of partition until then), so
        what is staged now arrived after that checkpoint's barrier: what operators emitted at end
        of input (the final checkpoint is taken aligned, so no in-flight record of it arrives
        here). A restore can only go back to that same checkpoint, which replays exactly these
        records, so the transaction id is derived from it (the last checkpoint this sink
        snapshotted or was restored from — the final one either way) and a re-commit after a
        failure is a no-op.
        """
        if self.ctx.checkpointing:
            # every pending transaction belongs to a checkpoint <= the final one, which completed
            # (no checkpoint is triggered after it), even if its notification has not reached
            # this subtask yet (on Ray the end of partition can overtake it)
            pending, self._pending = self._pending, []
            self._commit_all(pending)
        if self._open_rows:
            records = self._take_open()
            last = f"end-after-{self._last_checkpoint}" if self.ctx.checkpointing else "final"
            self.ctx.committer.commit(self.sink_name, f"{self.sink_name}/{self.ctx.subtask}/{last}", records)
        return []

    def _commit_all(self, transactions: list[dict[str, Any]]) -> None:
        commit = self.ctx.committer.commit
        for txn in transactions:
            records = txn.get("records")  # only in state written before sinks staged
            commit(self.sink_name, txn["txn"], None if records is None else list(records))

    @property
    def num_staged(self) -> int:
        """Records in the open transaction."""
        return self._open_rows

    @property
    def pending_transactions(self) -> list[str]:
        """Ids of pre-committed, not yet committed transactions."""
        return [t["txn"] for t in self._pending]

    def __repr__(self) -> str:
        return f"CollectSink({self.sink_name!r}, staged={self._open_rows}, pending={self.pending_transactions})"


class DiscardingSink(Sink):
    """Drops every record, as Flink's `DiscardingSink`: the end of a job whose output nobody
    keeps. It has no state, stages and commits nothing (`result.output(name)` is empty) and checks
    no record's types, so a run measures what checkpoints cost the job without a transactional
    sink's work.

    Args:
        name: the sink name; unique per job (default "discard").

    Raises:
        ValueError: `name` is empty or not a string, or contains '/'.
    """

    accepts_columns = True

    def __init__(self, name: str = "discard") -> None:
        super().__init__(name)

    def process_batch(self, records: list[Record]) -> list[Record]:
        return []

    def process_columns(self, batch: Any) -> list[Record]:
        return []

    def __repr__(self) -> str:
        return f"DiscardingSink({self.sink_name!r})"
