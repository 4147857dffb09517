"""`CoordinatorSuccession`: the run's checkpoint coordinators, one after the other.

A coordinator's process may die (`CoordinatorCrash`, `CoordinatorCrashBeforeNotify`, a lost
node); a new one (with high availability: the standby, once elected and promoted) recovers the
completed checkpoints from durable storage and takes over. What the dead ones did lives on here,
the same on every executor: their checkpoint statistics (so the result lists every checkpoint of
the run), when each died, when each successor was promoted and which checkpoint it recovered.

`resume_checkpoint_ids` is the one rule by which every coordinator of a run (the first, a
standalone replacement, a promoted standby) sets its id counter, so no id is ever used twice
(the invariant `checkpoint-ids-increase`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vocabulary.ports import Clock


def resume_checkpoint_ids(id_counter: Any, store: Any, storage: Any, job_id: str, first_checkpoint_id: int) -> None:
    """Advance `id_counter` (a `CheckpointIDCounter`) so the next id is above every id that may
    have been used: the counter's own (persisted in storage, or shared in ZooKeeper); every
    checkpoint `store` (a `CompletedCheckpointStore`, recovered) saw — its newest retained one and
    newer ones it skipped as corrupt; every `chk-<id>` directory of `job_id` in `storage` (an
    earlier run's in the same directory too: a fresh HA counter would overwrite them); and the
    restored checkpoint's (`first_checkpoint_id`: `JobMaster.first_checkpoint_id`). Never lowers
    it, and writes nothing when it is high enough already (so a shared counter another contender
    advances is not set back)."""
    used = max(store.highest_checkpoint_id_seen, max(storage.list_checkpoint_ids(job_id), default=0))
    floor = max(used + 1, first_checkpoint_id)
    if id_counter.get() < floor:
        id_counter.set_count(floor)


class CoordinatorSuccession:
    """What the run's coordinators did before they died (see the module docstring).

    Args:
        clock: the executor's time (virtual or wall seconds).
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        #: the checkpoint statistics of the coordinators that died, in order
        self.history: list[Any] = []
        #: when each coordinator died of an injected fault
        self.crash_times: list[float] = []
        #: when each standby was promoted to leader (high availability)
        self.promotion_times: list[float] = []
        #: the newest completed checkpoint id each promoted leader recovered (None: none)
        self.recovered_checkpoints: list[int | None] = []

    def crashed(self, history: Iterable[Any]) -> None:
        """The coordinator died now; `history`: its checkpoint statistics."""
        self.history.extend(history)
        self.crash_times.append(self.clock.now())

    def promoted(self, recovered_checkpoint: int | None, at: float | None = None) -> None:
        """A standby was promoted to leader (`at`; None: now) and recovered `recovered_checkpoint`."""
        self.promotion_times.append(self.clock.now() if at is None else at)
        self.recovered_checkpoints.append(recovered_checkpoint)

    def checkpoints(self, current: Iterable[Any]) -> list[Any]:
        """Every checkpoint of the run: the dead coordinators', then `current` (the live one's)."""
        return [*self.history, *current]
