"""Opening checkpoint storage for a run: `storage_from_uri` puts the `chk-<id>` layout
(`checkpoint.storage.layout.CheckpointStorage`) on memory or on any `pyarrow.fs` filesystem
(`FsBlobStore`); `new_run_id` names a run."""

from __future__ import annotations

import secrets
import time

from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.storage.blob_stores import MemoryBlobStore
from checkpoint.storage.layout import CheckpointStorage
from vocabulary.options import DEFAULT_STORAGE_TIMEOUT


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


def new_run_id() -> str:
    """A fresh run id: UTC start time (sorts by age) and 24 random bits, e.g. `20261123T121500-3f9a1c`."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
