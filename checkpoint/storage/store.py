"""Completed-checkpoint stores (Flink's `CompletedCheckpointStore`).

Theory of operation
-------------------
The store is the coordinator's memory of what completed. `add_checkpoint` first makes the
checkpoint durable (its `_metadata` through `CheckpointStorage`), and only then counts it as
retained: if the write fails the store is unchanged and the `StorageError` propagates, so the
coordinator aborts that checkpoint with STORAGE_FAILURE. Once more than `retained` checkpoints are
kept, the oldest are dropped and their files deleted.

Deleting files obeys one rule: *no file reachable from a retained checkpoint is deleted*. A dropped
checkpoint's own directory (`chk-<id>/`) goes, except for files a retained checkpoint still
references; files it references elsewhere in the job directory go too unless still referenced;
files under `shared/` are deleted only when the store's `SharedStateRegistry` says no retained
checkpoint (and no task that may still reuse them) needs them. Cleanup failures are logged, not
raised: the new checkpoint is complete whether or not an old file could be deleted (the orphan
cleaner gets the rest).

*What* to delete is decided at once, under the caller's control; the deletes themselves may run
on an I/O executor (`discard_executor`, as Flink's `CheckpointsCleaner` does), so a completion is
not held up by them: the Ray coordinator's notifications waited ~11 ms per checkpoint for a
discard on a busy machine. `flush()` (and `shutdown()`, `recover()`) wait for them. Without an
executor (the simulator) they run inline, deterministically.

`recover()` rebuilds the store after a coordinator restart from the metadata in storage: newest
first, verifying the metadata and every state file it references; a corrupt or missing file is
skipped with a warning naming it, so recovery falls back to the previous checkpoint.

Runs: every `execute()` is a *run* with its own id (`new_run_id()`), and runs of a job share its
directory. A store given a `run_id` stamps it into each checkpoint's metadata
(`properties["run_id"]`) and `recover()` ignores checkpoints of other runs (and of none): a
coordinator that crashed before its run's first checkpoint must not resume a previous run. Only
`restore_from` starts a run from another run's checkpoint, because the user asked for it.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future

from checkpoint.completed import RUN_ID_PROPERTY, CompletedCheckpoint
from checkpoint.storage.layout import (
    CheckpointStorage,
    CorruptCheckpointError,
    MissingMetadataError,
    StorageError,
)
from state.registry import SharedStateRegistry
from vocabulary.handles import StateHandle

log = logging.getLogger(__name__)


def run_of(completed: CompletedCheckpoint) -> str | None:
    """The run that took `completed` (None: not recorded)."""
    return completed.run_id


class CompletedCheckpointStore(abc.ABC):
    """Keeps the latest `retained` completed checkpoints of one job.

    `run_id` (None: any): the run whose checkpoints it keeps; `add_checkpoint` stamps it into the
    metadata, `recover()` skips checkpoints of other runs.
    """

    run_id: str | None = None

    @property
    @abc.abstractmethod
    def retained(self) -> int:
        """How many completed checkpoints are kept."""

    @abc.abstractmethod
    def recover(self) -> list[CompletedCheckpoint]:
        """Reload the retained checkpoints from durable storage (oldest first) and return them."""

    @abc.abstractmethod
    def add_checkpoint(self, completed: CompletedCheckpoint) -> list[CompletedCheckpoint]:
        """Make `completed` durable and retain it.

        Returns:
            The older checkpoints dropped to stay within `retained` (their files are deleted).

        Raises:
            StorageError: it could not be made durable; the store is unchanged.
            ValueError: wrong job, or not newer than the latest retained checkpoint.
        """

    @abc.abstractmethod
    def get_all_checkpoints(self) -> list[CompletedCheckpoint]:
        """Retained checkpoints, oldest first."""

    @abc.abstractmethod
    def discard_all_checkpoints(self) -> None:
        """Forget every retained checkpoint and delete its files."""

    def get_latest_checkpoint(self) -> CompletedCheckpoint | None:
        checkpoints = self.get_all_checkpoints()
        return checkpoints[-1] if checkpoints else None

    @property
    def num_checkpoints(self) -> int:
        return len(self.get_all_checkpoints())

    @property
    def highest_checkpoint_id_seen(self) -> int:
        """The highest checkpoint id this store knows was ever used (0 if none), including
        ones found in storage but skipped as corrupt; new ids must be above it."""
        latest = self.get_latest_checkpoint()
        return latest.checkpoint_id if latest else 0

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release resources (the checkpoints stay in durable storage)."""

    def flush(self) -> None:  # noqa: B027 - optional hook
        """Wait for file deletes still running (stores with a discard executor)."""

    def job_finished(self) -> None:  # noqa: B027 - optional hook
        """The job ended: no task will reuse a piece of state any more, so what only a task's
        reuse kept alive (the registry's zombies) goes; the retained checkpoints stay."""

    def referenced_files(self) -> set[str]:
        """Every file a retained checkpoint needs: its `_metadata` and the files its handles name
        (what orphan cleanup must never delete)."""
        keep: set[str] = set()
        for checkpoint in self.get_all_checkpoints():
            if checkpoint.metadata_path:
                keep.add(checkpoint.metadata_path)
            keep.update(checkpoint.referenced_paths())
        return keep

    def stamp_run(self, completed: CompletedCheckpoint) -> None:
        """Record this store's run in the checkpoint's metadata (before it is written)."""
        if self.run_id is not None:
            completed.properties[RUN_ID_PROPERTY] = self.run_id

    def of_this_run(self, completed: CompletedCheckpoint) -> bool:
        """Whether `recover()` may keep `completed` (logged when not)."""
        if self.run_id is None or run_of(completed) == self.run_id:
            return True
        log.info("recovery of run %s of job %s ignores checkpoint %d of run %s", self.run_id,
                 completed.job_id, completed.checkpoint_id, run_of(completed))
        return False


class DiscardQueue:
    """Runs a store's file deletes: inline without an executor, else on it (one thread keeps
    them in order); `flush()` waits for those still running and logs any that failed."""

    def __init__(self, job_id: str, executor: Executor | None = None) -> None:
        self.job_id = job_id
        self._executor = executor
        self._running: list[Future[None]] = []

    def submit(self, job: Callable[[], None]) -> None:
        if self._executor is None:
            job()
            return
        self._running = [f for f in self._running if not f.done()]
        self._running.append(self._executor.submit(job))

    def flush(self) -> None:
        running, self._running = self._running, []
        for future in running:
            exc = future.exception()  # storage failures were logged by the job itself
            if exc is not None:
                log.error("deleting discarded checkpoint files of job %s failed", self.job_id, exc_info=exc)


def check_retained(retained: int) -> None:
    """Raise ValueError unless `retained` (how many completed checkpoints a store keeps) is an
    integer >= 1."""
    if not isinstance(retained, int) or isinstance(retained, bool) or retained < 1:
        raise ValueError(f"invalid retained={retained!r}: must be an integer >= 1")


class RetainingCheckpointStore(CompletedCheckpointStore):
    """What every store keeps in memory: its retained checkpoints (oldest first), the highest id
    it saw and the queue that deletes dropped checkpoints' files. A subclass adds how it makes a
    checkpoint durable.

    Raises:
        ValueError: `retained` is not an integer >= 1, or `job_id` is not a valid job id.
    """

    def __init__(self, storage: CheckpointStorage, job_id: str, retained: int,
                 discard_executor: Executor | None) -> None:
        check_retained(retained)
        storage.job_dir(job_id)  # validates the job id
        self.storage = storage
        self.job_id = job_id
        self._retained = retained
        self._checkpoints: list[CompletedCheckpoint] = []
        self._highest_seen = 0
        self._deletes = DiscardQueue(job_id, discard_executor)

    @property
    def retained(self) -> int:
        return self._retained

    def get_all_checkpoints(self) -> list[CompletedCheckpoint]:
        return list(self._checkpoints)

    @property
    def highest_checkpoint_id_seen(self) -> int:
        return max(self._highest_seen, super().highest_checkpoint_id_seen)


class StandaloneCompletedCheckpointStore(RetainingCheckpointStore):
    """A store whose memory is one process, whose durability is `CheckpointStorage`.

    Args:
        storage: where metadata (and the checkpoints' state files) live.
        job_id: the job whose checkpoints it keeps.
        retained: how many completed checkpoints to keep (>= 1).
        discard_executor: runs the deletes of dropped checkpoints' files (one thread keeps them in
            order); None: inline.
        run_id: the run whose checkpoints it keeps (None: any; see the module docstring).
    """

    def __init__(self, storage: CheckpointStorage, job_id: str, retained: int = 1,
                 discard_executor: Executor | None = None, *, run_id: str | None = None) -> None:
        super().__init__(storage, job_id, retained, discard_executor)
        #: reference counts of shared (incremental) state files; rebuilt by `recover`
        self.registry = SharedStateRegistry()
        self.run_id = run_id

    def add_checkpoint(self, completed: CompletedCheckpoint) -> list[CompletedCheckpoint]:
        if completed.job_id != self.job_id:
            raise ValueError(f"checkpoint {completed.checkpoint_id} of job {completed.job_id!r} "
                             f"added to the store of job {self.job_id!r}")
        latest = self.get_latest_checkpoint()
        if latest is not None and completed.checkpoint_id <= latest.checkpoint_id:
            raise ValueError(
                f"checkpoint {completed.checkpoint_id} is not newer than the latest retained "
                f"checkpoint {latest.checkpoint_id}"
            )
        self.stamp_run(completed)
        replaced = self.registry.register_checkpoint(completed.checkpoint_id, completed.state_handles())
        if replaced:
            _replace_handles(completed, replaced)
        try:
            completed.metadata_path = self.storage.write_metadata(completed)
        except BaseException:
            self.registry.release_checkpoint(completed.checkpoint_id)
            raise
        self._checkpoints.append(completed)
        self._highest_seen = max(self._highest_seen, completed.checkpoint_id)
        dropped = self._checkpoints[: -self._retained]
        del self._checkpoints[: -self._retained]
        for old in dropped:
            self._discard(old)
        self._collect_shared()
        return dropped

    def discard_all_checkpoints(self) -> None:
        checkpoints, self._checkpoints = self._checkpoints, []
        for old in checkpoints:
            self._discard(old)
        self._collect_shared(ignore_horizon=True)
        self.flush()

    def job_finished(self) -> None:
        # a restored job reuses only segments of the checkpoint it restores, which it references
        self._collect_shared(ignore_horizon=True)
        self.flush()

    def recover(self) -> list[CompletedCheckpoint]:
        """Rebuild from storage: the newest `retained` checkpoints of this run whose metadata and
        state files verify; older valid ones are discarded, corrupt ones are skipped (and left for
        inspection), other runs' are left alone.

        Raises:
            StorageError: storage could not be read (not corruption: that is skipped).
        """
        self.flush()  # a discard still running would look like corruption
        ids = self.storage.list_checkpoint_ids(self.job_id)
        self._highest_seen = max([self._highest_seen, *ids])
        valid: list[CompletedCheckpoint] = []
        for checkpoint_id in reversed(ids):
            completed = self._load_verified(checkpoint_id)
            if completed is not None:
                valid.append(completed)
        valid.reverse()
        # reference counts are rebuilt from what storage says completed (after a coordinator failover)
        self.registry.rebuild((c.checkpoint_id, list(c.state_handles()), ()) for c in valid)
        self._checkpoints = valid[-self._retained :]
        for old in valid[: -self._retained]:
            self._discard(old)
        self._collect_shared()
        if self._checkpoints:
            log.info("recovered checkpoints %s of job %s",
                     [c.checkpoint_id for c in self._checkpoints], self.job_id)
        return list(self._checkpoints)

    def _load_verified(self, checkpoint_id: int) -> CompletedCheckpoint | None:
        path = self.storage.metadata_path(self.job_id, checkpoint_id)
        try:
            completed = self.storage.read_metadata(path)
            if completed.job_id != self.job_id:
                raise CorruptCheckpointError(
                    f"checkpoint metadata {path} belongs to job {completed.job_id!r}", path
                )
            if not self.of_this_run(completed):
                return None
            verified: set[tuple[str, int, int | None, str]] = set()
            for handle in completed.state_handles():
                key = (handle.path, handle.offset, handle.length, handle.checksum)
                if key not in verified:
                    self.storage.read_task_file(handle)
                    verified.add(key)
        except CorruptCheckpointError as exc:
            # a checkpoint that never completed has no metadata: of this run or of any earlier one
            # (a restore names those it skips itself, `checkpoint.io.tools.load_checkpoint`)
            level = logging.INFO if isinstance(exc, MissingMetadataError) else logging.WARNING
            log.log(level, "skipping checkpoint %d of job %s: %s (file %s)", checkpoint_id, self.job_id, exc, exc.path)
            return None
        return completed

    def flush(self) -> None:
        """Wait for the deletes handed to the discard executor."""
        self._deletes.flush()

    def shutdown(self) -> None:
        self.flush()

    def referenced_files(self) -> set[str]:
        """The retained checkpoints' files, and every shared file the registry still counts live
        (a segment a task may reuse although no retained checkpoint references it any more)."""
        return super().referenced_files() | set(self.registry.live_files())

    def _collect_shared(self, *, ignore_horizon: bool = False) -> None:
        """Delete the shared files the registry released (after a whole completion or drop)."""
        paths = list(self.registry.collect(ignore_horizon=ignore_horizon))
        if not paths:
            return

        def delete() -> None:
            for path in paths:
                try:
                    self.storage.delete_file(path)
                except StorageError as exc:
                    log.warning("could not delete shared state file %s of job %s: %s", path, self.job_id, exc)

        self._deletes.submit(delete)

    def _discard(self, checkpoint: CompletedCheckpoint) -> None:
        """Delete a dropped checkpoint's files that no retained checkpoint references."""
        self.registry.release_checkpoint(checkpoint.checkpoint_id)
        keep = {p for c in self._checkpoints for p in c.referenced_paths()}

        def delete() -> None:
            try:
                discard_checkpoint_files(self.storage, self.job_id, checkpoint.checkpoint_id, checkpoint, keep)
            except StorageError as exc:
                log.warning("could not delete the files of checkpoint %d of job %s: %s",
                            checkpoint.checkpoint_id, self.job_id, exc)

        self._deletes.submit(delete)

    def __repr__(self) -> str:
        ids = [c.checkpoint_id for c in self._checkpoints]
        return f"StandaloneCompletedCheckpointStore(job={self.job_id!r}, retained={self._retained}, ids={ids})"


def discard_checkpoint_files(storage: CheckpointStorage, job_id: str, checkpoint_id: int,
                             checkpoint: CompletedCheckpoint | None, keep: set[str]) -> None:
    """Delete a dropped checkpoint's files that no retained checkpoint references (`keep`): its
    own `chk-<id>/`, and files it references elsewhere in the job directory — never under
    `shared/`, which the shared-state registry owns. Used by every completed-checkpoint store.

    Raises:
        StorageError: a delete failed (the caller logs it; nothing else depends on it).
    """
    storage.discard_checkpoint(job_id, checkpoint_id, keep=keep)
    if checkpoint is None:
        return
    job_prefix = storage.job_dir(job_id) + "/"
    skip = (storage.checkpoint_dir(job_id, checkpoint_id) + "/", storage.shared_dir(job_id) + "/")
    for path in checkpoint.referenced_paths():
        if path.startswith(job_prefix) and not path.startswith(skip) and path not in keep:
            storage.delete_file(path)


def _replace_handles(completed: CompletedCheckpoint, replaced: dict[StateHandle, StateHandle]) -> None:
    """Point a checkpoint's handles at the copies the registry registered first."""
    for task, ack in completed.acks.items():
        handles = {kind: tuple(replaced.get(h, h) for h in group) for kind, group in ack.handles.items()}
        if handles != ack.handles:
            completed.acks[task] = dataclasses.replace(ack, handles=handles)
