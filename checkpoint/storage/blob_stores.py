"""Blob stores: flat key -> bytes stores of checkpoint files (`checkpoint.storage.layout`).

The `BlobStore` protocol, `MemoryBlobStore` (a dict: the default, and the simulator's),
`ForwardingBlobStore` (the base of wrappers that change a call or two), and the helpers for
operations not every store has (`put_if_absent`, `list_links`). The store on a `pyarrow.fs`
filesystem is `checkpoint.io.fs_blob_store.FsBlobStore`.
"""

from __future__ import annotations

import threading
from typing import Protocol

from checkpoint.storage.errors import BlobNotFoundError

__all__ = ["BlobStore", "ForwardingBlobStore", "MemoryBlobStore", "check_key", "list_links", "put_if_absent"]


def check_key(path: str) -> str:
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
        check_key(path)
        with self._lock:
            self._files[path] = bytes(data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """`put` unless a file is there already (atomically); whether it wrote."""
        check_key(path)
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
