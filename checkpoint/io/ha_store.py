"""A completed-checkpoint store whose index lives in an HA backend (Flink's
`DefaultCompletedCheckpointStore` over a `StateHandleStore`).

Theory of operation
-------------------
Checkpoint metadata is too big for ZooKeeper, so it goes to `CheckpointStorage` and the backend
only keeps a small *pointer* per checkpoint: ``{"metadata_path": ..., "checksum": ...}`` (the
checksum is the SHA-256 of the metadata body, the one `CheckpointStorage` embeds), under a key
that is the checkpoint id. The pointers are the truth about what completed; the files are found
through them.

* `add_checkpoint`: write the metadata, then register the pointer. With a leader election, the
  registration is fenced (the backend checks the leader's token atomically with the write), so a
  deposed leader's checkpoint never becomes visible; if it is refused, the metadata just written is
  deleted and `NotLeaderError` propagates. Then the oldest checkpoints beyond `retained` are
  dropped: pointer first, files second, so no pointer ever names a deleted file. The pointer goes
  at once; the file deletes may run on a `discard_executor` (the Ray coordinator's I/O thread, as
  with the standalone store), which `flush()`, `shutdown()`, `recover()` and
  `discard_all_checkpoints()` wait for.
* `recover`: list the pointers and read them, and list again; if another process changed the set
  meanwhile (or a pointer vanished while being read), retry, up to `MAX_RECOVERY_ATTEMPTS`. Then,
  newest first, keep the `retained` latest checkpoints whose pointer, metadata and state files
  verify; a corrupt one is skipped with a warning naming the pointer or file and left in place for
  inspection; valid checkpoints older than the ones kept are discarded.

The backend (`StateHandleStore`) is ZooKeeper (`checkpoint/io/zookeeper.py`) or the simulator's
in-memory stand-in (`checkpoint/io/ha_memory.py`); this module does no backend I/O itself.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import Executor
from typing import Protocol

from checkpoint.completed import CompletedCheckpoint
from checkpoint.io.recovery import (
    FencingToken,
    HighAvailabilityError,
    LeaderElection,
    NotLeaderError,
)
from checkpoint.storage.layout import (
    CheckpointStorage,
    CorruptCheckpointError,
    StorageError,
    compute_checksum,
)
from checkpoint.storage.store import RetainingCheckpointStore, discard_checkpoint_files, run_of

log = logging.getLogger(__name__)

#: bound on list/read/list rounds in `recover()` before giving up on a constantly changing backend
MAX_RECOVERY_ATTEMPTS = 20


class PointerMissingError(HighAvailabilityError):
    """A pointer listed a moment ago is gone (a concurrent remove)."""


class StateHandleStore(Protocol):
    """Where the checkpoint pointers live, keyed by checkpoint id."""

    def list_ids(self) -> list[int]:
        """Ids with a pointer, ascending. Raises: HighAvailabilityError."""
        ...

    def get(self, checkpoint_id: int) -> bytes:
        """The pointer's bytes. Raises: PointerMissingError, HighAvailabilityError."""
        ...

    def add(self, checkpoint_id: int, data: bytes, fencing_token: FencingToken | None) -> None:
        """Register a pointer; with a token, atomically only if the token is still valid.

        Raises:
            NotLeaderError: the token is no longer valid; nothing was written.
            CheckpointExistsError: a pointer with this id exists.
            HighAvailabilityError: the backend failed (the outcome may be unknown).
        """
        ...

    def remove(self, checkpoint_id: int) -> None:
        """Delete a pointer; a missing one is not an error. Raises: HighAvailabilityError."""
        ...

    def describe(self, checkpoint_id: int) -> str:
        """Where the pointer lives, for messages (a znode path)."""
        ...


def encode_pointer(completed: CompletedCheckpoint, metadata_path: str) -> bytes:
    """The pointer bytes for a checkpoint whose metadata was written at `metadata_path`."""
    document = {
        "checkpoint_id": completed.checkpoint_id,
        "metadata_path": metadata_path,
        "checksum": compute_checksum(completed.to_json_bytes()),
    }
    return json.dumps(document, sort_keys=True).encode("utf-8")


def decode_pointer(data: bytes, where: str) -> tuple[str, str]:
    """Parse pointer bytes into `(metadata_path, checksum)`.

    Raises:
        ValueError: not a pointer (the message names `where`).
    """
    try:
        document = json.loads(data.decode("utf-8"))
        metadata_path = document["metadata_path"]
        checksum = document["checksum"]
        if not isinstance(metadata_path, str) or not metadata_path or not isinstance(checksum, str):
            raise TypeError("metadata_path and checksum must be non-empty strings")
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ValueError(f"checkpoint pointer {where} is corrupt: {exc}") from exc
    return metadata_path, checksum


class DefaultCompletedCheckpointStore(RetainingCheckpointStore):
    """Retains the latest `retained` checkpoints: metadata in storage, pointers in an HA backend.

    Args:
        handles: the backend holding the pointers.
        storage: where metadata and state files live.
        job_id: the job whose checkpoints it keeps.
        retained: how many completed checkpoints to keep (>= 1).
        leader_election: if given, `add_checkpoint` is fenced by this contender's leadership.
        discard_executor: runs the deletes of dropped checkpoints' files (their pointers are
            removed at once); None: inline.
    """

    def __init__(self, handles: StateHandleStore, storage: CheckpointStorage, job_id: str, retained: int = 1,
                 *, leader_election: LeaderElection | None = None, discard_executor: Executor | None = None) -> None:
        super().__init__(storage, job_id, retained, discard_executor)
        self.handles = handles
        self.leader_election = leader_election
        #: rounds the last `recover()` needed (1 = no concurrent modification seen)
        self.recovery_attempts = 0

    def add_checkpoint(self, completed: CompletedCheckpoint) -> list[CompletedCheckpoint]:
        """Write the metadata, register the pointer (fenced), drop checkpoints beyond `retained`.

        Raises:
            NotLeaderError: fenced and this contender does not lead; nothing stays written.
            StorageError: the metadata could not be written; the store is unchanged.
            HighAvailabilityError: the backend failed; the metadata is left in place because the
                pointer may have been written.
            ValueError: wrong job, or not newer than the latest retained checkpoint.
        """
        if completed.job_id != self.job_id:
            raise ValueError(f"checkpoint {completed.checkpoint_id} of job {completed.job_id!r} "
                             f"added to the store of job {self.job_id!r}")
        latest = self.get_latest_checkpoint()
        if latest is not None and completed.checkpoint_id <= latest.checkpoint_id:
            raise ValueError(f"checkpoint {completed.checkpoint_id} is not newer than the latest "
                             f"retained checkpoint {latest.checkpoint_id}")
        token = self.leader_election.fencing_token() if self.leader_election is not None else None
        self.stamp_run(completed)
        path = self.storage.write_metadata(completed)
        try:
            self.handles.add(completed.checkpoint_id, encode_pointer(completed, path), token)
        except NotLeaderError:
            self._quiet_delete(path)
            raise
        completed.metadata_path = path
        self._checkpoints.append(completed)
        self._highest_seen = max(self._highest_seen, completed.checkpoint_id)
        dropped = self._checkpoints[: -self._retained]
        del self._checkpoints[: -self._retained]
        for old in dropped:
            self._remove_and_discard(old.checkpoint_id, old)
        return dropped

    def discard_all_checkpoints(self) -> None:
        """Remove every pointer of the job (also ones this store skipped) and the files of the
        checkpoints it retained."""
        checkpoints, self._checkpoints = self._checkpoints, []
        known = {c.checkpoint_id: c for c in checkpoints}
        for checkpoint_id in sorted(set(self.handles.list_ids()) | set(known)):
            self._remove_and_discard(checkpoint_id, known.get(checkpoint_id))
        self.flush()

    def recover(self) -> list[CompletedCheckpoint]:
        """Rebuild from the pointers (see the module header).

        Raises:
            HighAvailabilityError: the backend failed, or kept changing for
                `MAX_RECOVERY_ATTEMPTS` rounds.
        """
        self.flush()  # a discard still running would look like corruption
        pointers = self._read_consistent_pointers()
        if pointers:
            self._highest_seen = max(self._highest_seen, max(pointers))
        kept: list[CompletedCheckpoint] = []
        for checkpoint_id in sorted(pointers, reverse=True):
            if len(kept) == self._retained:
                break
            completed = self._load_verified(checkpoint_id, pointers[checkpoint_id])
            if completed is not None:
                kept.append(completed)
        kept.reverse()
        self._checkpoints = kept
        if kept:
            oldest_kept = kept[0].checkpoint_id
            for checkpoint_id in sorted(i for i in pointers if i < oldest_kept):
                if self._discardable(checkpoint_id, pointers[checkpoint_id]):
                    self._remove_and_discard(checkpoint_id, None)
            log.info("recovered checkpoints %s of job %s", [c.checkpoint_id for c in kept], self.job_id)
        return list(kept)

    def _read_consistent_pointers(self) -> dict[int, bytes]:
        for attempt in range(1, MAX_RECOVERY_ATTEMPTS + 1):
            self.recovery_attempts = attempt
            listed = self.handles.list_ids()
            try:
                pointers = {checkpoint_id: self.handles.get(checkpoint_id) for checkpoint_id in listed}
            except PointerMissingError as exc:
                log.warning("concurrent modification while reading checkpoints of job %s (%s); retrying",
                            self.job_id, exc)
                continue
            if self.handles.list_ids() == listed:
                return pointers
            log.warning("concurrent modification while reading checkpoints of job %s; retrying", self.job_id)
        raise HighAvailabilityError(f"checkpoints of job {self.job_id!r} kept changing during "
                                    f"{MAX_RECOVERY_ATTEMPTS} recovery attempts")

    def _discardable(self, checkpoint_id: int, pointer: bytes) -> bool:
        """Whether recovery may drop an older checkpoint: never one of another run (or of an
        unknown one), which only its own run or `checkpoints gc` may delete."""
        if self.run_id is None:
            return True
        try:
            path, _ = decode_pointer(pointer, self.handles.describe(checkpoint_id))
            return run_of(self.storage.read_metadata(path)) == self.run_id
        except (ValueError, StorageError):
            return False

    def _load_verified(self, checkpoint_id: int, pointer: bytes) -> CompletedCheckpoint | None:
        where = self.handles.describe(checkpoint_id)
        try:
            path, checksum = decode_pointer(pointer, where)
        except ValueError as exc:
            log.warning("skipping checkpoint %d of job %s: %s", checkpoint_id, self.job_id, exc)
            return None
        try:
            completed = self.storage.read_metadata(path)
            if (completed.job_id, completed.checkpoint_id) != (self.job_id, checkpoint_id):
                raise CorruptCheckpointError(
                    f"checkpoint metadata {path} describes checkpoint {completed.checkpoint_id} of job "
                    f"{completed.job_id!r}, but {where} points at it", path)
            if compute_checksum(completed.to_json_bytes()) != checksum:
                raise CorruptCheckpointError(
                    f"checkpoint metadata {path} does not match the checksum in {where}", path)
            if not self.of_this_run(completed):
                return None
            verified: set[tuple[str, int, int | None, str]] = set()
            for handle in completed.state_handles():
                key = (handle.path, handle.offset, handle.length, handle.checksum)
                if key not in verified:
                    self.storage.read_task_file(handle)
                    verified.add(key)
        except CorruptCheckpointError as exc:
            log.warning("skipping checkpoint %d of job %s (pointer %s): %s (file %s)",
                        checkpoint_id, self.job_id, where, exc, exc.path)
            return None
        return completed

    def _remove_and_discard(self, checkpoint_id: int, checkpoint: CompletedCheckpoint | None) -> None:
        """Drop one checkpoint: pointer first, then the files no retained checkpoint references."""
        try:
            self.handles.remove(checkpoint_id)
        except HighAvailabilityError as exc:
            # Keep the files: the pointer may still name them.
            log.warning("could not remove %s: %s", self.handles.describe(checkpoint_id), exc)
            return
        keep = {p for c in self._checkpoints for p in c.referenced_paths()}

        def delete() -> None:
            try:
                discard_checkpoint_files(self.storage, self.job_id, checkpoint_id, checkpoint, keep)
            except StorageError as exc:
                log.warning("could not delete the files of checkpoint %d of job %s: %s",
                            checkpoint_id, self.job_id, exc)

        self._deletes.submit(delete)

    def flush(self) -> None:
        """Wait for the deletes handed to the discard executor."""
        self._deletes.flush()

    def shutdown(self) -> None:
        self.flush()

    def _quiet_delete(self, path: str) -> None:
        try:
            self.storage.delete_file(path)
        except StorageError as exc:
            log.warning("could not delete refused checkpoint metadata %s: %s", path, exc)

    def __repr__(self) -> str:
        ids = [c.checkpoint_id for c in self._checkpoints]
        return (f"DefaultCompletedCheckpointStore(job={self.job_id!r}, retained={self._retained}, "
                f"ids={ids}, handles={self.handles!r})")
