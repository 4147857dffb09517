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
Cancellation markers and end-of-partition stay in channel order. Nothing ever blocks. The event
rules (subsumption, cancellation, duplicates) are shared with the aligner in `states.py`.
"""

from __future__ import annotations

from runtime.core.barriers.common import HandlerCore
from runtime.core.barriers.handler import CheckpointListener
from runtime.core.barriers.states import WAITING, BarrierHandlerState, CollectingChannelState
from runtime.core.messages import Buffer, CancelCheckpointMarker, CheckpointBarrier, EndOfPartition
from runtime.core.ports import Clock, Timers

__all__ = ["UnalignedBarrierHandler"]


class UnalignedBarrierHandler(HandlerCore):
    """Unaligned exactly-once checkpoints: trigger on the first barrier, record channel state.

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
        self._state: BarrierHandlerState = WAITING

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        self.check_open(channel, f"barrier {barrier.id}")
        self._state = self._state.barrier_received(self, channel, barrier)
        self.num_barriers_received += 1

    def on_cancel(self, channel: int, marker: CancelCheckpointMarker) -> None:
        self.check_open(channel, f"cancel marker {marker.id}")
        self._state = self._state.cancel_received(self, marker.id)

    def on_end_of_partition(self, channel: int, event: EndOfPartition) -> None:
        self.close_channel(channel)
        self._state = self._state.end_of_partition(self, channel)

    def on_buffer_arrived(self, channel: int, buffer: Buffer) -> None:
        self._state.buffer_arrived(channel, buffer)

    def handles_on_arrival(self, event: object) -> bool:
        return isinstance(event, CheckpointBarrier)

    def pending_checkpoint_id(self) -> int | None:
        return self._state.checkpoint_id

    @property
    def state(self) -> BarrierHandlerState:
        return self._state

    # -- Controller --------------------------------------------------------------------------

    def start(self, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        self.trigger_unaligned(barrier)
        # the barrier overtook everything still queued on its own channel
        self.add_channel_state(barrier.id, channel, self._gate.queued_buffers(channel))
        return CollectingChannelState.begin(self, barrier, frozenset({channel}))

    def trigger_unaligned(self, barrier: CheckpointBarrier) -> None:
        self.trigger(barrier, unaligned=True)

    def trigger_aligned(self, barrier: CheckpointBarrier) -> None:
        raise AssertionError("the unaligned handler never aligns")

    def block(self, channel: int) -> None:
        raise AssertionError("the unaligned handler never blocks")

    def end_alignment(self) -> None:
        pass

    def is_timed_out(self, barrier: CheckpointBarrier) -> bool:
        return False

    def queued_before_barrier(self, channel: int, checkpoint_id: int) -> tuple[list[Buffer], bool]:
        # barriers are never queued in front of this handler, so every queued buffer counts
        return self._gate.queued_buffers(channel), False

    def _repr_extra(self) -> str:
        return f", state={self._state!r}"
