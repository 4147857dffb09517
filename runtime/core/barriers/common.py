"""What every concrete barrier handler shares: argument checks, the listener calls, counters.

`HandlerCore` turns the decisions of a handler into listener calls (`trigger_checkpoint`,
`abort_checkpoint`, the channel-state calls), keeps the counters behind `stats()` and
`__repr__`, and validates channels and end-of-partition. The decisions themselves live in
`states.py` (aligner, unaligned) and `tracker.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

from runtime.core.barriers.handler import (
    AlignmentStats,
    BarrierHandler,
    BarrierProtocolError,
    CheckpointListener,
    HandlerStats,
    InputView,
)
from runtime.records.messages import Buffer, CheckpointBarrier
from vocabulary.ports import Clock, ManualClock, Timers
from vocabulary.reasons import CheckpointFailureReason

__all__ = ["HandlerCore", "NO_INPUT"]


class _NoInput:
    """The view a handler sees before a gate binds it (direct use in tests): nothing queued."""

    def queued_buffers(self, channel: int) -> list[Buffer]:
        return []

    def queued_before_barrier(self, channel: int, checkpoint_id: int) -> tuple[list[Buffer], bool]:
        return [], False


NO_INPUT: InputView = _NoInput()


class HandlerCore(BarrierHandler):
    """Base of the three handlers (not part of the public API).

    Args:
        num_channels: input channels of the gate, >= 1.
        listener: the task; receives triggers, aborts and channel state.
        clock: time source for alignment stats and timeouts; without one time stands still at 0.
        timers: schedules the alignment timeout (aligner only).

    Raises:
        ValueError: `num_channels` is not a positive int or `listener` is missing.
    """

    def __init__(
        self,
        num_channels: int,
        listener: CheckpointListener,
        *,
        clock: Clock | None = None,
        timers: Timers | None = None,
    ) -> None:
        name = type(self).__name__
        if isinstance(num_channels, bool) or not isinstance(num_channels, int) or num_channels < 1:
            raise ValueError(f"{name}: num_channels must be a positive int, got {num_channels!r}")
        if listener is None:
            raise ValueError(f"{name}: a CheckpointListener is required")
        self.num_channels = num_channels
        self.listener = listener
        self.has_clock = clock is not None
        self.clock: Clock = clock if clock is not None else ManualClock()
        self.timers = timers
        self._gate: InputView = NO_INPUT
        #: channels that delivered EndOfPartition
        self.closed: set[int] = set()
        #: highest checkpoint id started, cancelled or triggered; older barriers are ignored
        self.latest_checkpoint_id = -1
        self.num_barriers_received = 0
        self.num_triggered = 0
        self.num_aborted = 0
        self.last_alignment_time = 0.0

    # -- validation ------------------------------------------------------------------------

    def check_channel(self, channel: int, what: str) -> None:
        if isinstance(channel, bool) or not isinstance(channel, int) or not 0 <= channel < self.num_channels:
            raise ValueError(
                f"{type(self).__name__}: {what} on unknown channel {channel!r} "
                f"(channels are 0..{self.num_channels - 1})"
            )

    def check_open(self, channel: int, what: str) -> None:
        """Raises BarrierProtocolError for an event on a channel that already ended."""
        self.check_channel(channel, what)
        if channel in self.closed:
            raise BarrierProtocolError(f"{what} on channel {channel} after its EndOfPartition")

    def close_channel(self, channel: int) -> None:
        self.check_open(channel, "EndOfPartition")
        self.closed.add(channel)

    def all_arrived(self, received: frozenset[int] | set[int]) -> bool:
        """Every channel delivered the barrier (`received`) or ended."""
        return all(ch in received or ch in self.closed for ch in range(self.num_channels))

    # -- listener calls ----------------------------------------------------------------------

    def trigger(
        self,
        barrier: CheckpointBarrier,
        *,
        unaligned: bool,
        alignment_time: float = 0.0,
        bytes_buffered: int = 0,
        first_barrier_at: float | None = None,
    ) -> None:
        """Tell the listener to take checkpoint `barrier`; `first_barrier_at` defaults to the
        start of the alignment (`alignment_time` before now)."""
        now = self.clock.now()
        self.num_triggered += 1
        self.last_alignment_time = alignment_time
        self.latest_checkpoint_id = max(self.latest_checkpoint_id, barrier.id)
        stats = AlignmentStats(
            checkpoint_id=barrier.id,
            alignment_time=alignment_time,
            bytes_buffered=bytes_buffered,
            unaligned=unaligned,
            start_delay=max(0.0, now - barrier.timestamp) if self.has_clock else 0.0,
            first_barrier_at=(now - alignment_time if first_barrier_at is None else first_barrier_at)
            if self.has_clock else None,
        )
        self.listener.trigger_checkpoint(barrier, stats)

    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.num_aborted += 1
        self.latest_checkpoint_id = max(self.latest_checkpoint_id, checkpoint_id)
        self.listener.abort_checkpoint(checkpoint_id, reason)

    def add_channel_state(self, checkpoint_id: int, channel: int, buffers: Sequence[Buffer]) -> None:
        if buffers:
            self.listener.add_input_channel_state(checkpoint_id, channel, list(buffers))

    def finish_channel_state(self, checkpoint_id: int) -> None:
        self.listener.finish_input_channel_state(checkpoint_id)

    # -- introspection -----------------------------------------------------------------------

    def pending_checkpoint_id(self) -> int | None:
        """The checkpoint in progress, if any."""
        return None

    def stats(self) -> HandlerStats:
        return HandlerStats(
            pending_checkpoint_id=self.pending_checkpoint_id(),
            latest_checkpoint_id=self.latest_checkpoint_id,
            num_barriers_received=self.num_barriers_received,
            num_closed_channels=len(self.closed),
            num_triggered=self.num_triggered,
            num_aborted=self.num_aborted,
            last_alignment_time=self.last_alignment_time,
        )

    def _repr_extra(self) -> str:
        return ""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(channels={self.num_channels}, closed={len(self.closed)}, "
            f"pending={self.pending_checkpoint_id()}, latest={self.latest_checkpoint_id}, "
            f"barriers={self.num_barriers_received}, triggered={self.num_triggered}, "
            f"aborted={self.num_aborted}{self._repr_extra()})"
        )
