"""Checkpoint storage: the I/O adapter for checkpoint files (`docs/semantics.md`,
"Storage").

Theory of operation
-------------------
Two layers, so the protocol code never sees a filesystem:

* a `BlobStore` is a flat key → bytes store with five operations (`put`, `get`, `delete`,
  `exists`, `list`). `MemoryBlobStore` keeps a dict (the default, and the simulator's);
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

  Every file is checksummed (SHA-256, hex) when written: the checksum of a task file travels in
  its `StateHandle`, the checksum of the metadata is embedded next to the body it covers (over the
  body's canonical JSON encoding). Reading verifies; a mismatch, a missing file or unparsable
  metadata raises `CorruptCheckpointError` naming the file, which is what lets recovery skip a
  corrupt checkpoint for the previous one.

Nothing is pickled: metadata is JSON and task files are whatever bytes (Arrow IPC) the state
backends hand over.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from checkpoint.completed import CheckpointMetadataError, CompletedCheckpoint, canonical_json
from checkpoint.handles import StateHandle
from checkpoint.io import local_links
from checkpoint.options import DEFAULT_STORAGE_TIMEOUT

T = TypeVar("T")

METADATA_FILE = "_metadata"
METADATA_FORMAT = "barrierflow-checkpoint-metadata"
METADATA_VERSION = 1
TASK_OWNED_DIR = "taskowned"
SHARED_DIR = "shared"

_CHK_DIR = re.compile(r"^chk-(\d+)$")
_METADATA_PATH = re.compile(r"(?:^|/)chk-(\d+)/" + METADATA_FILE + r"$")
_TMP_MARKER = ".tmp-"
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class StorageError(OSError):
    """Reading or writing checkpoint storage failed (names the path)."""


class BlobNotFoundError(StorageError):
    """No file at the given path."""


class StorageTimeoutError(StorageError):
    """A call to checkpoint storage did not return within its timeout (names the URI)."""


def _call_with_timeout(fn: Callable[[], T], timeout: float, on_timeout: Callable[[], StorageError]) -> T:
    """`fn()` on a daemon thread; raise `on_timeout()` if it has not returned after `timeout` s."""
    outcome: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="barrierflow-storage-call", daemon=True).start()
    if not done.wait(timeout):
        raise on_timeout()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class StorageFileError(StorageError):
    """A `StorageError` about one file: its message is a sentence naming it (not OSError's
    `[Errno message] path` form).

    Attributes:
        path: the offending file.
    """

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):  # keep `path` when pickled (Ray ships exceptions between actors)
        return (type(self), (self.args[0], self.path))


class CorruptCheckpointError(StorageFileError):
    """A checkpoint file is missing, truncated, unparsable or fails its checksum (`path`)."""


class MissingMetadataError(CorruptCheckpointError):
    """A checkpoint directory without its `_metadata`: what every checkpoint that never completed
    leaves (the coordinator writes it last), or a completed one whose metadata was removed."""


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


# -- blob stores -------------------------------------------------------------------------------


def _check_key(path: str) -> str:
    if not isinstance(path, str) or not path or path.startswith("/") or path.endswith("/"):
        raise ValueError(f"invalid storage path {path!r}: must be a non-empty relative path")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"invalid storage path {path!r}: empty, '.' or '..' segment")
    return path


class BlobStore(Protocol):
    """A flat store of files addressed by relative '/'-separated paths."""

    def put(self, path: str, data: bytes) -> None:
        """Write (replace) the file at `path`. Raises: StorageError."""
        ...

    def get(self, path: str) -> bytes:
        """Read the file at `path`. Raises: BlobNotFoundError, StorageError."""
        ...

    def delete(self, path: str) -> None:
        """Delete the file at `path`; deleting a missing file is not an error."""
        ...

    def exists(self, path: str) -> bool: ...

    def list(self, prefix: str) -> list[str]:
        """Every file path starting with `prefix`, sorted (interrupted writes not included);
        symbolic links are neither listed nor followed (see `list_links`)."""
        ...

    def list_temporary(self, prefix: str) -> list[str]:
        """Paths starting with `prefix` of files an interrupted write left under a temporary
        name (never read; `delete` removes them), sorted."""
        ...

    def where(self, path: str) -> str:
        """`path` as a user finds it (a full path or URI), for error messages."""
        ...


class ForwardingBlobStore:
    """A `BlobStore` forwarding every call to `inner`: the base of wrappers that change a call
    or two (fault injection, watching deletes)."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner

    def put(self, path: str, data: bytes) -> None:
        self.inner.put(path, data)

    def get(self, path: str) -> bytes:
        return self.inner.get(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def list_temporary(self, prefix: str) -> list[str]:
        return self.inner.list_temporary(prefix)

    def where(self, path: str) -> str:
        return self.inner.where(path)

    def list_links(self, prefix: str) -> list[str]:
        return list_links(self.inner, prefix)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return put_if_absent(self.inner, path, data)

    def __repr__(self) -> str:
        return repr(self.inner)


class MemoryBlobStore:
    """A blob store in a dict (checkpoints survive a coordinator restart, not the process)."""

    def __init__(self) -> None:
        self._files: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, path: str, data: bytes) -> None:
        _check_key(path)
        with self._lock:
            self._files[path] = bytes(data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """`put` unless a file is there already (atomically); whether it wrote."""
        _check_key(path)
        with self._lock:
            if path in self._files:
                return False
            self._files[path] = bytes(data)
            return True

    def get(self, path: str) -> bytes:
        with self._lock:
            try:
                return self._files[path]
            except KeyError:
                raise BlobNotFoundError(f"no file at {path!r}") from None

    def delete(self, path: str) -> None:
        with self._lock:
            self._files.pop(path, None)

    def exists(self, path: str) -> bool:
        with self._lock:
            return path in self._files

    def list(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(p for p in self._files if p.startswith(prefix))

    def list_temporary(self, prefix: str) -> list[str]:
        return []  # a put is one step: nothing is ever half written

    def list_links(self, prefix: str) -> list[str]:
        return []

    def where(self, path: str) -> str:
        return f"memory://{path}"

    def __repr__(self) -> str:
        return f"MemoryBlobStore(files={len(self._files)})"


class FsBlobStore:
    """A blob store on a `pyarrow.fs` filesystem.

    Args:
        uri_or_path: a filesystem URI (``file:///tmp/x``, ``s3://bucket/prefix``...) or a local
            path (relative paths are made absolute).
        timeout: seconds each call to a remote filesystem may take (None: unbounded); local
            directories are not bounded.
        filesystem: a configured `pyarrow.fs.FileSystem` (e.g. an `S3FileSystem` with its own
            credentials); `uri_or_path` is then the base path inside it.
        create: create the base directory if missing (a job's storage); False: it must exist
            (inspecting or restoring from a directory never creates it).

    Raises:
        StorageError: the URI cannot be resolved, the base directory cannot be created, or (not
            `create`) it does not exist or is not a directory; `StorageTimeoutError` when that
            took longer than `timeout`.
    """

    def __init__(self, uri_or_path: str, *, timeout: float | None = DEFAULT_STORAGE_TIMEOUT,
                 filesystem: pafs.FileSystem | None = None, create: bool = True) -> None:
        if not isinstance(uri_or_path, str) or not uri_or_path.strip():
            raise ValueError(f"checkpoint storage location must be a URI or a path, got {uri_or_path!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not timeout > 0):
            raise ValueError(f"invalid checkpoint storage timeout {timeout!r}: must be seconds > 0 (or None)")
        self.uri = uri_or_path
        self.timeout = timeout
        if filesystem is not None:
            remote = not isinstance(filesystem, pafs.LocalFileSystem)
        else:
            remote = "://" in uri_or_path and not uri_or_path.startswith("file://")
        self._bounded = remote and timeout is not None
        try:
            if filesystem is not None:
                self._fs, base = filesystem, uri_or_path
            elif "://" in uri_or_path:
                self._fs, base = self._call("resolve the URI", lambda: pafs.FileSystem.from_uri(uri_or_path))
            else:
                self._fs, base = pafs.LocalFileSystem(), os.path.abspath(uri_or_path)
            self._bounded = self._bounded and not isinstance(self._fs, pafs.LocalFileSystem)
            self._base = base.rstrip("/")
            if create:
                self._call(f"create directory {self._base}", lambda: self._fs.create_dir(self._base, recursive=True))
            else:
                kind = self._call(f"look up {self._base}", lambda: self._fs.get_file_info(self._base).type)
        except StorageTimeoutError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot open checkpoint storage {uri_or_path!r}: {exc}") from exc
        if not create and kind != pafs.FileType.Directory:
            what = "does not exist" if kind == pafs.FileType.NotFound else "is not a directory"
            raise BlobNotFoundError(f"checkpoint storage {uri_or_path} ({self._base}) {what}")

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()`, bounded by the timeout on a remote filesystem."""
        if not self._bounded:
            return fn()
        assert self.timeout is not None
        return _call_with_timeout(fn, self.timeout, lambda: StorageTimeoutError(
            f"checkpoint storage {self.uri!r} did not answer within {self.timeout:g} s ({what}): unreachable "
            "or overloaded? (the bound is enable_checkpointing(storage_timeout=...))"))

    def _full(self, path: str) -> str:
        return f"{self._base}/{_check_key(path)}"

    def put(self, path: str, data: bytes) -> None:
        self._call(f"write {self._full(path)}", lambda: self._put(path, data))

    def _put(self, path: str, data: bytes) -> None:
        full = self._full(path)
        self._refuse_links(path, "write")
        parent, _, name = full.rpartition("/")
        tmp = f"{parent}/.{name}{_TMP_MARKER}{uuid.uuid4().hex}"
        try:
            for attempt in range(2):  # a concurrent prune may remove the parent between the steps
                try:
                    self._fs.create_dir(parent, recursive=True)
                    with self._fs.open_output_stream(tmp) as out:
                        out.write(data)
                    break
                except FileNotFoundError:
                    if attempt:
                        raise
            self._fs.move(tmp, full)
        except (OSError, pa.ArrowException) as exc:
            self._quiet_delete(tmp)
            raise StorageError(f"cannot write {full}: {exc}") from exc

    def put_durably(self, path: str, data: bytes) -> None:
        """`put`, synced: on a local file system the file is fsynced before it is renamed into
        place and its directory after, so a crash leaves the old file or the new one, never a
        torn or lost one (elsewhere a `put` is atomic and durable once it returns)."""
        if not isinstance(self._fs, pafs.LocalFileSystem):
            self.put(path, data)
            return
        full, tmp = self._write_temporary(path, data, sync=True)
        parent = full.rpartition("/")[0]
        try:
            os.replace(tmp, full)
            directory = os.open(parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            self._quiet_delete(tmp)
            raise StorageError(f"cannot write {full}: {exc}") from exc

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """`put` unless a file is there already; whether it wrote. Atomic on a local file system
        (a hard link of the written temporary file fails if the name exists); elsewhere a look
        then a put (object stores offer no such call through pyarrow), so two writers racing
        within one call may both write: callers read back what they wrote."""
        if not self._local:
            def look_then_put() -> bool:
                if self._exists(path):
                    return False
                self._put(path, data)
                return True

            return self._call(f"write {self._full(path)}", look_then_put)
        full, tmp = self._write_temporary(path, data, sync=False)
        try:
            os.link(tmp, full)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot write {full}: {exc}") from exc
        finally:
            self._quiet_delete(tmp)

    def _write_temporary(self, path: str, data: bytes, *, sync: bool) -> tuple[str, str]:
        """Write `data` under a temporary name beside `path` (local file systems; `sync`: fsynced):
        (the full path, the temporary one).

        Raises:
            StorageError: the write failed (the temporary file is gone), or would go through a link.
        """
        full = self._full(path)
        self._refuse_links(path, "write")
        parent, _, name = full.rpartition("/")
        tmp = f"{parent}/.{name}{_TMP_MARKER}{uuid.uuid4().hex}"
        try:
            os.makedirs(parent, exist_ok=True)
            with open(tmp, "wb") as out:
                out.write(data)
                if sync:
                    out.flush()
                    os.fsync(out.fileno())
        except OSError as exc:
            self._quiet_delete(tmp)
            raise StorageError(f"cannot write {full}: {exc}") from exc
        return full, tmp

    def get(self, path: str) -> bytes:
        return self._call(f"read {self._full(path)}", lambda: self._get(path))

    def _get(self, path: str) -> bytes:
        full = self._full(path)
        try:
            with self._fs.open_input_file(full) as f:
                return f.read()
        except FileNotFoundError:
            raise BlobNotFoundError(f"no file at {full}") from None
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot read {full}: {exc}") from exc

    def delete(self, path: str) -> None:
        self._call(f"delete {self._full(path)}", lambda: self._delete(path))

    def _delete(self, path: str) -> None:
        full = self._full(path)
        self._refuse_links(path, "delete")
        try:
            self._fs.delete_file(full)
        except FileNotFoundError:
            return
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot delete {full}: {exc}") from exc
        self._prune(full.rpartition("/")[0])

    def _prune(self, directory: str) -> None:
        """Remove directories left empty by a delete, up to (not including) the base."""
        while directory.startswith(self._base + "/"):
            try:
                if self._fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
                    return
                self._fs.delete_dir(directory)
            except (OSError, pa.ArrowException):
                return
            directory = directory.rpartition("/")[0]

    def _quiet_delete(self, full: str) -> None:
        with contextlib.suppress(OSError, pa.ArrowException):
            self._fs.delete_file(full)

    def exists(self, path: str) -> bool:
        return self._call(f"stat {self._full(path)}", lambda: self._exists(path))

    def _exists(self, path: str) -> bool:
        try:
            return self._fs.get_file_info(self._full(path)).type == pafs.FileType.File
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot stat {path!r} in {self._base}: {exc}") from exc

    def list(self, prefix: str) -> list[str]:
        return self._list(prefix, temporary=False)

    def list_temporary(self, prefix: str) -> list[str]:
        return self._list(prefix, temporary=True)

    def list_links(self, prefix: str) -> list[str]:
        """Paths starting with `prefix` of symbolic links below the base (none are followed:
        `list` skips what lies behind them, `delete` refuses to go through them), sorted."""
        if not self._local:
            return []  # object stores have no links
        return sorted(key for key in self._walk_local(prefix)[1] if key.startswith(prefix))

    def _list(self, prefix: str, *, temporary: bool) -> list[str]:
        if self._local:  # never follows a link (pyarrow's recursive listing does)
            files = self._walk_local(prefix)[0]
            return sorted(k for k in files if k.startswith(prefix) and (_TMP_MARKER in k.rpartition("/")[2]) == temporary)
        root = f"{self._base}/{_directory_of(prefix)}".rstrip("/")
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        try:
            infos = self._call(f"list {root}", lambda: self._fs.get_file_info(selector))
        except StorageTimeoutError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot list {root}: {exc}") from exc
        start = len(self._base) + 1
        keys = []
        for info in infos:
            if info.type != pafs.FileType.File or (_TMP_MARKER in info.base_name) != temporary:
                continue
            key = info.path[start:]
            if key.startswith(prefix):
                keys.append(key)
        return sorted(keys)

    @property
    def _local(self) -> bool:
        return isinstance(self._fs, pafs.LocalFileSystem)

    def _walk_local(self, prefix: str) -> tuple[list[str], list[str]]:
        try:
            return local_links.walk(self._base, _directory_of(prefix))
        except OSError as exc:
            raise StorageError(f"cannot list {self._base}/{prefix}: {exc}") from exc

    def _link_on_the_way(self, path: str) -> str | None:
        return local_links.link_on_the_way(self._base, path) if self._local else None

    def _refuse_links(self, path: str, verb: str) -> None:
        """Raises: StorageError if a folder of `path` below the base is a symbolic link."""
        link = self._link_on_the_way(path)
        if link is not None:
            target = os.readlink(f"{self._base}/{link}")
            raise StorageError(f"refusing to {verb} {self._full(path)}: {self._base}/{link} is a symbolic link (to "
                               f"{target}); barrierflow never writes or deletes through one below its storage root")

    def where(self, path: str) -> str:
        return f"{self._base}/{path}"

    def __repr__(self) -> str:
        return f"FsBlobStore({self.uri!r})"


def _directory_of(prefix: str) -> str:
    """The folder a listing of `prefix` starts in ("" or ending in '/')."""
    return prefix if prefix.endswith("/") or not prefix else prefix.rpartition("/")[0] + "/"


def put_if_absent(blob_store: BlobStore, path: str, data: bytes) -> bool:
    """`blob_store.put_if_absent(path, data)`, or a look then a put where the store lacks it;
    whether it wrote."""
    put = getattr(blob_store, "put_if_absent", None)
    if put is not None:
        return put(path, data)
    if blob_store.exists(path):
        return False
    blob_store.put(path, data)
    return True


def list_links(blob_store: BlobStore, prefix: str) -> list[str]:
    """`blob_store.list_links(prefix)` where the store has links at all (local directories), else []."""
    links = getattr(blob_store, "list_links", None)
    return links(prefix) if links is not None else []


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
        _check_key(path)
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
            _check_key(self.root)

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

    # -- state files --

    def write_file(self, path: str, data: bytes) -> StateHandle:
        """Write `data` at `path` (relative to the blob store) and return its checksummed handle.

        Raises:
            StorageError: the write failed.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"state file {path} must be written as bytes, got {type(data).__name__}")
        data = bytes(data)
        self.blob_store.put(_check_key(path), data)
        return StateHandle(path=path, size=len(data), checksum=compute_checksum(data))

    def write_task_file(self, job_id: str, checkpoint_id: int, name: str, data: bytes) -> StateHandle:
        """Write a file owned by one checkpoint (`<job>/chk-<id>/taskowned/<name>`).

        Raises:
            ValueError: `name` is empty, absolute or contains '..'.
            StorageError: the write failed.
        """
        try:
            _check_key(name)
        except ValueError:
            raise ValueError(f"invalid task file name {name!r}: must be a non-empty relative path") from None
        return self.write_file(f"{self.task_owned_dir(job_id, checkpoint_id)}/{name}", data)

    def write_shared_file(self, job_id: str, name: str, data: bytes) -> StateHandle:
        """Write a file that checkpoints may share (`<job>/shared/<name>`); its deletion is up to
        the shared-state registry, never to the checkpoint store."""
        try:
            _check_key(name)
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


def storage_from_uri(uri: str | None, root: str = "", *,
                     timeout: float | None = DEFAULT_STORAGE_TIMEOUT, create: bool = True) -> CheckpointStorage:
    """Checkpoint storage for a `CheckpointConfig.storage` value.

    Args:
        uri: None or ``"memory://"`` for memory; otherwise a `pyarrow.fs` URI or a local path.
        timeout: seconds each call to a remote filesystem may take (`CheckpointConfig.storage_timeout`).
        create: create a missing directory (False: it must exist, see `FsBlobStore`).

    Raises:
        StorageError: the location cannot be opened (`StorageTimeoutError`: it did not answer;
            `BlobNotFoundError`: it does not exist).
    """
    if uri is None or uri == "memory://":
        return CheckpointStorage(MemoryBlobStore(), root)
    return CheckpointStorage(FsBlobStore(uri, timeout=timeout, create=create), root)
