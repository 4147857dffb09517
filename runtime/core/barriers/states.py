"""The barrier-handling states of one-checkpoint-at-a-time handlers (aligner, unaligned).

Theory of operation
-------------------
Rule 1 (after h11's `_state.py`): every rule about which checkpoint a barrier, a cancellation
marker or an end-of-partition belongs to, and what happens next, lives in this file. Handlers
(`aligner.py`, `unaligned.py`) only implement the narrow `Controller` the states talk to, in the
manner of Flink's `SingleCheckpointBarrierHandler` and its `BarrierHandlerState` classes.

Each event method returns the next state; a state never changes after it raised, so an illegal
event (a second barrier of one checkpoint on one channel) leaves the handler as it was.

States::

    WaitingForFirstBarrier ──barrier > latest──▶ controller.start()
        │                                           │ aligner: CollectingBarriers
        │                                           │ unaligned: trigger, CollectingChannelState
    CollectingBarriers (aligned; channels that delivered the barrier are blocked)
        ├─ all open channels delivered ─▶ trigger, release ─▶ WaitingForFirstBarrier
        ├─ timeout ─▶ trigger unaligned, release ─▶ CollectingChannelState
        └─ held bytes over the limit ─▶ abort ALIGNMENT_BUFFER_FULL, release ─▶ Waiting…
    CollectingChannelState (triggered; recording pre-barrier buffers of the other channels)
        └─ all open channels delivered ─▶ finish_input_channel_state ─▶ WaitingForFirstBarrier

Shared by every state (the only place these rules are written):

* barrier id == current: the state's own `_same_barrier` (duplicate on a channel is an error);
* barrier id <= latest started/cancelled/triggered id: ignored (older or already settled);
* barrier id > latest: abort the current one as SUBSUMED, then `controller.start()` the new one;
* cancel marker id >= current: abort current (and a newer id too) as CANCELLED; a cancel marker
  newer than anything seen aborts that id; afterwards barriers of ids <= it are ignored.

Channel state (unaligned): for every channel that has not delivered the barrier when the
checkpoint triggers, the buffers queued before its barrier at that moment plus every buffer that
arrives before its barrier are reported through `add_input_channel_state`, once per channel,
when the channel's barrier is received or the channel ends. A channel whose barrier is already
queued in the gate (aligned checkpoint that timed out) is complete at once; it is "awaiting"
until the gate dequeues that barrier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from runtime.core.barriers.handler import BarrierProtocolError
from runtime.records.messages import Buffer, CheckpointBarrier
from vocabulary.reasons import CheckpointFailureReason

__all__ = [
    "WAITING",
    "BarrierHandlerState",
    "CollectingBarriers",
    "CollectingChannelState",
    "Controller",
    "WaitingForFirstBarrier",
]

SUBSUMED = CheckpointFailureReason.SUBSUMED
CANCELLED = CheckpointFailureReason.CANCELLED


class Controller(Protocol):
    """What a state may do to its handler (Flink's `BarrierHandlerState.Controller`)."""

    num_channels: int
    closed: set[int]
    latest_checkpoint_id: int

    def all_arrived(self, received: frozenset[int] | set[int]) -> bool: ...

    def start(self, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        """First barrier of a checkpoint newer than any seen: the handler's own policy."""
        ...

    def trigger_aligned(self, barrier: CheckpointBarrier) -> None: ...

    def trigger_unaligned(self, barrier: CheckpointBarrier) -> None: ...

    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None: ...

    def block(self, channel: int) -> None: ...

    def end_alignment(self) -> None:
        """Release every blocked channel, cancel the alignment timer, forget held bytes."""
        ...

    def is_timed_out(self, barrier: CheckpointBarrier) -> bool: ...

    def queued_before_barrier(self, channel: int, checkpoint_id: int) -> tuple[list[Buffer], bool]: ...

    def add_channel_state(self, checkpoint_id: int, channel: int, buffers: Sequence[Buffer]) -> None: ...

    def finish_channel_state(self, checkpoint_id: int) -> None: ...


class BarrierHandlerState:
    """One state; the event methods here are final, subclasses override the `_` hooks."""

    __slots__ = ()

    #: the checkpoint in progress (None while waiting)
    checkpoint_id: int | None = None

    def barrier_received(self, ctl: Controller, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        if barrier.id == self.checkpoint_id:
            return self._same_barrier(ctl, channel, barrier)
        if barrier.id <= ctl.latest_checkpoint_id:
            return self  # older, or already triggered / aborted / cancelled
        if self.checkpoint_id is not None:
            self._abandon(ctl)
            ctl.abort(self.checkpoint_id, SUBSUMED)
        ctl.latest_checkpoint_id = barrier.id
        return ctl.start(channel, barrier)

    def cancel_received(self, ctl: Controller, checkpoint_id: int) -> BarrierHandlerState:
        current = self.checkpoint_id
        if current is not None and checkpoint_id >= current:
            self._abandon(ctl)
            ctl.abort(current, CANCELLED)
            if checkpoint_id > current:
                ctl.abort(checkpoint_id, CANCELLED)
        elif current is None and checkpoint_id > ctl.latest_checkpoint_id:
            ctl.abort(checkpoint_id, CANCELLED)
        else:
            return self
        ctl.latest_checkpoint_id = max(ctl.latest_checkpoint_id, checkpoint_id)
        return WAITING

    def end_of_partition(self, ctl: Controller, channel: int) -> BarrierHandlerState:
        """`channel` was just added to `ctl.closed`."""
        return self

    def buffer_arrived(self, channel: int, buffer: Buffer) -> None:  # noqa: B027
        """A buffer was pushed into the gate (recorded as channel state when it matters)."""

    def buffer_limit_exceeded(self, ctl: Controller) -> BarrierHandlerState:
        return self

    def timed_out(self, ctl: Controller, checkpoint_id: int) -> BarrierHandlerState:
        return self

    @property
    def handles_barriers_on_arrival(self) -> bool:
        """Barriers of the current checkpoint may overtake queued data."""
        return False

    def _same_barrier(self, ctl: Controller, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        raise AssertionError(f"{type(self).__name__} has no current checkpoint")

    def _abandon(self, ctl: Controller) -> None:  # noqa: B027
        """Leave this checkpoint unfinished (the caller reports the abort)."""


class WaitingForFirstBarrier(BarrierHandlerState):
    __slots__ = ()

    def __repr__(self) -> str:
        return "WaitingForFirstBarrier()"


WAITING = WaitingForFirstBarrier()


class CollectingBarriers(BarrierHandlerState):
    """Aligned: `received` channels delivered `barrier` and are blocked. Immutable."""

    __slots__ = ("barrier", "checkpoint_id", "received")

    def __init__(self, barrier: CheckpointBarrier, received: frozenset[int] = frozenset()) -> None:
        self.barrier = barrier
        self.checkpoint_id = barrier.id
        self.received = received

    def _same_barrier(self, ctl: Controller, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        if channel in self.received:
            raise BarrierProtocolError(f"second barrier of checkpoint {barrier.id} on channel {channel}")
        return CollectingBarriers(self.barrier, self.received | {channel})._progress(ctl, channel)

    def _progress(self, ctl: Controller, channel: int | None) -> BarrierHandlerState:
        if ctl.all_arrived(self.received):
            ctl.trigger_aligned(self.barrier)
            ctl.end_alignment()
            return WAITING
        if ctl.is_timed_out(self.barrier):
            return self._to_unaligned(ctl)
        if channel is not None:
            ctl.block(channel)
        return self

    def end_of_partition(self, ctl: Controller, channel: int) -> BarrierHandlerState:
        return self._progress(ctl, None)

    def buffer_limit_exceeded(self, ctl: Controller) -> BarrierHandlerState:
        ctl.end_alignment()
        ctl.abort(self.checkpoint_id, CheckpointFailureReason.ALIGNMENT_BUFFER_FULL)
        return WAITING

    def timed_out(self, ctl: Controller, checkpoint_id: int) -> BarrierHandlerState:
        return self._to_unaligned(ctl) if checkpoint_id == self.checkpoint_id else self

    def _to_unaligned(self, ctl: Controller) -> BarrierHandlerState:
        # Held data on blocked channels came after their barrier: released, not channel state.
        ctl.trigger_unaligned(self.barrier)
        ctl.end_alignment()
        return CollectingChannelState.begin(ctl, self.barrier, self.received)

    def _abandon(self, ctl: Controller) -> None:
        ctl.end_alignment()

    def __repr__(self) -> str:
        return f"CollectingBarriers(id={self.checkpoint_id}, received={sorted(self.received)})"


class CollectingChannelState(BarrierHandlerState):
    """Triggered unaligned; recording the pre-barrier buffers of channels still to deliver it.

    `received`/`awaiting` are replaced, never mutated; `recording` lists grow as buffers arrive.
    """

    __slots__ = ("awaiting", "barrier", "checkpoint_id", "received", "recording")

    def __init__(
        self,
        barrier: CheckpointBarrier,
        received: frozenset[int],
        recording: dict[int, list[Buffer]],
        awaiting: frozenset[int],
    ) -> None:
        self.barrier = barrier
        self.checkpoint_id = barrier.id
        self.received = received
        self.recording = recording
        self.awaiting = awaiting

    @classmethod
    def begin(cls, ctl: Controller, barrier: CheckpointBarrier, received: frozenset[int]) -> BarrierHandlerState:
        """Start recording every open channel not in `received` (the checkpoint has triggered)."""
        recording: dict[int, list[Buffer]] = {}
        awaiting = set()
        for ch in range(ctl.num_channels):
            if ch in received or ch in ctl.closed:
                continue
            buffers, barrier_queued = ctl.queued_before_barrier(ch, barrier.id)
            if barrier_queued:
                ctl.add_channel_state(barrier.id, ch, buffers)
                # only a queued barrier of *this* checkpoint completes the channel; a newer one
                # means this checkpoint's barrier never comes on it (it will be subsumed)
                later, later_queued = ctl.queued_before_barrier(ch, barrier.id + 1)
                if not (later_queued and len(later) == len(buffers)):
                    awaiting.add(ch)
            else:
                recording[ch] = buffers
        return cls(barrier, received, recording, frozenset(awaiting))._progress(ctl)

    def _progress(self, ctl: Controller) -> BarrierHandlerState:
        # a channel whose barrier is already queued (`awaiting`) has its channel state complete:
        # no need to wait until the backlog in front of that barrier is processed
        if ctl.all_arrived(self.received | self.awaiting):
            assert not self.recording, f"checkpoint {self.checkpoint_id}: channels still recording"
            ctl.finish_channel_state(self.checkpoint_id)
            return WAITING
        return self

    def _stop_recording(self, ctl: Controller, channel: int) -> dict[int, list[Buffer]]:
        recording = dict(self.recording)
        buffers = recording.pop(channel, None)
        if buffers:
            ctl.add_channel_state(self.checkpoint_id, channel, buffers)
        return recording

    def _same_barrier(self, ctl: Controller, channel: int, barrier: CheckpointBarrier) -> BarrierHandlerState:
        if channel in self.received:
            raise BarrierProtocolError(f"second barrier of checkpoint {barrier.id} on channel {channel}")
        recording = self._stop_recording(ctl, channel)
        state = CollectingChannelState(
            self.barrier, self.received | {channel}, recording, self.awaiting - {channel}
        )
        return state._progress(ctl)

    def end_of_partition(self, ctl: Controller, channel: int) -> BarrierHandlerState:
        recording = self._stop_recording(ctl, channel)
        state = CollectingChannelState(self.barrier, self.received, recording, self.awaiting - {channel})
        return state._progress(ctl)

    def buffer_arrived(self, channel: int, buffer: Buffer) -> None:
        recorded = self.recording.get(channel)
        if recorded is not None:
            recorded.append(buffer)

    @property
    def handles_barriers_on_arrival(self) -> bool:
        return True

    def __repr__(self) -> str:
        return (
            f"CollectingChannelState(id={self.checkpoint_id}, received={sorted(self.received)}, "
            f"recording={sorted(self.recording)}, awaiting={sorted(self.awaiting)})"
        )
