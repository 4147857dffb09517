"""The files of a durable sink committer, `<dir>/<job>/committed/<run>/`, and which of them no
restore can need.

Theory of operation
-------------------
`runtime/jobmaster/committer/durable.py` keeps the sinks' external system beside the checkpoints,
one folder per run, in three kinds of file, each whole or absent (written to a temporary name,
synced and renamed):

* `staged-<hash>.txn`: one staged transaction — magic, a JSON header (sink, transaction, payload
  length, sha256) and its records as an Arrow IPC stream;
* `commit-<n>.txn`, numbered in commit order: one committed transaction with its records (the
  same format), or a checkpoint's commit naming the staged transactions it commits (magic, header,
  JSON list), or the output a restored run carried over from the run it restored (magic, a header
  listing each transaction's sink, id and length, and their transaction files end to end);
* nothing else: a foreign file in the folder is an error when it is opened.

What a restore needs (`unneeded_files`, for `barrierflow checkpoints gc`): a run's folder only
while a valid checkpoint of that run exists (a restore starts from a checkpoint and carries over
the committer of the run that took it); of such a folder, every commit and every staged
transaction of a checkpoint up to the run's newest valid one (a restore commits those its
checkpoint names and aborts the rest). A staged transaction of a later checkpoint can never be
committed, and a folder of a run without a valid checkpoint can never be restored.

Transaction ids of a staged transaction end in their checkpoint: `<sink>/<subtask>/<id>`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from checkpoint.storage.layout import CheckpointStorage, StorageError, StorageFileError

__all__ = ["COMMITTED_DIR", "CorruptCommitterError", "commit_file_name", "commit_number", "decode_carried",
           "decode_commit", "decode_transaction", "encode_batch", "encode_carried", "encode_commit",
           "is_carried", "is_checkpoint_commit", "publications", "staged_checkpoint", "staged_file_name",
           "unneeded_files"]

#: the committer's folder in a job's checkpoint folder
COMMITTED_DIR = "committed"
_MAGIC = b"barrierflow-transaction 1\n"
_COMMIT_MAGIC = b"barrierflow-commit 1\n"
_CARRIED_MAGIC = b"barrierflow-carried 1\n"


class CorruptCommitterError(StorageFileError):
    """A file of a durable committer is not one it wrote whole (`path`)."""


def staged_checkpoint(transaction_id: str) -> int | None:
    """The checkpoint of a staged transaction `<sink>/<subtask>/<id>` (None: another kind of id)."""
    last = transaction_id.rpartition("/")[2]
    return int(last) if last.isdigit() else None


def staged_file_name(sink: str, transaction_id: str) -> str:
    digest = hashlib.sha256(f"{sink}\0{transaction_id}".encode()).hexdigest()[:32]
    return f"staged-{digest}.txn"


def commit_file_name(number: int) -> str:
    return f"commit-{number:010d}.txn"


def commit_number(name: str) -> int | None:
    """The number of a `commit-<n>.txn` file name (None: not one)."""
    if name.startswith("commit-") and name.endswith(".txn") and name[7:-4].isdigit():
        return int(name[7:-4])
    return None


# --------------------------------------------------------------------------- encoding


def encode_batch(sink: str, transaction_id: str, batch: pa.RecordBatch,
                 publications: list[dict[str, Any]] | None = None) -> bytes:
    """The bytes of one transaction file: magic, a JSON header line, the Arrow IPC stream.
    `publications` (a commit's): the files its records are to be written as (see `publications`)."""
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, batch.schema) as writer:
        writer.write_batch(batch)
    payload = out.getvalue().to_pybytes()
    header = {"sink": sink, "transaction": transaction_id, "bytes": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest()}
    if publications:
        header["publish"] = publications
    return _MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def encode_commit(checkpoint_id: int, transactions: list[tuple[str, str]],
                  publications: list[dict[str, Any]] | None = None) -> bytes:
    """The bytes of a checkpoint's commit file: magic, a JSON header line, the JSON list of the
    (sink, transaction) it commits (their records are in their staged files); `publications`: as
    for `encode_batch`."""
    payload = json.dumps([list(t) for t in transactions]).encode()
    header: dict[str, Any] = {"checkpoint": checkpoint_id, "bytes": len(payload),
                              "sha256": hashlib.sha256(payload).hexdigest()}
    if publications:
        header["publish"] = publications
    return _COMMIT_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def encode_carried(transactions: list[tuple[str, str, pa.RecordBatch]]) -> bytes:
    """The bytes of a carried-over commit: every (sink, transaction, records) committed, in commit
    order, as their transaction files end to end (each checks itself)."""
    files = [encode_batch(sink, txn, batch) for sink, txn, batch in transactions]
    header = {"transactions": [[sink, txn, len(data)] for (sink, txn, _), data in zip(transactions, files)]}
    return _CARRIED_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + b"".join(files)


def is_checkpoint_commit(data: bytes) -> bool:
    return data.startswith(_COMMIT_MAGIC)


def is_carried(data: bytes) -> bool:
    return data.startswith(_CARRIED_MAGIC)


# --------------------------------------------------------------------------- decoding


def _corrupt(where: str, why: str) -> CorruptCommitterError:
    return CorruptCommitterError(f"committer file {where} is corrupt: {why}", where)


def _header_and_payload(data: bytes, magic: bytes, where: str, fields: Mapping[str, type]) -> tuple[dict[str, Any], bytes]:
    """The JSON header line after `magic` (holding `fields`, of those types) and the bytes after it.

    Raises:
        CorruptCommitterError: the header line is missing, not JSON, or lacks a field.
    """
    line, newline, payload = data[len(magic):].partition(b"\n")
    try:
        header = json.loads(line) if newline else None
    except (ValueError, RecursionError):
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
    try:
        named = json.loads(payload)
    except (ValueError, RecursionError):
        named = None
    if not isinstance(named, list) or not all(
            isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t) for t in named):
        raise _corrupt(where, "its transaction list is not [[sink, transaction], ...]")
    return [(sink, txn) for sink, txn in named]


def publications(data: bytes, where: str) -> list[dict[str, Any]]:
    """The publications a commit file (of one transaction, or a checkpoint's) records: per sink,
    `{"sink", "file", "publisher"}` — the file its committed records are written as, and how
    (`runtime.jobmaster.committer.file_publisher.FilePublisher.to_json`).

    Raises:
        CorruptCommitterError: naming `where` and what is wrong.
    """
    magic = _COMMIT_MAGIC if is_checkpoint_commit(data) else _MAGIC
    header, _ = _header_and_payload(data, magic, where, {})
    found = header.get("publish", [])
    if not isinstance(found, list) or not all(
            isinstance(p, dict) and isinstance(p.get("sink"), str) and isinstance(p.get("file"), str)
            and isinstance(p.get("publisher"), dict) for p in found):
        raise _corrupt(where, "its publications are not [{sink, file, publisher}, ...]")
    return found


def transaction_header(data: bytes, where: str) -> tuple[str, str]:
    """(sink, transaction id) of a transaction file, from its header alone (records unchecked).

    Raises:
        CorruptCommitterError: naming `where` and what is wrong.
    """
    if not data.startswith(_MAGIC):
        raise _corrupt(where, "it does not start with the committer's file header")
    header, _ = _header_and_payload(data, _MAGIC, where, {"sink": str, "transaction": str, "bytes": int, "sha256": str})
    return header["sink"], header["transaction"]


def decode_transaction(data: bytes, where: str) -> tuple[str, str, pa.RecordBatch]:
    """(sink, transaction id, records) of a transaction file.

    Raises:
        CorruptCommitterError: naming `where` and what is wrong.
    """
    transaction_header(data, where)
    header, payload = _header_and_payload(data, _MAGIC, where, {"bytes": int, "sha256": str})
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


def decode_carried(data: bytes, where: str) -> list[tuple[str, str, pa.RecordBatch]]:
    """The (sink, transaction, records) a carried-over commit holds, in commit order.

    Raises:
        CorruptCommitterError: naming `where` and what is wrong.
    """
    header, payload = _header_and_payload(data, _CARRIED_MAGIC, where, {"transactions": list})
    entries = header["transactions"]
    if not all(isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and isinstance(e[1], str)
               and isinstance(e[2], int) and e[2] > 0 for e in entries):
        raise _corrupt(where, "its header does not list [sink, transaction, length] per transaction")
    if sum(e[2] for e in entries) != len(payload):
        raise _corrupt(where, f"it holds {len(payload)} bytes of transactions, its header says "
                       f"{sum(e[2] for e in entries)} (truncated?)")
    out, offset = [], 0
    for sink, txn, length in entries:
        got = decode_transaction(payload[offset:offset + length], where)
        if got[:2] != (sink, txn):
            raise _corrupt(where, f"it holds transaction {got[1]!r} of sink {got[0]!r} where its header lists "
                           f"{txn!r} of {sink!r}")
        out.append(got)
        offset += length
    return out


# --------------------------------------------------------------------------- garbage


def unneeded_files(storage: CheckpointStorage, job_id: str, newest_valid: Mapping[str, int]) -> list[str]:
    """The job's committer files no restore can need (see the module docstring), sorted.

    Args:
        newest_valid: run id -> its newest valid checkpoint in the job's directory.

    Files that are not the committer's own, and staged files whose header cannot be read, stay
    (gc removes only what it understands).

    Raises:
        StorageError: the folder could not be listed.
    """
    prefix = f"{storage.job_dir(job_id)}/{COMMITTED_DIR}/"
    out = []
    for path in storage.blob_store.list(prefix):
        run, _, name = path[len(prefix):].partition("/")
        if not name or "/" in name or not (name.startswith("staged-") or commit_number(name) is not None) \
                or not name.endswith(".txn"):
            continue
        if run not in newest_valid:
            out.append(path)
        elif name.startswith("staged-"):
            checkpoint = _staged_file_checkpoint(storage, path)
            if checkpoint is not None and checkpoint > newest_valid[run]:
                out.append(path)
    return sorted(out)


def _staged_file_checkpoint(storage: CheckpointStorage, path: str) -> int | None:
    try:
        _, txn = transaction_header(storage.blob_store.get(path), storage.describe(path))
    except (StorageError, CorruptCommitterError):
        return None
    return staged_checkpoint(txn)
