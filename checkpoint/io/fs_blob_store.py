"""`FsBlobStore`: a blob store on any `pyarrow.fs` filesystem (a local directory, S3, GCS,
HDFS...), for `checkpoint.storage.layout`.

Each file is written under a temporary name (`.<name>.tmp-<uuid>`) and moved into place, so a
reader never sees half a file; every call to a remote filesystem is bounded by a timeout (see
`checkpoint.storage.layout`); in a local directory no symbolic link is listed, followed, written or
deleted through (`checkpoint.io.local_links`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from checkpoint.io import local_links
from checkpoint.storage.blob_stores import check_key
from checkpoint.storage.errors import BlobNotFoundError, StorageError, StorageTimeoutError
from vocabulary.options import DEFAULT_STORAGE_TIMEOUT

__all__ = ["FsBlobStore"]

T = TypeVar("T")

_TMP_MARKER = ".tmp-"


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
        return f"{self._base}/{check_key(path)}"

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
