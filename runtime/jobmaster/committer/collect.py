"""`CollectCommitter`: the "external system" behind `CollectSink`s, its transactions and the
errors a commit raises."""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, NamedTuple

import pyarrow as pa

from vocabulary.errors import SuppressRestartsError

Record = dict[str, Any]
#: a transaction's records: dicts, or one Arrow record batch (as the Ray committer receives them)
Records = list[Record] | pa.RecordBatch


def _rows(records: Records) -> list[Record]:
    return records.to_pylist() if isinstance(records, pa.RecordBatch) else list(records)


def _num_rows(records: Records) -> int:
    return records.num_rows if isinstance(records, pa.RecordBatch) else len(records)


def _keep(records: Records) -> Records:
    """What a committer stores: a batch as is (immutable), dicts as a private list."""
    return records if isinstance(records, pa.RecordBatch) else list(records)


class UnknownTransactionError(KeyError):
    """A commit named a transaction that was never staged (its records would be lost). A restart
    cannot stage it: the job fails at once (`suppresses_restarts`)."""

    suppress_restarts = True

    def __str__(self) -> str:
        return str(self.args[0])


class TransactionConflictError(SuppressRestartsError):
    """A sink staged a transaction id that is already committed: the job went back behind output
    the external system already shows. Never fixed by a restart (the next attempt's new ids would
    commit that output again)."""


class CommittedOutput(NamedTuple):
    """The newest checkpoint whose output a committer made visible, and one transaction of it."""

    checkpoint_id: int
    transaction: str


#: `SparkSink`'s transaction names (file names: no '/'): `<sink>-<subtask>-<id>-<8 hex>` and
#: `<sink>-<subtask>-end-after-<id>`
_SPARK_TRANSACTION = re.compile(r"-\d+-(?:(\d+)-[0-9a-f]{8}|end-after-(\d+))$")


def transaction_checkpoint(transaction_id: str) -> int | None:
    """The checkpoint a transaction id belongs to: `<sink>/<subtask>/<id>` and
    `<sink>/<subtask>/end-after-<id>` (records after the final checkpoint `id`) name it, as do
    `SparkSink`'s `<sink>-<subtask>-<id>-<hex>` and `<sink>-<subtask>-end-after-<id>`;
    `.../final` (no checkpointing) names none."""
    if "/" not in transaction_id:
        match = _SPARK_TRANSACTION.search(transaction_id)
        return int(match.group(1) or match.group(2)) if match else None
    last = transaction_id.rpartition("/")[2]
    if last.startswith("end-after-"):
        last = last[len("end-after-"):]
    return int(last) if last.isdigit() else None


def _staged_checkpoint(transaction_id: str) -> int | None:
    """The checkpoint of a staged transaction `<sink>/<subtask>/<id>` (None: another kind of id)."""
    last = transaction_id.rpartition("/")[2]
    return int(last) if last.isdigit() else None


class CollectCommitter:
    """The "external system" behind `CollectSink`s: outlives task restarts. Staged transactions
    are kept invisible until committed; commits are idempotent per transaction id, so a
    transaction re-committed after recovery is not repeated. Transactions staged by an attempt
    that failed before their checkpoint completed stay staged and invisible
    (`staged_transactions`) until the executor recovering from that failure aborts them
    (`abort_lingering`), as Flink's Kafka sink aborts its lingering transactions on recovery.

    A sink may also have a *publisher* (`register_publisher`: `SparkSink`'s output files): each
    commit call then writes what it committed of that sink as one file — `commit_checkpoint`
    one file per sink for every subtask's transactions of the checkpoint. The file is named after
    the transactions it holds, so committing the same ones again (another execution restoring the
    same checkpoint, whose committer never heard of the first's commit) names the same file, which
    is then not written twice. The commit is decided first and the file written after; a file that
    could not be written is written again by the next commit or recovery (`publish_pending`)."""

    def __init__(self) -> None:
        self._committed: dict[str, OrderedDict[str, Records]] = {}
        self._staged: dict[str, dict[str, Records]] = {}
        self.duplicate_commits = 0
        #: staged transactions dropped by `abort_lingering` (or staged late into an aborted range)
        self.aborted_transactions = 0
        #: checkpoint id ranges (after, before) a recovery closed (`fence`): no checkpoint of them can
        #: ever complete, so a stage of one arriving late (sent by a dying attempt) is dropped
        self._aborted_ranges: list[tuple[int, int]] = []
        #: sink -> what writes its committed records where readers see them (`register_publisher`)
        self._publishers: dict[str, Any] = {}
        #: publications decided but not written yet: (publisher, file name, records)
        self._unpublished: list[tuple[Any, str, list[Records]]] = []

    def register_publisher(self, sink: str, publisher: Any) -> None:
        """Write `sink`'s committed records through `publisher` from now on: an object with
        `file_name(sink, transactions)` (the same for the same transactions) and an idempotent
        `publish(name, records_list)`."""
        self._publishers[sink] = publisher

    def publish_pending(self) -> None:
        """Write the publications decided but not written yet (each under its decided name).

        Raises:
            OSError: a file could not be written (it stays pending: the next call writes it).
        """
        while self._unpublished:
            publisher, name, pieces = self._unpublished[0]
            publisher.publish(name, pieces)
            self._unpublished.pop(0)

    def _publication(self, sink: str, transactions: list[str]) -> str | None:
        """The file name of a publication of `sink`'s `transactions` (None: `sink` has no publisher)."""
        publisher = self._publishers.get(sink)
        return None if publisher is None else publisher.file_name(sink, transactions)

    def _publications(self, due: list[tuple[str, str]]) -> dict[str, str | None]:
        """Per sink of `due`, the name of the one file its transactions there are written as."""
        by_sink: dict[str, list[str]] = {}
        for sink, txn in due:
            by_sink.setdefault(sink, []).append(txn)
        return {sink: self._publication(sink, txns) for sink, txns in by_sink.items()}

    def _decide_publication(self, sink: str, name: str | None, pieces: list[Records]) -> None:
        if name is not None and any(_num_rows(piece) for piece in pieces):
            self._unpublished.append((self._publishers[sink], name, pieces))

    def stage(self, sink: str, transaction_id: str, records: Records) -> None:
        """Stage `records` under `transaction_id`, replacing a lingering stage of that id (left by
        an attempt whose checkpoint never completed: its records are replayed). A stage of a
        checkpoint a recovery ruled out (`fence`: sent by a dying attempt, arriving after the
        recovery aborted its checkpoint) is dropped: nothing may ever commit it.

        Raises:
            TransactionConflictError: the id is already committed — this execution restored a
                checkpoint older than what this external system has seen, so its output would
                be duplicated or lost.
        """
        if transaction_id in self._committed.get(sink, ()):
            raise TransactionConflictError(
                f"sink {sink!r}: transaction {transaction_id!r} is already committed; the job restored a "
                "checkpoint older than the output this committer holds (restore the latest checkpoint, "
                "or give the job a fresh committer)"
            )
        if self._lingering(transaction_id):
            self.aborted_transactions += 1
            return
        self._staged.setdefault(sink, {})[transaction_id] = _keep(records)

    def _keeps_stage(self, sink: str, transaction_id: str) -> bool:
        """Whether `stage(sink, transaction_id, ...)` keeps its records (neither a conflict nor a late
        stage of a checkpoint a recovery ruled out)."""
        return transaction_id not in self._committed.get(sink, ()) and not self._lingering(transaction_id)

    def _lingering(self, transaction_id: str) -> bool:
        """Whether `transaction_id` belongs to a checkpoint a recovery ruled out (`fence`)."""
        checkpoint = _staged_checkpoint(transaction_id)
        return checkpoint is not None and any(a < checkpoint < b for a, b in self._aborted_ranges)

    def commit(self, sink: str, transaction_id: str, records: Records | None = None) -> None:
        """Raises: UnknownTransactionError when `records` is None and nothing was staged; OSError
        when the sink's publication could not be written (it is written by the next call)."""
        if self._record_commit(sink, transaction_id, records):
            self._decide_publication(sink, self._publication(sink, [transaction_id]),
                                     [self._committed[sink][transaction_id]])
        self.publish_pending()

    def _record_commit(self, sink: str, transaction_id: str, records: Records | None = None) -> bool:
        """`commit` without its publication; whether the transaction was committed now (False: it
        was already)."""
        txns = self._committed.setdefault(sink, OrderedDict())
        if transaction_id in txns:
            self.duplicate_commits += 1
            return False
        staged = self._staged.get(sink, {}).pop(transaction_id, None)
        if records is None:
            if staged is None:
                raise UnknownTransactionError(
                    f"sink {sink!r}: transaction {transaction_id!r} was committed but never staged here "
                    f"(staged: {sorted(self._staged.get(sink, {}))}). Restoring a checkpoint of an earlier "
                    "execution? Its sinks staged their records in the committer of the run that took it: pass "
                    "that execution's as execute(..., committer=earlier_result.committer), or let the job find "
                    "the one that run kept beside its checkpoints, <dir>/<job>/committed/<run>/ (restore_from(dir) "
                    "looks beside the checkpoint; restore_from_landed in the job's own checkpoint directory, "
                    "enable_checkpointing(storage=dir), so give it the directory the run had)"
                )
            records = staged
        txns[transaction_id] = _keep(records)
        return True

    def commit_checkpoint(self, checkpoint_id: int) -> list[tuple[str, str]]:
        """Flink's global committer: checkpoint `checkpoint_id` completed, so every transaction
        staged for a checkpoint <= it, of every sink, is committed, in checkpoint order. Returns
        the (sink, transaction) pairs committed now.

        These are exactly the transactions the completed checkpoint's sink states name (less what
        was committed already): a sink subtask snapshots checkpoints in increasing order, each
        snapshot names every transaction the subtask has not seen committed, and its stages land
        before it acknowledges; what a failed attempt staged past its restored checkpoint was
        aborted (`abort_lingering`), and is dropped if it arrives later (`fence`)."""
        due = self._due(checkpoint_id)
        self._record_checkpoint(due, self._publications(due))
        self.publish_pending()
        return due

    def _record_checkpoint(self, due: list[tuple[str, str]], names: dict[str, str | None]) -> None:
        """Commit `due` and decide one publication per sink (`names`) of what it committed."""
        pieces: dict[str, list[Records]] = {}
        for sink, txn in due:
            if CollectCommitter._record_commit(self, sink, txn):
                pieces.setdefault(sink, []).append(self._committed[sink][txn])
        for sink, records in pieces.items():
            self._decide_publication(sink, names.get(sink), records)

    def _due(self, checkpoint_id: int) -> list[tuple[str, str]]:
        """The staged transactions of checkpoints <= `checkpoint_id`, in (checkpoint, sink, id) order."""
        due = []
        for sink, staged in self._staged.items():
            for txn in staged:
                checkpoint = _staged_checkpoint(txn)
                if checkpoint is not None and checkpoint <= checkpoint_id:
                    due.append((checkpoint, sink, txn))
        return [(sink, txn) for _, sink, txn in sorted(due)]

    def abort_lingering(self, after: int, before: int) -> list[str]:
        """Drop the staged transactions of checkpoints `after` < id < `before`: the recovery
        restored checkpoint `after` (0: none), whose sinks commit only transactions of
        checkpoints <= `after`, and its new checkpoints get ids >= `before` (ids strictly
        increase across restarts), so nothing can ever commit these. Transactions not named
        after a checkpoint (`.../final`, `.../end-after-<id>`) are committed with their records,
        never staged, and left alone. Returns the dropped ids, sorted. Publications still pending
        are written first (OSError if one still cannot be).
        """
        self.publish_pending()
        aborted = []
        for staged in self._staged.values():
            for txn in list(staged):
                checkpoint = _staged_checkpoint(txn)
                if checkpoint is not None and after < checkpoint < before:
                    del staged[txn]
                    aborted.append(txn)
        self.aborted_transactions += len(aborted)
        return sorted(aborted)

    def fence(self, after: int, before: int) -> None:
        """From now on drop stages of checkpoints `after` < id < `before`: a recovery restored
        checkpoint `after` and aborted what the failed attempt staged past it, whose checkpoints
        all have ids < `before`; a stage the dying attempt sent late must not linger where
        `commit_checkpoint` would commit it (where stages travel between processes: Ray)."""
        if after + 1 < before:
            self._aborted_ranges.append((after, before))

    def latest_committed(self) -> CommittedOutput | None:
        """The newest checkpoint any sink committed output of (None: nothing committed under a
        checkpoint). An execution must not restore a checkpoint older than it: the replayed
        records would be committed a second time."""
        latest: CommittedOutput | None = None
        for txns in self._committed.values():
            for txn in txns:
                checkpoint = transaction_checkpoint(txn)
                if checkpoint is not None and (latest is None or checkpoint > latest.checkpoint_id):
                    latest = CommittedOutput(checkpoint, txn)
        return latest

    def records(self, sink: str, transaction_id: str) -> list[Record]:
        """The records of a committed or staged transaction.

        Raises:
            UnknownTransactionError: `sink` has no such transaction.
        """
        for txns in (self._committed.get(sink, {}), self._staged.get(sink, {})):
            if transaction_id in txns:
                return _rows(txns[transaction_id])
        raise UnknownTransactionError(f"sink {sink!r} has no transaction {transaction_id!r}")

    def staged_transactions(self, sink: str) -> list[str]:
        """Staged, never committed (invisible) transaction ids of `sink`."""
        return sorted(self._staged.get(sink, {}))

    def output(self, sink: str) -> list[Record]:
        txns = self._committed.get(sink, {})
        for txn, records in txns.items():
            if isinstance(records, pa.RecordBatch):
                txns[txn] = records.to_pylist()  # once: later reads reuse the dicts
        return [r for records in txns.values() for r in records]

    def transactions(self, sink: str) -> list[str]:
        return list(self._committed.get(sink, {}))

    @property
    def sinks(self) -> list[str]:
        return sorted(self._committed)


class GlobalCommitterView:
    """The committer as the sinks of an executor that commits each completed checkpoint itself
    (`CollectCommitter.commit_checkpoint`, Flink's global committer) see it: every call
    forwarded, `commits_checkpoints` true, so a sink's completion notification commits nothing."""

    commits_checkpoints = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
