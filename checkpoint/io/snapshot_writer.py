"""The asynchronous part of a task snapshot: serialise it and write its files.

Both executors call this (the simulator after a virtual write delay, a Ray task actor off its
data path), so how state reaches storage — full files today; incremental, shared and merged
files as the state-storage work lands — is decided in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from checkpoint.io.state_files import StateFileOptions, StateFileWriter, TaskSnapshot
from vocabulary.handles import StateHandle, TaskId

if TYPE_CHECKING:
    from checkpoint.storage.layout import CheckpointStorage


class SnapshotWriter:
    """Writes `TaskSnapshot`s of one job to a `CheckpointStorage`.

    With the default config (memory backend, no file merging) every kind is one full file in
    the checkpoint's `taskowned/` directory. `state_backend="incremental"` and/or
    `file_merging=True` delegate to `checkpoint.io.state_files.StateFileWriter`; executors then also
    forward each task's notifications (`notify_checkpoint_complete/aborted`) and call `reset()`
    when they redeploy tasks.
    """

    def __init__(self, storage: CheckpointStorage, job_id: str, config: Any = None) -> None:
        self.storage = storage
        self.job_id = job_id
        options = StateFileOptions.from_config(config)
        self.files: StateFileWriter | None = None if options.legacy else StateFileWriter(storage, job_id, options)

    def prepare(self, snapshot: TaskSnapshot) -> dict[str, bytes]:
        """Serialise: name -> bytes of what `write` uploads (incremental: may read back files
        to compact)."""
        if self.files is not None:
            return self.files.prepare(snapshot)
        return snapshot.to_files()

    def write(self, snapshot: TaskSnapshot, files: dict[str, bytes]) -> dict[str, tuple[StateHandle, ...]]:
        """Write the prepared files; return the handles per kind.

        Raises:
            checkpoint.storage.layout.StorageError: a write failed (files written so far are removed).
        """
        if self.files is not None:
            return self.files.write(snapshot)
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
        if self.files is not None:
            self.files.discard(handles)
            return
        for group in handles.values():
            for handle in group:
                self.storage.delete_file(handle.path)

    def notify_checkpoint_complete(self, task_id: TaskId, checkpoint_id: int) -> None:
        """Forward of `task.notify_checkpoint_complete`: the snapshot becomes the task's base."""
        if self.files is not None:
            self.files.notify_complete(task_id, checkpoint_id)

    def notify_checkpoint_aborted(self, task_id: TaskId, checkpoint_id: int) -> None:
        """Forward of `task.notify_checkpoint_aborted`: stop its upload, delete what it wrote."""
        if self.files is not None:
            self.files.notify_aborted(task_id, checkpoint_id)

    def reset(self, task_ids: Iterable[TaskId] | None = None) -> None:
        """Tasks were redeployed (failover): forget what their old incarnation wrote."""
        if self.files is not None:
            self.files.reset(task_ids)
