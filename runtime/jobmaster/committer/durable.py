"""A `CollectCommitter` kept in files beside the checkpoints, so a restore in a new process finds it.

Theory of operation
-------------------
`CollectCommitter` (the "external system" of every `CollectSink`) lives in the driver's memory: a
checkpoint directory restored in a new Python process would find its sinks' staged transactions
gone (`UnknownTransactionError`). When a job has a checkpoint directory, `committer_for` gives it
a `DurableCollectCommitter` instead, at `<storage>/<job>/committed/<run>/`:

* one file per staged transaction (`staged-<hash>.txn`), written before the stage counts (a write
  that fails stages nothing), and one per commit, numbered in commit
  order (`commit-<n>.txn`), each its header (sink, transaction, payload length and sha256) and
  the records as an Arrow IPC stream; written with `put_durably` (temp file, fsync, rename, fsync
  of the directory), so a file is whole or absent;
* a commit writes its file first and then removes the staged file: a crash in between leaves
  both, and loading keeps the commit (commits are idempotent per transaction id); an abort
  (`abort_lingering`) removes staged files;
* a checkpoint's commit (`commit_checkpoint`, the global committer's one call per checkpoint)
  writes one small file instead, `commit-<n>.txn` naming its transactions (header and a JSON
  list, checksummed), and keeps their staged files as their records: one durable write per
  checkpoint, whatever the number of sink subtasks, and nothing deleted;
* opening reads every file and checks it; a file that is not a whole committer file (foreign,
  truncated, bit-flipped) raises `CorruptCommitterError` naming it — never silently fewer records.

Runs: every run (`execute`) gets its own directory, so a job run again from scratch starts with
an empty external system. A run that restores checkpoint c carries over into its own directory
what it needs of the committer of the run that took c (`<job>/committed/<that run>/`, in the
restored storage): every committed transaction, as one file (`result.output` shows the whole
output; a commit already made stays a no-op), and the transactions staged for checkpoints up to c
(the restored sinks commit those c names); a transaction staged for a later checkpoint can never
commit and is left behind. So a chain of restores does not copy every earlier run's files again,
and `barrierflow checkpoints gc` removes a run's folder once no valid checkpoint of that run is
left to restore (`checkpoint.storage.committer_files`, which also holds the file formats).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from checkpoint.storage.committer_files import (
    COMMITTED_DIR,
    CorruptCommitterError,
    commit_file_name,
    commit_number,
    decode_carried,
    decode_commit,
    decode_transaction,
    encode_batch,
    encode_carried,
    encode_commit,
    is_carried,
    is_checkpoint_commit,
    publications,
    staged_checkpoint,
    staged_file_name,
)
from checkpoint.storage.errors import CheckpointToolError
from checkpoint.storage.layout import MemoryBlobStore
from checkpoint.storage.store import run_of
from runtime.jobmaster.committer.collect import CollectCommitter, Records
from runtime.jobmaster.committer.file_publisher import FilePublisher, register_publishers
from runtime.records.messages import Buffer

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.storage.errors import NoCompletedCheckpointError
    from checkpoint.storage.layout import BlobStore, CheckpointStorage
    from runtime.jobmaster.master import JobMaster

__all__ = ["COMMITTED_DIR", "CorruptCommitterError", "DurableCollectCommitter", "carry_over", "committed_files",
           "committer_for", "decode_commit", "decode_transaction", "encode_commit", "encode_transaction", "open_committer",
           "start_over"]

log = logging.getLogger(__name__)


class DurableCollectCommitter(CollectCommitter):
    """A `CollectCommitter` that writes through to `directory` of `blob_store` and reads it back
    when opened.

    Raises:
        CorruptCommitterError: a file in `directory` is damaged or foreign.
        StorageError: the storage cannot be read.
    """

    def __init__(self, blob_store: BlobStore, directory: str) -> None:
        super().__init__()
        self.blob_store = blob_store
        self.directory = directory.rstrip("/")
        self._lock = threading.Lock()
        self._next_commit = 1
        self._load()

    def __getstate__(self) -> dict[str, Any]:  # Ray ships it to the committer actor and back
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ writing through

    def stage(self, sink: str, transaction_id: str, records: Records) -> None:
        """`CollectCommitter.stage`, written through first: a stage whose file cannot be written
        (a full disk, a blocked path) raises `StorageError` and is not staged, so no commit can
        ever name a transaction whose records are not on disk."""
        with self._lock:
            if self._keeps_stage(sink, transaction_id):
                self._write(self._staged_path(sink, transaction_id), sink, transaction_id, records)
            super().stage(sink, transaction_id, records)  # (or the conflict, or a late stage dropped)

    def commit(self, sink: str, transaction_id: str, records: Records | None = None) -> None:
        with self._lock:
            staged = self._staged.get(sink, {}).get(transaction_id)
            known = transaction_id in self._committed.get(sink, {})
            name = None
            if not known and (records is not None or staged is not None):
                name = self._publication(sink, [transaction_id])  # decided with the commit, written after it
                path = f"{self.directory}/{commit_file_name(self._next_commit)}"
                self._put(path, encode_batch(sink, transaction_id, _as_batch(records if records is not None else staged),
                                             self._publishing({sink: name})))
                self._next_commit += 1
            if self._record_commit(sink, transaction_id, records):
                self._decide_publication(sink, name, [self._committed[sink][transaction_id]])
            if staged is not None and not known:
                self._delete(self._staged_path(sink, transaction_id))
            self.publish_pending()

    def commit_checkpoint(self, checkpoint_id: int) -> list[tuple[str, str]]:
        with self._lock:
            due = self._due(checkpoint_id)
            names = self._publications(due)
            if due:  # one file naming them; their staged files stay, holding their records
                path = f"{self.directory}/{commit_file_name(self._next_commit)}"
                self._put(path, encode_commit(checkpoint_id, due, self._publishing(names)))
                self._next_commit += 1
            self._record_checkpoint(due, names)
            self.publish_pending()
            return due

    def _publishing(self, names: dict[str, str | None]) -> list[dict[str, Any]]:
        """What a commit file records of its publications: per sink, the file and its publisher."""
        return [{"sink": sink, "file": name, "publisher": self._publishers[sink].to_json()}
                for sink, name in names.items() if name is not None]

    def abort_lingering(self, after: int, before: int) -> list[str]:
        with self._lock:
            by_id = {txn: sink for sink, staged in self._staged.items() for txn in staged}
            aborted = super().abort_lingering(after, before)
            for txn in aborted:
                self._delete(self._staged_path(by_id[txn], txn))
            return aborted

    def _staged_path(self, sink: str, transaction_id: str) -> str:
        return f"{self.directory}/{staged_file_name(sink, transaction_id)}"

    def _write(self, path: str, sink: str, transaction_id: str, records: Records) -> None:
        self._put(path, encode_transaction(sink, transaction_id, records))

    def _put(self, path: str, data: bytes) -> None:
        put = getattr(self.blob_store, "put_durably", self.blob_store.put)
        put(path, data)

    def _delete(self, path: str) -> None:
        self.blob_store.delete(path)

    # ------------------------------------------------------------------ reading back

    def _load(self) -> None:
        #: (number, file, [(sink, txn, records or None: committed by name, records staged)])
        commits: list[tuple[int, str, list[tuple[str, str, pa.RecordBatch | None]]]] = []
        #: commit number -> the publications its file recorded
        published: dict[int, list[dict[str, Any]]] = {}
        for path in self.blob_store.list(self.directory + "/"):
            name = path.rpartition("/")[2]
            number = commit_number(name)
            if number is not None:
                data = self.blob_store.get(path)
                if is_checkpoint_commit(data):
                    named = [(sink, txn, None) for sink, txn in decode_commit(data, self._where(path))]
                    commits.append((number, path, named))
                    published[number] = publications(data, self._where(path))
                elif is_carried(data):
                    commits.append((number, path, list(decode_carried(data, self._where(path)))))
                else:
                    sink, txn, batch = decode_transaction(data, self._where(path))
                    published[number] = publications(data, self._where(path))
                    commits.append((number, path, [(sink, txn, batch)]))
            elif name.startswith("staged-") and name.endswith(".txn"):
                sink, txn, batch = decode_transaction(self.blob_store.get(path), self._where(path))
                if path != self._staged_path(sink, txn):
                    raise CorruptCommitterError(
                        f"committer file {self._where(path)} holds transaction {txn!r} of sink {sink!r}, "
                        "which belongs in another file", self._where(path))
                self._staged.setdefault(sink, {})[txn] = batch
            else:
                raise CorruptCommitterError(
                    f"committer folder {self._where(self.directory)} holds {self._where(path)}, which is not a "
                    "committer file (commit-<n>.txn or staged-<hash>.txn): remove it", self._where(path))
        for number, path, transactions in sorted(commits, key=lambda c: c[0]):
            first: dict[str, list[Records]] = {}  # what this commit committed first, per sink
            for sink, txn, batch in transactions:
                staged = self._staged.get(sink, {}).pop(txn, None)  # committed after it was staged
                if txn in self._committed.setdefault(sink, {}):
                    continue
                if batch is None and staged is None:
                    raise CorruptCommitterError(
                        f"committer file {self._where(path)} commits transaction {txn!r} of sink {sink!r}, whose "
                        f"staged file ({self._where(self._staged_path(sink, txn))}) holding its records is missing",
                        self._where(path))
                self._committed[sink][txn] = batch if batch is not None else staged
                first.setdefault(sink, []).append(self._committed[sink][txn])
            for publication in published.get(number, ()):  # written again unless it was (no-op)
                try:
                    publisher = FilePublisher.from_json(publication["publisher"])
                except ValueError as exc:
                    raise CorruptCommitterError(f"committer file {self._where(path)} records an unreadable "
                                                f"publication: {exc}", self._where(path)) from None
                self._unpublished.append((publisher, publication["file"], first.get(publication["sink"], [])))
            self._next_commit = number + 1
        self.publish_pending()

    def _where(self, path: str) -> str:
        where = getattr(self.blob_store, "where", None)
        return where(path) if where is not None else path


def encode_transaction(sink: str, transaction_id: str, records: Records) -> bytes:
    """The bytes of one committer file (`checkpoint.storage.committer_files.encode_batch`) of `records`."""
    return encode_batch(sink, transaction_id, _as_batch(records))


def _as_batch(records: Records) -> pa.RecordBatch:
    return records if isinstance(records, pa.RecordBatch) else Buffer.from_records(records, checked=True).batch


def committer_for(storage: CheckpointStorage | None, job_id: str, run_id: str,
                  restore_from: tuple[CompletedCheckpoint, CheckpointStorage] | None = None) -> CollectCommitter:
    """The sinks' external system for a run with no committer given: durable beside the
    checkpoints when the job has a checkpoint directory (seeded, when restoring, with the
    committer of the run that took the checkpoint: beside the restored checkpoint, or — for one
    rebuilt in memory, a landed checkpoint — in this job's checkpoint directory), in memory
    otherwise (`storage` None or in memory).

    Raises:
        CorruptCommitterError: a committer file is damaged (named).
        StorageError: the storage cannot be read or written.
    """
    source = None
    if restore_from is not None:
        completed, restored = restore_from
        run = run_of(completed)
        if run is not None and not isinstance(restored.blob_store, MemoryBlobStore):
            source = (restored.blob_store, f"{restored.job_dir(completed.job_id)}/{COMMITTED_DIR}/{run}")
        elif run is not None and storage is not None and not isinstance(storage.blob_store, MemoryBlobStore):
            # rebuilt in memory (a landed checkpoint): its run's committer, if it kept it where this job does
            kept = f"{storage.job_dir(completed.job_id)}/{COMMITTED_DIR}/{run}"
            if storage.blob_store.list(kept + "/"):
                source = (storage.blob_store, kept)
    if storage is None or isinstance(storage.blob_store, MemoryBlobStore):
        if source is None:
            return CollectCommitter()
        return DurableCollectCommitter(*source)  # no directory of its own: the restored one's
    directory = f"{storage.job_dir(job_id)}/{COMMITTED_DIR}/{run_id}"
    if source is not None and (source[0], source[1]) != (storage.blob_store, directory):
        assert restore_from is not None
        carry_over(source[0], source[1], restore_from[0].checkpoint_id, storage.blob_store, directory)
    return DurableCollectCommitter(storage.blob_store, directory)


def committed_files(storage: CheckpointStorage, job_id: str) -> list[str]:
    """Every commit file a durable committer of job `job_id` wrote in `storage` (of any run): the
    output its sinks made visible."""
    prefix = f"{storage.job_dir(job_id)}/{COMMITTED_DIR}/"
    return sorted(p for p in storage.blob_store.list(prefix) if p.rpartition("/")[2].startswith("commit-"))


def start_over(no_checkpoint: NoCompletedCheckpointError) -> str:
    """`restore_from(dir)` of a job none of whose checkpoints completed: the new execution starts
    from the beginning, as a failover of the failed one would have — exactly-once, since without a
    completed checkpoint no sink output was committed. Returns why, for the result (and logs it).

    Raises:
        CheckpointToolError: a committer of the job holds committed output, so checkpoints did
            complete once (their metadata is gone): starting over would commit that output again.
    """
    committed = committed_files(no_checkpoint.storage, no_checkpoint.job_id)
    if committed:
        more = f" and {len(committed) - 1} more" if len(committed) > 1 else ""
        raise CheckpointToolError(f"{no_checkpoint}, yet the job's committer holds committed output ({committed[0]}"
                                  f"{more}): its completed checkpoints are gone, and starting over would commit "
                                  "that output again") from no_checkpoint
    note = f"{no_checkpoint}; nothing was committed, so it starts from the beginning, as a failover would have"
    log.warning("restore: %s", note)
    return note


def open_committer(master: JobMaster, storage: CheckpointStorage | None, job_id: str,
                   given: CollectCommitter | None = None) -> CollectCommitter:
    """The sinks' external system for `master`'s run, the same on every executor: `given` (an
    earlier execution's `result.committer`), else `committer_for` the job's checkpoint `storage`
    (None: checkpoints in memory, out of the driver's reach), seeded from the checkpoint the run
    restores (`master.restore_from`); the sinks' publishers (`SparkSink`'s files) registered.

    Raises:
        CorruptCommitterError: a committer file is damaged (named).
        StorageError: the storage cannot be read or written.
    """
    committer = given if given is not None else committer_for(storage, job_id, master.run_id, master.restore_from)
    return register_publishers(committer, master.graph)  # file sinks' output, written as it commits


def carry_over(from_store: BlobStore, from_dir: str, checkpoint_id: int, to_store: BlobStore, to_dir: str) -> None:
    """Start the committer at `to_dir` with what a restore of checkpoint `checkpoint_id` needs of
    the one at `from_dir`: every committed transaction (one carried-over commit file, in commit
    order) and the transactions staged for checkpoints up to `checkpoint_id` (their files).

    Raises:
        CorruptCommitterError: a file of the source is damaged (named).
        StorageError: a storage cannot be read or written.
    """
    source = DurableCollectCommitter(from_store, from_dir)
    target = DurableCollectCommitter(to_store, to_dir)
    committed = [(sink, txn, _as_batch(records)) for sink, txns in source._committed.items()
                 for txn, records in txns.items()]
    if committed:
        target._put(f"{to_dir}/{commit_file_name(target._next_commit)}", encode_carried(committed))
    for sink, staged in source._staged.items():
        for txn, records in staged.items():
            checkpoint = staged_checkpoint(txn)
            if checkpoint is None or checkpoint <= checkpoint_id:
                target._write(target._staged_path(sink, txn), sink, txn, records)
