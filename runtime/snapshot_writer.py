"""The asynchronous part of a task snapshot: serialise it and write its files.

Both executors call this (the simulator after a virtual write delay, a Ray task actor off its
data path), so how state reaches storage — full files today; incremental, shared and merged
files as the state-storage work lands — is decided in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checkpoint.handles import StateHandle

if TYPE_CHECKING:
    from checkpoint.storage import CheckpointStorage
    from runtime.task import TaskSnapshot


class SnapshotWriter:
    """Writes `TaskSnapshot`s of one job to a `CheckpointStorage`."""

    def __init__(self, storage: CheckpointStorage, job_id: str) -> None:
        self.storage = storage
        self.job_id = job_id

    def prepare(self, snapshot: TaskSnapshot) -> dict[str, bytes]:
        """Serialise (CPU only, no I/O): kind -> bytes."""
        return snapshot.to_files()

    def write(self, snapshot: TaskSnapshot, files: dict[str, bytes]) -> dict[str, tuple[StateHandle, ...]]:
        """Write the prepared files; return the handles per kind.

        Raises:
            checkpoint.storage.StorageError: a write failed (files written so far are removed).
        """
        handles: dict[str, tuple[StateHandle, ...]] = {}
        try:
            for kind, data in sorted(files.items()):
                name = f"{snapshot.task_id}.{kind}"
                handles[kind] = (self.storage.write_task_file(self.job_id, snapshot.checkpoint_id, name, data),)
        except Exception:
            self.discard(handles)
            raise
        return handles

    def discard(self, handles: dict[str, tuple[StateHandle, ...]]) -> None:
        """Remove files of a snapshot that will never be acknowledged (cancelled or failed)."""
        for group in handles.values():
            for handle in group:
                self.storage.delete_file(handle.path)
