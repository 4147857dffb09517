"""Checkpoint storage as seen from Ray actors.

A job's `CheckpointConfig.storage` is either None/"memory://" — then the blobs live in one
`BlobStoreService` actor that every task actor and the coordinator reach through
`RemoteBlobStore` — or a `pyarrow.fs` URI / local path that every actor opens itself. On a
multi-node cluster a local path (or a ``file://`` URI) would give every node its own disk, so
restore would miss files written elsewhere: that is refused up front with `StorageConfigError`.
"""

from __future__ import annotations

from typing import Any

from checkpoint.io.storage import storage_from_uri
from checkpoint.storage.layout import CheckpointStorage
from runtime.ray.services import RemoteBlobStore
from vocabulary.options import DEFAULT_STORAGE_TIMEOUT


class StorageConfigError(ValueError):
    """Checkpoint storage that cannot work on this cluster (names the option and value)."""


#: ("memory", BlobStoreService handle) or ("uri", uri-or-path)
StorageSpec = tuple[str, Any]


def is_memory(uri: str | None) -> bool:
    return uri is None or uri == "memory://"


def is_node_local(uri: str) -> bool:
    """A location only one node can see: a plain path or a file:// URI."""
    return "://" not in uri or uri.startswith("file://")


def check_storage_for_cluster(uri: str | None, num_nodes: int) -> None:
    """Raises: StorageConfigError for node-local storage on a cluster of several nodes."""
    if num_nodes > 1 and not is_memory(uri) and is_node_local(uri):
        raise StorageConfigError(
            f"checkpoint storage {uri!r} is a local path, but the Ray cluster has {num_nodes} nodes: "
            "tasks on other nodes could not read it back. Set enable_checkpointing(storage=...) to a "
            "shared pyarrow.fs URI (e.g. s3://bucket/prefix, gs://..., hdfs://...), or leave it unset "
            "to keep checkpoints in memory (in a Ray actor)."
        )


def open_storage(spec: StorageSpec, graph: Any = None) -> CheckpointStorage:
    """The job's checkpoint storage in this process; each call to a remote URI is bounded by the
    job's `storage_timeout`.

    Raises:
        checkpoint.storage.layout.StorageError: the URI cannot be opened (names it and the cause).
    """
    kind, value = spec
    if kind == "memory":
        return CheckpointStorage(RemoteBlobStore(value))
    config = getattr(graph, "checkpoint_config", None)
    return storage_from_uri(value, timeout=config.storage_timeout if config is not None else DEFAULT_STORAGE_TIMEOUT)
