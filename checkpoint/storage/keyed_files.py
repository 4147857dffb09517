"""Reading a task's keyed state back from checkpoint storage, full or incremental.

A task's "keyed" handles are either full snapshot blobs (one per task) or, with the incremental
backend, a manifest (its handle key carries a reuse floor) plus the shared files its chains live
in (`state.incremental`). `read_keyed_snapshots` returns what `KeyedStateBackend.restore` takes
either way: restores (`runtime.jobmaster.restore.state_assignment`) and the checkpoint tools read keyed state here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from checkpoint.storage.layout import CorruptCheckpointError
from state.errors import StateFormatError
from state.incremental import Manifest, restore_keyed_snapshot
from state.registry import reuse_floor_of
from state.serialization import KeyedStateSnapshot
from vocabulary.handles import StateHandle

if TYPE_CHECKING:
    from checkpoint.storage.layout import CheckpointStorage

__all__ = ["manifest_handle", "read_keyed_snapshots"]


def manifest_handle(handles: Sequence[StateHandle]) -> StateHandle | None:
    """The incremental manifest among a task's keyed handles (None: full snapshots)."""
    return next((h for h in handles if h.key and reuse_floor_of(h.key) is not None), None)


def read_keyed_snapshots(storage: CheckpointStorage, handles: Sequence[StateHandle]) -> list[bytes | KeyedStateSnapshot]:
    """One task's keyed state: its full snapshot blobs, or its incremental chains rebuilt.

    Raises:
        CorruptCheckpointError: a file is missing, unreadable or fails its checksum.
    """
    manifest = manifest_handle(handles)
    if manifest is None:
        return [storage.read_task_file(handle) for handle in handles]
    return [_read_incremental(storage, manifest, handles)]


def _read_incremental(storage: CheckpointStorage, manifest_handle: StateHandle,
                      handles: Sequence[StateHandle]) -> KeyedStateSnapshot:
    by_path = {h.path: h for h in handles}
    try:
        manifest = Manifest.from_bytes(storage.read_task_file(manifest_handle))
    except StateFormatError as exc:
        raise CorruptCheckpointError(f"manifest in {manifest_handle.path}: {exc}", manifest_handle.path) from exc

    def read_file(path: str) -> bytes:
        handle = by_path.get(path)
        if handle is None:
            raise CorruptCheckpointError(
                f"shared state file {path} is used by the manifest in {manifest_handle.path} but not "
                "listed in the checkpoint metadata", path)
        return storage.read_task_file(handle)

    try:
        return restore_keyed_snapshot(manifest, read_file)
    except StateFormatError as exc:
        raise CorruptCheckpointError(f"incremental state of {manifest.task}: {exc}", manifest_handle.path) from exc
