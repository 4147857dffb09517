"""`coordinator_state`: the completed-checkpoint store and id counter a coordinator starts with.

Every coordinator of a run — the first, a standalone replacement after a crash, a contender that
may be promoted — gets them the same way on every executor (the simulator in-process, Ray in
the coordinator actor): with high availability, the HA services' store (fenced by the
contender's leadership) and their shared counter; without, a store on the checkpoint storage
and the counter persisted beside it, recovered (a replacement finds what its predecessor
completed). Either way the counter is resumed by the one rule (`resume_checkpoint_ids`); a
promoted contender recovers its store and resumes again when it leads. An HA store's failures
abort the checkpoint being registered (`HighAvailabilityStore`), as a storage failure does.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

from checkpoint.ids import StorageCheckpointIDCounter
from checkpoint.storage.errors import HighAvailabilityError
from checkpoint.storage.layout import StorageError
from checkpoint.storage.store import StandaloneCompletedCheckpointStore
from runtime.jobmaster.coordination.coordinators import resume_checkpoint_ids


def coordinator_state(storage: Any, job_id: str, retained: int, run_id: str | None, first_checkpoint_id: int, *,
                      ha: Any = None, election: Any = None,
                      discard_executor: Executor | None = None) -> tuple[Any, Any]:
    """`(store, id_counter)` for a new coordinator of job `job_id` (see the module docstring).

    Args:
        storage: the job's `CheckpointStorage`.
        retained: completed checkpoints to keep.
        run_id: the run whose checkpoints the store recovers (other runs' are left alone).
        first_checkpoint_id: `JobMaster.first_checkpoint_id` (after a restored checkpoint's).
        ha: the HA services (`CheckpointRecoveryFactory`); None: standalone.
        election: this contender's leader election (fences the HA store's writes).
        discard_executor: runs the deletes of dropped checkpoints' files (None: inline).
    """
    if ha is not None:
        store = ha.create_store(job_id, storage, retained, leader_election=election,
                                discard_executor=discard_executor)
        store.run_id = run_id  # recovery (once promoted) ignores other runs' checkpoints
        store = HighAvailabilityStore(store)
        id_counter = ha.create_id_counter(job_id)  # shared: ids keep increasing across leaders
    else:
        store = StandaloneCompletedCheckpointStore(storage, job_id, retained, discard_executor=discard_executor,
                                                   run_id=run_id)
        store.recover()  # a replacement finds what its predecessor completed
        id_counter = StorageCheckpointIDCounter(storage, job_id)
    id_counter.start()  # continues from the id a predecessor persisted or shared
    resume_checkpoint_ids(id_counter, store, storage, job_id, first_checkpoint_id)
    return store, id_counter


def promoted(store: Any, id_counter: Any, storage: Any, job_id: str, first_checkpoint_id: int) -> int | None:
    """A contender leads now: recover the HA store and resume the counter; the newest completed
    checkpoint it recovered (None: none)."""
    store.recover()
    resume_checkpoint_ids(id_counter, store, storage, job_id, first_checkpoint_id)
    latest = store.get_latest_checkpoint()
    return latest.checkpoint_id if latest is not None else None


class HighAvailabilityStore:
    """An HA store with its failures (not leading, ZooKeeper unreachable) turned into the
    `StorageError` the coordinator aborts a checkpoint for (STORAGE_FAILURE) instead of raising."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def add_checkpoint(self, completed: Any) -> Any:
        try:
            return self._store.add_checkpoint(completed)
        except HighAvailabilityError as exc:
            raise StorageError(f"registering checkpoint {completed.checkpoint_id} in ZooKeeper failed: {exc}") from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
