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
an empty external system, as before. A run that restores a checkpoint first copies the committer
of the run that took it (`<job>/committed/<that run>/`, in the restored storage) into its own:
the transactions that run staged can be committed, and `result.output` shows the whole output.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from checkpoint.io.storage import MemoryBlobStore, StorageError
from checkpoint.io.store import run_of
from runtime.core.messages import Buffer
from runtime.jobmaster.result import CollectCommitter, Records

if TYPE_CHECKING:
    from checkpoint.completed import CompletedCheckpoint
    from checkpoint.io.storage import BlobStore, CheckpointStorage

__all__ = ["COMMITTED_DIR", "CorruptCommitterError", "DurableCollectCommitter", "committer_for", "decode_commit",
           "decode_transaction", "encode_commit", "encode_transaction"]

#: the committer's folder in a job's checkpoint folder
COMMITTED_DIR = "committed"
_MAGIC = b"barrierflow-transaction 1\n"
_COMMIT_MAGIC = b"barrierflow-commit 1\n"


class CorruptCommitterError(StorageError):
    """A file of a durable committer is not one it wrote whole (names the file)."""


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
            if not known and (records is not None or staged is not None):
                path = f"{self.directory}/commit-{self._next_commit:010d}.txn"
                self._write(path, sink, transaction_id, records if records is not None else staged)
                self._next_commit += 1
            super().commit(sink, transaction_id, records)
            if staged is not None and not known:
                self._delete(self._staged_path(sink, transaction_id))

    def commit_checkpoint(self, checkpoint_id: int) -> list[tuple[str, str]]:
        with self._lock:
            due = self._due(checkpoint_id)
            if due:  # one file naming them; their staged files stay, holding their records
                path = f"{self.directory}/commit-{self._next_commit:010d}.txn"
                self._put(path, encode_commit(checkpoint_id, due))
                self._next_commit += 1
            return super().commit_checkpoint(checkpoint_id)

    def abort_lingering(self, after: int, before: int) -> list[str]:
        with self._lock:
            by_id = {txn: sink for sink, staged in self._staged.items() for txn in staged}
            aborted = super().abort_lingering(after, before)
            for txn in aborted:
                self._delete(self._staged_path(by_id[txn], txn))
            return aborted

    def _staged_path(self, sink: str, transaction_id: str) -> str:
        digest = hashlib.sha256(f"{sink}\0{transaction_id}".encode()).hexdigest()[:32]
        return f"{self.directory}/staged-{digest}.txn"

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
        for path in self.blob_store.list(self.directory + "/"):
            name = path.rpartition("/")[2]
            if name.startswith("commit-") and name.endswith(".txn") and name[7:-4].isdigit():
                data = self.blob_store.get(path)
                if data.startswith(_COMMIT_MAGIC):
                    named = [(sink, txn, None) for sink, txn in decode_commit(data, self._where(path))]
                    commits.append((int(name[7:-4]), path, named))
                else:
                    sink, txn, batch = decode_transaction(data, self._where(path))
                    commits.append((int(name[7:-4]), path, [(sink, txn, batch)]))
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
            self._next_commit = number + 1

    def _where(self, path: str) -> str:
        where = getattr(self.blob_store, "where", None)
        return where(path) if where is not None else path


def encode_transaction(sink: str, transaction_id: str, records: Records) -> bytes:
    """The bytes of one committer file: magic, a JSON header line, the Arrow IPC stream."""
    batch = records if isinstance(records, pa.RecordBatch) else Buffer.from_records(records, checked=True).batch
    sink_out = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink_out, batch.schema) as writer:
        writer.write_batch(batch)
    payload = sink_out.getvalue().to_pybytes()
    header = {"sink": sink, "transaction": transaction_id, "bytes": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest()}
    return _MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def encode_commit(checkpoint_id: int, transactions: list[tuple[str, str]]) -> bytes:
    """The bytes of a checkpoint's commit file: magic, a JSON header line, the JSON list of the
    (sink, transaction) it commits (their records are in their staged files)."""
    payload = json.dumps([list(t) for t in transactions]).encode()
    header = {"checkpoint": checkpoint_id, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    return _COMMIT_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def _corrupt(where: str, why: str) -> CorruptCommitterError:
    return CorruptCommitterError(f"committer file {where} is corrupt: {why}", where)


def _header_and_payload(data: bytes, magic: bytes, where: str, fields: dict[str, type]) -> tuple[dict[str, Any], bytes]:
    """The JSON header line after `magic` (holding `fields`, of those types) and the bytes after it.

    Raises:
        CorruptCommitterError: the header line is missing, not JSON, or lacks a field.
    """
    line, newline, payload = data[len(magic):].partition(b"\n")
    try:
        header = json.loads(line) if newline else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or not all(isinstance(header.get(k), t) for k, t in fields.items()):
        raise _corrupt(where, "its header line is not the committer's JSON header")
    return header, payload


def decode_commit(data: bytes, where: str) -> list[tuple[str, str]]:
    """The (sink, transaction) pairs a checkpoint's commit file names.

    Raises:
        CorruptCommitterError: naming `where` and what is wrong.
    """
    header, payload = _header_and_payload(data, _COMMIT_MAGIC, where, {"bytes": int, "sha256": str})
    if len(payload) != header["bytes"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise _corrupt(where, "its transaction list does not match its length and sha256 checksum (truncated or "
                       "damaged?)")
    named = json.loads(payload)
    if not isinstance(named, list) or not all(
            isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t) for t in named):
        raise _corrupt(where, "its transaction list is not [[sink, transaction], ...]")
    return [(sink, txn) for sink, txn in named]


def decode_transaction(data: bytes, where: str) -> tuple[str, str, pa.RecordBatch]:
    """(sink, transaction id, records) of a committer file.

    Raises:
        CorruptCommitterError: naming `where` and what is wrong.
    """
    if not data.startswith(_MAGIC):
        raise _corrupt(where, "it does not start with the committer's file header")
    header, payload = _header_and_payload(data, _MAGIC, where,
                                          {"sink": str, "transaction": str, "bytes": int, "sha256": str})
    if len(payload) != header["bytes"]:
        raise _corrupt(where, f"it holds {len(payload)} bytes of records, its header says {header['bytes']} (truncated?)")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise _corrupt(where, "its records do not match their sha256 checksum")
    try:
        table = pa.ipc.open_stream(payload).read_all()
    except pa.ArrowException as exc:
        raise _corrupt(where, f"its records are not an Arrow stream ({exc})") from exc
    batches = table.to_batches()
    batch = batches[0] if len(batches) == 1 else pa.RecordBatch.from_pylist(table.to_pylist(), schema=table.schema)
    return header["sink"], header["transaction"], batch


def committer_for(storage: CheckpointStorage, job_id: str, run_id: str,
                  restore_from: tuple[CompletedCheckpoint, CheckpointStorage] | None = None) -> CollectCommitter:
    """The sinks' external system for a run with no committer given: durable beside the
    checkpoints when the job has a checkpoint directory (seeded, when restoring, with the
    committer of the run that took the checkpoint), in memory otherwise.

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
    if isinstance(storage.blob_store, MemoryBlobStore):
        if source is None:
            return CollectCommitter()
        return DurableCollectCommitter(*source)  # no directory of its own: the restored one's
    directory = f"{storage.job_dir(job_id)}/{COMMITTED_DIR}/{run_id}"
    if source is not None and (source[0], source[1]) != (storage.blob_store, directory):
        _copy(source[0], source[1], storage.blob_store, directory)
    return DurableCollectCommitter(storage.blob_store, directory)


def _copy(from_store: BlobStore, from_dir: str, to_store: BlobStore, to_dir: str) -> None:
    put = getattr(to_store, "put_durably", to_store.put)
    for path in from_store.list(from_dir + "/"):
        put(f"{to_dir}/{path.rpartition('/')[2]}", from_store.get(path))

