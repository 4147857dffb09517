"""Checkpoint storage: the layout and checksums of checkpoint files (`docs/semantics.md`,
"Storage"), over the `BlobStore` port; pure (`checkpoint.io` implements the port on filesystems).

Theory of operation
-------------------
Two layers, so the protocol code never sees a filesystem:

* a `BlobStore` (`blob_stores.py`; `checkpoint/io/fs_blob_store.py`; the errors in `errors.py`) is a
  flat key → bytes store with five operations (`put`, `get`, `delete`, `exists`, `list`). `MemoryBlobStore` keeps a dict (the default, and the simulator's);
  `FsBlobStore` maps keys onto any `pyarrow.fs` filesystem (a local directory, S3, GCS, HDFS...)
  and writes each file under a temporary name before moving it into place, so a reader never
  sees half a file. (A store that fails writes on demand, for tests, is in `tests/checkpoint/ckpt_testkit.py`.)
* every call to a remote filesystem is bounded by a timeout (`storage_timeout`, default
  `DEFAULT_STORAGE_TIMEOUT`): pyarrow's own retries can wait for minutes (GCS retries for 15
  minutes by default; an S3 endpoint that accepts connections but never answers is waited for
  indefinitely on Linux), so the call runs on a daemon thread and the caller gets a
  `StorageTimeoutError` naming the URI when the time is up (the thread is abandoned: a blocked
  pyarrow call cannot be interrupted). Local directories are called directly: no network, and the
  simulator stays single-threaded.
* `CheckpointStorage` knows the layout and the checksums::

      <root>/<job_id>/chk-<id>/_metadata           JSON: {"format", "version", "checksum", "body"}
      <root>/<job_id>/chk-<id>/taskowned/<name>    files written for one task in one checkpoint
      <root>/<job_id>/shared/<name>                files referenced across checkpoints
      <root>/<job_id>/_job                         JSON: the job ran here (written by its first run)

  Every file is checksummed (SHA-256, hex) when written: the checksum of a task file travels in
  its `StateHandle`, the checksum of the metadata is embedded next to the body it covers (over the
  body's canonical JSON encoding). Reading verifies; a mismatch, a missing file or unparsable
  metadata raises `CorruptCheckpointError` naming the file, which is what lets recovery skip a
  corrupt checkpoint for the previous one.

Nothing is pickled: metadata is JSON and task files are whatever bytes (Arrow IPC) the state
backends hand over.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable

from checkpoint.completed import CheckpointMetadataError, CompletedCheckpoint, canonical_json
from checkpoint.storage.blob_stores import (
    BlobStore,
    ForwardingBlobStore,
    MemoryBlobStore,
    check_key,
    list_links,
    put_if_absent,
)
from checkpoint.storage.errors import (
    BlobNotFoundError,
    CorruptCheckpointError,
    MissingMetadataError,
    StorageError,
    StorageFileError,
    StorageTimeoutError,
)
from vocabulary.handles import StateHandle

#: the blob stores and errors live in their own modules; this one is where callers import them
__all__ = ["JOB_FILE", "METADATA_FILE", "METADATA_FORMAT", "METADATA_VERSION", "SHARED_DIR", "TASK_OWNED_DIR",
           "BlobNotFoundError", "BlobStore", "CheckpointStorage", "CorruptCheckpointError", "ForwardingBlobStore",
           "MemoryBlobStore", "MissingMetadataError", "StorageError", "StorageFileError",
           "StorageTimeoutError", "checksum_matches", "compute_checksum", "is_checksum", "list_links",
           "put_if_absent",]

METADATA_FILE = "_metadata"
METADATA_FORMAT = "barrierflow-checkpoint-metadata"
METADATA_VERSION = 1
TASK_OWNED_DIR = "taskowned"
SHARED_DIR = "shared"
#: the job's record in its directory: a run writes it when it starts (blob stores have no empty
#: directories), so a job that failed before its first checkpoint is still known to have run there
JOB_FILE = "_job"
JOB_FORMAT = "barrierflow-job"

_CHK_DIR = re.compile(r"^chk-(\d+)$")
_METADATA_PATH = re.compile(r"(?:^|/)chk-(\d+)/" + METADATA_FILE + r"$")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


# -- checksums ---------------------------------------------------------------------------------


def compute_checksum(data: bytes) -> str:
    """SHA-256 of `data`, lower-case hex (the checksum every handle written here carries)."""
    return hashlib.sha256(data).hexdigest()


def is_checksum(checksum: object) -> bool:
    """Whether `checksum` has the one form accepted: a SHA-256 digest, 64 lower-case hex digits
    (what `compute_checksum` writes; weak ones such as CRC-32 are refused)."""
    return isinstance(checksum, str) and _SHA256_HEX.fullmatch(checksum) is not None


def checksum_matches(data: bytes, checksum: str) -> bool:
    """Verify `data` against `checksum` (only SHA-256 as written by `compute_checksum`)."""
    return is_checksum(checksum) and hmac.compare_digest(hashlib.sha256(data).hexdigest(), checksum)


# -- checkpoint layout -------------------------------------------------------------------------


def _check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not job_id or "/" in job_id or job_id in (".", ".."):
        raise ValueError(f"invalid job_id {job_id!r}: must be a non-empty name without '/'")
    return job_id


def _valid_job_id(job_id: str) -> bool:
    try:
        _check_job_id(job_id)
    except ValueError:
        return False
    return True


def _handle_problem(handle: StateHandle, root: str, job_prefix: str | None = None) -> str | None:
    """What is wrong with a handle read from metadata (None: nothing): a path that is not a plain
    relative one inside the storage root (or the job's directory), a checksum other than the
    SHA-256 written here, or a nonsensical size, offset or length."""
    path = handle.path
    try:
        check_key(path)
    except ValueError as exc:
        return f"{path!r} is refused: {exc}"
    if job_prefix is not None and not path.startswith(job_prefix):
        return f"{path!r} is refused: it is outside the job's directory {job_prefix.rstrip('/')}"
    if root and not path.startswith(root + "/"):
        return f"{path!r} is refused: it is outside the storage root {root}"
    if not is_checksum(handle.checksum):
        return (f"{path!r} declares checksum {str(handle.checksum)[:80]!r}: only a SHA-256 digest "
                "(64 lower-case hex digits) is accepted")
    for name in ("size", "offset", "length"):
        value = getattr(handle, name)
        if value is None and name == "length":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{path!r} has an invalid {name} {value!r}"
    return None


def _check_checkpoint_id(checkpoint_id: int) -> int:
    if not isinstance(checkpoint_id, int) or isinstance(checkpoint_id, bool) or checkpoint_id < 1:
        raise ValueError(f"invalid checkpoint_id {checkpoint_id!r}: must be an integer >= 1")
    return checkpoint_id


class CheckpointStorage:
    """Checkpoint files on a `BlobStore`, in the `chk-<id>` layout, checksummed.

    Args:
        blob_store: where the bytes go.
        root: a path prefix inside the blob store ("" = its top).
    """

    def __init__(self, blob_store: BlobStore, root: str = "") -> None:
        self.blob_store = blob_store
        self.root = root.strip("/")
        if self.root:
            check_key(self.root)

    # -- paths --

    def describe(self, path: str) -> str:
        """`path` as a user finds it (full path or URI), for error messages."""
        where = getattr(self.blob_store, "where", None)
        return where(path) if where is not None else path

    def _join(self, *parts: str) -> str:
        return "/".join(p for p in (self.root, *parts) if p)

    def job_dir(self, job_id: str) -> str:
        return self._join(_check_job_id(job_id))

    def checkpoint_dir(self, job_id: str, checkpoint_id: int) -> str:
        return self._join(_check_job_id(job_id), f"chk-{_check_checkpoint_id(checkpoint_id)}")

    def metadata_path(self, job_id: str, checkpoint_id: int) -> str:
        return f"{self.checkpoint_dir(job_id, checkpoint_id)}/{METADATA_FILE}"

    def task_owned_dir(self, job_id: str, checkpoint_id: int) -> str:
        return f"{self.checkpoint_dir(job_id, checkpoint_id)}/{TASK_OWNED_DIR}"

    def shared_dir(self, job_id: str) -> str:
        return self._join(_check_job_id(job_id), SHARED_DIR)

    def job_file(self, job_id: str) -> str:
        return self._join(_check_job_id(job_id), JOB_FILE)

    # -- the job's record --

    def record_job(self, job_id: str, run_id: str) -> None:
        """Write the job's `_job` file unless it is there (Flink creates a job's checkpoint
        directory when the job starts): from then on the directory says the job ran here, even if
        no checkpoint of it was ever begun. `run_id`: the run that writes it, kept for people.

        Raises:
            StorageError: the write failed.
        """
        document = {"format": JOB_FORMAT, "version": 1, "job": job_id, "first_run": run_id}
        put_if_absent(self.blob_store, self.job_file(job_id), canonical_json(document))

    # -- state files --

    def write_file(self, path: str, data: bytes) -> StateHandle:
        """Write `data` at `path` (relative to the blob store) and return its checksummed handle.

        Raises:
            StorageError: the write failed.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"state file {path} must be written as bytes, got {type(data).__name__}")
        data = bytes(data)
        self.blob_store.put(check_key(path), data)
        return StateHandle(path=path, size=len(data), checksum=compute_checksum(data))

    def write_task_file(self, job_id: str, checkpoint_id: int, name: str, data: bytes) -> StateHandle:
        """Write a file owned by one checkpoint (`<job>/chk-<id>/taskowned/<name>`).

        Raises:
            ValueError: `name` is empty, absolute or contains '..'.
            StorageError: the write failed.
        """
        try:
            check_key(name)
        except ValueError:
            raise ValueError(f"invalid task file name {name!r}: must be a non-empty relative path") from None
        return self.write_file(f"{self.task_owned_dir(job_id, checkpoint_id)}/{name}", data)

    def write_shared_file(self, job_id: str, name: str, data: bytes) -> StateHandle:
        """Write a file that checkpoints may share (`<job>/shared/<name>`); its deletion is up to
        the shared-state registry, never to the checkpoint store."""
        try:
            check_key(name)
        except ValueError:
            raise ValueError(f"invalid shared file name {name!r}: must be a non-empty relative path") from None
        return self.write_file(f"{self.shared_dir(job_id)}/{name}", data)

    def read_task_file(self, handle: StateHandle) -> bytes:
        """Read the bytes a handle addresses (its segment, for merged files) and verify them.

        Raises:
            CorruptCheckpointError: the file is missing, too short, or fails its checksum.
            StorageError: the read itself failed.
        """
        path = handle.path
        problem = _handle_problem(handle, self.root)
        if problem:
            raise CorruptCheckpointError(f"checkpoint state handle {problem}", str(path))
        try:
            data = self.blob_store.get(path)
        except BlobNotFoundError:
            raise CorruptCheckpointError(f"checkpoint state file {path} is missing", path) from None
        if handle.length is not None:
            segment = data[handle.offset : handle.offset + handle.length]
            if len(segment) != handle.length:
                raise CorruptCheckpointError(
                    f"checkpoint state file {path} is truncated: segment at {handle.offset} needs "
                    f"{handle.length} bytes, file has {len(data)}",
                    path,
                )
        else:
            segment = data[handle.offset :]
            if handle.offset == 0 and len(data) != handle.size:
                raise CorruptCheckpointError(
                    f"checkpoint state file {path} has {len(data)} bytes, expected {handle.size}", path
                )
        if not checksum_matches(segment, handle.checksum):
            raise CorruptCheckpointError(f"checkpoint state file {self.describe(path)} fails its checksum", path)
        return segment

    def delete_file(self, path: str) -> None:
        self.blob_store.delete(path)

    # -- metadata --

    def write_metadata(self, completed: CompletedCheckpoint) -> str:
        """Write the checkpoint's `_metadata` (checksummed JSON) and return its path.

        Raises:
            StorageError: the write failed.
            ValueError: the checkpoint's properties are not JSON-representable.
        """
        path = self.metadata_path(completed.job_id, completed.checkpoint_id)
        body = completed.to_json()
        try:
            encoded = canonical_json(body)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"checkpoint {completed.checkpoint_id} metadata is not JSON-representable: {exc}"
            ) from exc
        document = {
            "format": METADATA_FORMAT,
            "version": METADATA_VERSION,
            "checksum": compute_checksum(encoded),
            "body": body,
        }
        self.blob_store.put(path, canonical_json(document))
        return path

    def read_metadata(self, path: str) -> CompletedCheckpoint:
        """Read and verify a `_metadata` file.

        Raises:
            CorruptCheckpointError: missing, unparsable, wrong format, checksum mismatch, or its
                content does not match its location.
            StorageError: the read itself failed.
        """
        try:
            raw = self.blob_store.get(path)
        except BlobNotFoundError:
            raise MissingMetadataError(f"checkpoint metadata {path} is missing", path) from None
        try:
            document = json.loads(raw.decode("utf-8"))
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            if document.get("format") != METADATA_FORMAT or document.get("version") != METADATA_VERSION:
                raise ValueError(
                    f"unknown format {document.get('format')!r} version {document.get('version')!r}"
                )
            body = document["body"]
            checksum = document["checksum"]
            if not isinstance(checksum, str) or compute_checksum(canonical_json(body)) != checksum:
                raise CorruptCheckpointError(f"checkpoint metadata {path} fails its checksum", path)
            completed = CompletedCheckpoint.from_json(body)
        except CorruptCheckpointError:
            raise
        except RecursionError:  # crafted: JSON nested deeper than Python's parser recurses
            raise CorruptCheckpointError(f"checkpoint metadata {self.describe(path)} is unreadable: it is nested too deeply "
                                         "to be checkpoint metadata", path) from None
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, CheckpointMetadataError) as exc:
            raise CorruptCheckpointError(f"checkpoint metadata {path} is unreadable: {exc}", path) from exc
        match = _METADATA_PATH.search(path)
        if match and int(match.group(1)) != completed.checkpoint_id:
            raise CorruptCheckpointError(
                f"checkpoint metadata {path} describes checkpoint {completed.checkpoint_id}", path
            )
        job_prefix = self.job_dir(completed.job_id) + "/" if _valid_job_id(completed.job_id) else None
        for handle in completed.state_handles():
            problem = _handle_problem(handle, self.root, job_prefix)
            if problem:
                raise CorruptCheckpointError(
                    f"checkpoint metadata {self.describe(path)} is unusable: state handle {problem}", path)
        completed.metadata_path = path
        return completed

    # -- listing and cleanup --

    def list_checkpoint_ids(self, job_id: str) -> list[int]:
        """Ids of every `chk-<id>` directory of the job (with or without metadata), ascending."""
        prefix = self.job_dir(job_id) + "/"
        ids = set()
        for key in self.blob_store.list(prefix):
            match = _CHK_DIR.match(key[len(prefix) :].split("/", 1)[0])
            if match:
                ids.add(int(match.group(1)))
        return sorted(ids)

    def list_job_files(self, job_id: str, *, temporary: bool = False) -> list[str]:
        """Every file in the job's directory (`temporary`: only what interrupted writes left)."""
        prefix = self.job_dir(job_id) + "/"
        return self.blob_store.list_temporary(prefix) if temporary else self.blob_store.list(prefix)

    def list_checkpoint_files(self, job_id: str, checkpoint_id: int) -> list[str]:
        return self.blob_store.list(self.checkpoint_dir(job_id, checkpoint_id) + "/")

    def discard_checkpoint(self, job_id: str, checkpoint_id: int, *, keep: Iterable[str] = ()) -> list[str]:
        """Delete every file in `<job>/chk-<id>/` except the paths in `keep`, metadata first (so
        an interrupted discard leaves no metadata pointing at deleted state).

        Returns:
            The deleted paths.

        Raises:
            StorageError: a delete failed (files deleted before it stay deleted).
        """
        keep_set = frozenset(keep)
        metadata = self.metadata_path(job_id, checkpoint_id)
        files = self.list_checkpoint_files(job_id, checkpoint_id)
        ordered = sorted(files, key=lambda p: (p != metadata, p))
        deleted = []
        for path in ordered:
            if path in keep_set:
                continue
            self.blob_store.delete(path)
            deleted.append(path)
        return deleted

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.blob_store!r}, root={self.root!r})"
