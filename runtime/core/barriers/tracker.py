"""`BarrierTracker`: at-least-once checkpoints (Flink's `CheckpointBarrierTracker`).

Theory of operation
-------------------
The tracker never blocks a channel. It counts, per checkpoint, which channels delivered its
barrier; data after a barrier keeps flowing, so a snapshot may include records after the barrier
on some channels, and a restore may replay them: at-least-once.

* Pending checkpoints are kept in ascending id order, at most `MAX_CHECKPOINTS_TO_TRACK`; past
  that the oldest is dropped and aborted (SUBSUMED) so the task can decline it.
* A barrier for an id that is not pending starts tracking only if it is newer than every id
  seen so far; otherwise it belongs to a checkpoint already triggered, aborted or dropped.
* A pending checkpoint is complete when every open channel delivered its barrier. Completing
  one triggers it and aborts every older pending one (SUBSUMED): the coordinator will never
  complete them, since a newer one is about to.
* A cancel marker aborts (CANCELLED) its checkpoint and every older pending one; a cancel marker
  newer than any id seen also makes later barriers of that id ignored.
* End of partition removes a channel from the open set, which may complete pending ones; they
  trigger in ascending order.
* One channel: every barrier newer than the latest triggers at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from runtime.core.barriers.common import HandlerCore
from runtime.core.barriers.handler import BarrierProtocolError, CheckpointListener
from runtime.records.messages import CancelCheckpointMarker, CheckpointBarrier, EndOfPartition
from vocabulary.ports import Clock, Timers
from vocabulary.reasons import CheckpointFailureReason

__all__ = ["MAX_CHECKPOINTS_TO_TRACK", "BarrierTracker"]

#: the bound on checkpoints tracked at once (Flink's constant)
MAX_CHECKPOINTS_TO_TRACK = 50


@dataclass(slots=True)
class _PendingCheckpoint:
    barrier: CheckpointBarrier
    #: channels that delivered this checkpoint's barrier
    channels: set[int] = field(default_factory=set)
    #: clock time of its first barrier
    first_at: float = 0.0

    @property
    def id(self) -> int:
        return self.barrier.id


class BarrierTracker(HandlerCore):
    """At-least-once barrier tracking; never blocks.

    Takes `(num_channels, listener, *, clock=None, timers=None)` like the other handlers.
    """

    def __init__(
        self,
        num_channels: int,
        listener: CheckpointListener,
        *,
        clock: Clock | None = None,
        timers: Timers | None = None,
    ) -> None:
        super().__init__(num_channels, listener, clock=clock, timers=timers)
        #: ascending by id; bounded by MAX_CHECKPOINTS_TO_TRACK
        self._pending: deque[_PendingCheckpoint] = deque()

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        self.check_open(channel, f"barrier {barrier.id}")
        if self.num_channels == 1:
            self.num_barriers_received += 1
            if barrier.id > self.latest_checkpoint_id:
                self.trigger(barrier, unaligned=False)
            return
        pending = self._find(barrier.id)
        if pending is not None:
            if channel in pending.channels:
                raise BarrierProtocolError(f"second barrier of checkpoint {barrier.id} on channel {channel}")
            pending.channels.add(channel)
            self.num_barriers_received += 1
        elif barrier.id > self.latest_checkpoint_id:
            self.latest_checkpoint_id = barrier.id
            self._pending.append(_PendingCheckpoint(barrier, {channel}, self.clock.now()))
            if len(self._pending) > MAX_CHECKPOINTS_TO_TRACK:
                self.abort(self._pending.popleft().id, CheckpointFailureReason.SUBSUMED)
            self.num_barriers_received += 1
        else:
            self.num_barriers_received += 1
            return
        self._trigger_completed()

    def on_cancel(self, channel: int, marker: CancelCheckpointMarker) -> None:
        self.check_open(channel, f"cancel marker {marker.id}")
        cancelled = marker.id
        while self._pending and self._pending[0].id < cancelled:
            self.abort(self._pending.popleft().id, CheckpointFailureReason.CANCELLED)
        if self._pending and self._pending[0].id == cancelled:
            self._pending.popleft()
            self.abort(cancelled, CheckpointFailureReason.CANCELLED)
        elif cancelled > self.latest_checkpoint_id:
            self.abort(cancelled, CheckpointFailureReason.CANCELLED)

    def on_end_of_partition(self, channel: int, event: EndOfPartition) -> None:
        self.close_channel(channel)
        self._trigger_completed()

    def pending_checkpoint_id(self) -> int | None:
        """The oldest checkpoint still tracked."""
        return self._pending[0].id if self._pending else None

    @property
    def pending_checkpoint_ids(self) -> list[int]:
        return [p.id for p in self._pending]

    def _find(self, checkpoint_id: int) -> _PendingCheckpoint | None:
        for pending in self._pending:
            if pending.id == checkpoint_id:
                return pending
        return None

    def _trigger_completed(self) -> None:
        """Trigger every complete pending checkpoint, oldest first; older incomplete ones are
        aborted as SUBSUMED."""
        while True:
            index = next((i for i, p in enumerate(self._pending) if self.all_arrived(p.channels)), None)
            if index is None:
                return
            for _ in range(index):
                self.abort(self._pending.popleft().id, CheckpointFailureReason.SUBSUMED)
            pending = self._pending.popleft()
            self.trigger(pending.barrier, unaligned=False, first_barrier_at=pending.first_at)

    def _repr_extra(self) -> str:
        return f", tracking={self.pending_checkpoint_ids}"
