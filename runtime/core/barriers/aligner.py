"""`BarrierAligner`: exactly-once barrier alignment (Flink's `CheckpointBarrierAligner`).

Theory of operation
-------------------
On the first barrier of a checkpoint the aligner blocks that channel; the gate then holds
whatever arrives on it. Every further barrier of the checkpoint blocks its channel too. When every
open channel delivered the barrier (`received + closed == total`) the aligner triggers the
checkpoint and releases all channels; the gate hands the held data to the task before any new
input, so the snapshot contains exactly the records before the barrier on every channel. The
per-event rules (subsumption, cancellation, end of partition, duplicates) are in `states.py`.

Limits:

* `max_held_bytes`: the bytes the gate held back for this alignment; exceeding it aborts the
  checkpoint (ALIGNMENT_BUFFER_FULL) and releases the channels.
* `alignment_timeout` (or the barrier's `options.alignment_timeout`, which wins), measured from
  the barrier's timestamp as Flink does: if a barrier arrives already past it, or the timer fires
  while still aligning, the checkpoint is taken unaligned for this task. It triggers at once
  (`AlignmentStats(unaligned=True)`); held data is released (it is after the barrier, so it is
  not channel state); the channels that have not delivered the barrier yet become channel
  state until they do, and their barriers of this checkpoint may then overtake queued data
  (`handles_on_arrival`). Without `timers`, the timeout is only checked when a barrier arrives.
  A forced-aligned barrier (`options.forced_aligned`: the final checkpoint) never times out.

Not thread-safe: timer callbacks must run on the thread that drives the gate.
"""

from __future__ import annotations

from runtime.core.barriers.common import HandlerCore
from runtime.core.barriers.handler import CheckpointListener
from runtime.core.barriers.states import (
    WAITING,
    BarrierHandlerState,
    CollectingBarriers,
    CollectingChannelState,
)
from runtime.records.messages import Buffer, CancelCheckpointMarker, CheckpointBarrier, EndOfPartition
from vocabulary.ports import Cancellable, Clock, Timers

__all__ = ["BarrierAligner"]


class BarrierAligner(HandlerCore):
    """Exactly-once barrier alignment.

    Args:
        num_channels: input channels, >= 1 (one channel: every barrier triggers at once).
        listener: the task.
        clock: needed for alignment stats and for any alignment timeout.
        timers: lets the alignment timeout fire while no barrier arrives.
        max_held_bytes: abort the alignment once the gate held more than this many bytes.
        alignment_timeout: seconds after a barrier's timestamp at which the checkpoint turns
            unaligned (a barrier's own `options.alignment_timeout` takes precedence).

    Raises:
        ValueError: a negative limit, or `alignment_timeout` without a `clock`.
    """

    def __init__(
        self,
        num_channels: int,
        listener: CheckpointListener,
        *,
        clock: Clock | None = None,
        timers: Timers | None = None,
        max_held_bytes: int | None = None,
        alignment_timeout: float | None = None,
    ) -> None:
        super().__init__(num_channels, listener, clock=clock, timers=timers)
        if max_held_bytes is not None and (isinstance(max_held_bytes, bool) or max_held_bytes < 0):
            raise ValueError(f"BarrierAligner: max_held_bytes must be >= 0 or None, got {max_held_bytes!r}")
        if alignment_timeout is not None:
            if alignment_timeout < 0:
                raise ValueError(
                    f"BarrierAligner: alignment_timeout must be >= 0 seconds or None, got {alignment_timeout!r}"
                )
            if clock is None:
                raise ValueError("BarrierAligner: alignment_timeout needs a clock")
        self.max_held_bytes = max_held_bytes
        self.alignment_timeout = alignment_timeout
        self._state: BarrierHandlerState = WAITING
        self._blocked: set[int] = set()
        self._bytes_buffered = 0
        self._first_barrier_time = 0.0
        self._timer: Cancellable | None = None
        #: a barrier seen queued whose alignment timer runs before it reaches the head
        self._announced: CheckpointBarrier | None = None
        self.num_timeouts = 0

    # -- BarrierHandler ------------------------------------------------------------------

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

    def on_buffer_held(self, channel: int, buffer: Buffer) -> None:
        if not isinstance(self._state, CollectingBarriers):
            return
        self._bytes_buffered += buffer.size_bytes
        if self.max_held_bytes is not None and self._bytes_buffered > self.max_held_bytes:
            self._state = self._state.buffer_limit_exceeded(self)

    def on_barrier_announced(self, channel: int, barrier: CheckpointBarrier) -> None:
        """Start the alignment timer of a new checkpoint as soon as its barrier arrives, even
        while it is queued behind data (Flink's barrier announcement): under backpressure the
        barrier may take longer than the timeout to reach the head of its channel."""
        if (
            self._timer is None
            and self._state.checkpoint_id is None
            and barrier.id > self.latest_checkpoint_id
            and self._timeout_of(barrier) is not None
        ):
            self._first_barrier_time = self.clock.now()
            self._announced = barrier
            self._schedule_timeout(barrier)

    def is_blocked(self, channel: int) -> bool:
        return channel in self._blocked

    def handles_on_arrival(self, event: object) -> bool:
        return (
            isinstance(event, CheckpointBarrier)
            and self._state.handles_barriers_on_arrival
            and event.id == self._state.checkpoint_id
        )

    def pending_checkpoint_id(self) -> int | None:
        return self._state.checkpoint_id

    @property
    def state(self) -> BarrierHandlerState:
        return self._state

    @property
    def bytes_buffered(self) -> int:
        return self._bytes_buffered

    # -- Controller (called by the states) -------------------------------------------------

    def start(self, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        announced = self._announced is not None and self._announced.id == barrier.id
        if not announced:
            self._cancel_timer()
            self._first_barrier_time = self.clock.now()
        self._announced = None
        state = CollectingBarriers(barrier).barrier_received(self, channel, barrier)
        if isinstance(state, CollectingBarriers) and self._timer is None:
            self._schedule_timeout(barrier)
        return state

    def trigger_aligned(self, barrier: CheckpointBarrier) -> None:
        self.trigger(
            barrier,
            unaligned=False,
            alignment_time=self.clock.now() - self._first_barrier_time,
            bytes_buffered=self._bytes_buffered,
        )

    def trigger_unaligned(self, barrier: CheckpointBarrier) -> None:
        self.num_timeouts += 1
        self.trigger(
            barrier,
            unaligned=True,
            alignment_time=self.clock.now() - self._first_barrier_time,
            bytes_buffered=self._bytes_buffered,
        )

    def block(self, channel: int) -> None:
        self._blocked.add(channel)

    def end_alignment(self) -> None:
        self._blocked.clear()
        self._bytes_buffered = 0
        self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def queued_before_barrier(self, channel: int, checkpoint_id: int) -> tuple[list[Buffer], bool]:
        return self._gate.queued_before_barrier(channel, checkpoint_id)

    def is_timed_out(self, barrier: CheckpointBarrier) -> bool:
        timeout = self._timeout_of(barrier)
        return timeout is not None and self.clock.now() - barrier.timestamp >= timeout

    # -- timeout -----------------------------------------------------------------------------

    def _timeout_of(self, barrier: CheckpointBarrier) -> float | None:
        if barrier.options.forced_aligned:
            return None
        timeout = barrier.options.alignment_timeout
        if timeout is None:
            return self.alignment_timeout
        if not self.has_clock:
            raise ValueError(
                f"barrier {barrier.id} asks for alignment_timeout={timeout} but this BarrierAligner has no clock"
            )
        return timeout

    def _schedule_timeout(self, barrier: CheckpointBarrier) -> None:
        timeout = self._timeout_of(barrier)
        if timeout is None or self.timers is None:
            return
        delay = barrier.timestamp + timeout - self.clock.now()
        checkpoint_id = barrier.id
        self._timer = self.timers.schedule(delay, lambda: self._on_timeout(checkpoint_id))

    def _on_timeout(self, checkpoint_id: int) -> None:
        self._timer = None
        announced, self._announced = self._announced, None
        if (
            announced is not None
            and announced.id == checkpoint_id
            and self._state.checkpoint_id is None
            and checkpoint_id > self.latest_checkpoint_id
        ):
            # timed out before its first barrier reached the head of any channel: unaligned now,
            # every channel's data before the (queued or future) barrier is channel state
            self.latest_checkpoint_id = checkpoint_id
            self.trigger_unaligned(announced)
            self._state = CollectingChannelState.begin(self, announced, frozenset())
            return
        self._state = self._state.timed_out(self, checkpoint_id)

    def _repr_extra(self) -> str:
        return f", blocked={sorted(self._blocked)}, held_bytes={self._bytes_buffered}, state={self._state!r}"
