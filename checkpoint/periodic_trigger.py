"""Periodic checkpoint triggers: a chain of one-shot timers `interval` apart (Flink's checkpoint
scheduler).

A tick refused because `max_concurrent` checkpoints are pending waits and runs as soon as a
pending checkpoint ends (`slot_freed`, like Flink's queued request); one refused by `min_pause`
moves to the earliest allowed moment after the last completion; one whose id the counter could
not persist tries again at the next interval; any other refusal (the job finished, the
coordinator shut down) ends the chain. The coordinator decides whether a trigger goes ahead;
this only decides when to ask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from vocabulary.options import CheckpointConfig
from vocabulary.reasons import CheckpointFailureReason

if TYPE_CHECKING:
    from vocabulary.ports import Cancellable, Clock, Timers


class PeriodicTriggerController(Protocol):
    """What `PeriodicTrigger` asks of its coordinator."""

    @property
    def last_completion_time(self) -> float | None: ...

    def trigger_periodic(self, now: float) -> int | CheckpointFailureReason:
        """Trigger a checkpoint at `now` (`max_concurrent` and `min_pause` apply)."""
        ...


class PeriodicTrigger:
    """The periodic triggers of one coordinator.

    Args:
        controller: its coordinator.
        clock, timers: the coordinator's.
        config: `interval`, `min_pause` and `max_concurrent`.
    """

    def __init__(self, controller: PeriodicTriggerController, clock: Clock, timers: Timers,
                 config: CheckpointConfig) -> None:
        self._controller = controller
        self._clock = clock
        self._timers = timers
        self._config = config
        self.is_periodic = False
        self._timer: Cancellable | None = None
        self._waiting_for_slot = False

    def begin(self) -> None:
        """The first trigger one `interval` from now."""
        assert self._config.interval is not None
        self.is_periodic = True
        self._schedule(self._config.interval)

    def stop(self) -> None:
        self.is_periodic = False
        self._waiting_for_slot = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def slot_freed(self, num_pending: int) -> None:
        """A pending checkpoint ended (`num_pending` remain): run a tick that waited for a slot."""
        if self._waiting_for_slot and self.is_periodic and num_pending < self._config.max_concurrent:
            self._waiting_for_slot = False
            self._schedule(0.0)

    def _schedule(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timers.schedule(max(0.0, delay), self._on_tick)

    def _on_tick(self) -> None:
        self._timer = None
        if not self.is_periodic:
            return
        config = self._config
        now = self._clock.now()
        result = self._controller.trigger_periodic(now)
        if result is CheckpointFailureReason.TOO_MANY_CHECKPOINTS:
            self._waiting_for_slot = True  # resumed by `slot_freed`
        elif result is CheckpointFailureReason.MIN_PAUSE:
            last_completion_time = self._controller.last_completion_time
            assert last_completion_time is not None
            self._schedule(last_completion_time + config.min_pause - now)
        elif result is CheckpointFailureReason.STORAGE_FAILURE and self.is_periodic:
            assert config.interval is not None
            self._schedule(config.interval)  # the trigger failed: try at the next interval
        elif isinstance(result, CheckpointFailureReason):
            self.stop()  # job finished or coordinator shut down
        elif self.is_periodic:  # (a synchronous final completion may have stopped ticking)
            assert config.interval is not None
            self._schedule(config.interval)
