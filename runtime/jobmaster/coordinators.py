"""`CoordinatorSuccession`: the run's checkpoint coordinators, one after the other.

A coordinator's process may die (`CoordinatorCrash`, `CoordinatorCrashBeforeNotify`, a lost
node); a new one (with high availability: the standby, once elected and promoted) recovers the
completed checkpoints from durable storage and takes over. What the dead ones did lives on here,
the same on every executor: their checkpoint statistics (so the result lists every checkpoint of
the run), when each died, when each successor was promoted and which checkpoint it recovered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtime.core.ports import Clock


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
