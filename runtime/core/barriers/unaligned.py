"""`UnalignedBarrierHandler`: exactly-once without alignment (Flink FLIP-76).

Theory of operation
-------------------
Barriers overtake in-flight data: the gate hands every barrier to this handler the moment it
arrives (`handles_on_arrival`), ahead of the buffers queued before it. The first barrier of a
checkpoint triggers it at once; the task snapshots its state without having seen the queued
buffers, so those buffers become part of the snapshot as *input channel state*:

* the triggering channel: its queued buffers (they arrived before the barrier);
* every other open channel: its queued buffers at the trigger, plus each buffer that arrives
  before that channel's barrier.

Each channel's state is reported once, when its barrier arrives or it ends, and
`finish_input_channel_state` follows when every open channel delivered the barrier. The buffers
are still delivered to the task as usual; the channel state is what a restore replays.
Cancellation markers and end-of-partition stay in channel order. The event rules (subsumption,
cancellation, duplicates) are shared with the aligner in `states.py`.

A forced-aligned barrier (`options.forced_aligned`: the job's final checkpoint) is aligned as by
`BarrierAligner`, with no timeout: it waits in channel order, blocks its channel, and the task
snapshots once every open channel delivered it, with no channel state. Nothing else blocks.
"""

from __future__ import annotations

from runtime.core.barriers.aligner import BarrierAligner
from runtime.core.barriers.handler import CheckpointListener
from runtime.core.barriers.states import BarrierHandlerState, CollectingChannelState
from runtime.records.messages import Buffer, CheckpointBarrier
from vocabulary.ports import Clock, Timers

__all__ = ["UnalignedBarrierHandler"]


class UnalignedBarrierHandler(BarrierAligner):
    """Unaligned exactly-once checkpoints: trigger on the first barrier, record channel state
    (a forced-aligned barrier aligns, as `BarrierAligner` with no timeout or held-bytes limit).

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

    def handles_on_arrival(self, event: object) -> bool:
        if not isinstance(event, CheckpointBarrier):
            return False
        return not event.options.forced_aligned or super().handles_on_arrival(event)

    # -- Controller --------------------------------------------------------------------------

    def start(self, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        if barrier.options.forced_aligned:
            return super().start(channel, barrier)
        self.trigger(barrier, unaligned=True)
        # the barrier overtook everything still queued on its own channel
        self.add_channel_state(barrier.id, channel, self._gate.queued_buffers(channel))
        return CollectingChannelState.begin(self, barrier, frozenset({channel}))

    def queued_before_barrier(self, channel: int, checkpoint_id: int) -> tuple[list[Buffer], bool]:
        # only a forced-aligned barrier is ever queued, and such a checkpoint never records
        # channel state, so every queued buffer counts
        return self._gate.queued_buffers(channel), False

    def _repr_extra(self) -> str:
        return f", state={self._state!r}"
