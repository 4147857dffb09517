"""The contract between the input gate, a barrier handler and the task that owns them.

Theory of operation
-------------------
`CheckpointedInputGate` owns the queues; a `BarrierHandler` owns the checkpoint decisions; the
task is the `CheckpointListener` that snapshots, forwards barriers and acknowledges.

* The gate hands every event it dequeues to the handler (`on_barrier`, `on_cancel`,
  `on_end_of_partition`), in channel order. A handler that wants to see an event the moment it
  *arrives* (unaligned checkpoints: the barrier overtakes queued data) says so through
  `handles_on_arrival(event)`; the gate then calls the handler from `push()` and never queues it.
* After every handler call the gate asks `is_blocked(channel)`; data arriving on a blocked
  channel is held (and spilled past a bound) and handed over, in arrival order, before any new
  input once the channel is released.
* The handler reports its decisions to the listener: `trigger_checkpoint` (snapshot now),
  `abort_checkpoint` (with a `CheckpointFailureReason`), and — unaligned only — the input channel
  state (`add_input_channel_state`, then `finish_input_channel_state` once every open channel
  delivered its barrier).

No I/O, no wall clock: time comes from an injected `Clock`, timers from injected `Timers`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from runtime.records.messages import Buffer, CancelCheckpointMarker, CheckpointBarrier, EndOfPartition
from vocabulary.reasons import CheckpointFailureReason


class BarrierProtocolError(RuntimeError):
    """The barrier stream is corrupt: e.g. a second barrier of one checkpoint on one channel."""


@dataclass(frozen=True, slots=True)
class AlignmentStats:
    """What the handler knows about a checkpoint at the moment it triggers it."""

    checkpoint_id: int
    #: seconds from the first barrier of this checkpoint to the trigger (0 for unaligned/tracker)
    alignment_time: float = 0.0
    #: bytes held back on blocked channels while aligning
    bytes_buffered: int = 0
    #: True when the checkpoint was taken unaligned (always, or after the alignment timeout)
    unaligned: bool = False
    #: seconds from the barrier's timestamp to the trigger
    start_delay: float = 0.0
    #: clock time the handler took the first barrier of this checkpoint (None: no clock); with
    #: `start_delay` and `alignment_time` it gives Flink's per-subtask phases
    first_barrier_at: float | None = None


class CheckpointListener(Protocol):
    """What a handler calls on its task."""

    def trigger_checkpoint(self, barrier: CheckpointBarrier, stats: AlignmentStats) -> None: ...

    def abort_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None: ...

    def add_input_channel_state(
        self, checkpoint_id: int, channel: int, buffers: Sequence[Buffer]
    ) -> None:
        """Unaligned only: `buffers` arrived on `channel` before its barrier, after the trigger."""
        ...

    def finish_input_channel_state(self, checkpoint_id: int) -> None:
        """Unaligned only: every open channel delivered its barrier; channel state is complete."""
        ...


class InputView(Protocol):
    """What a handler may ask of its gate."""

    def queued_buffers(self, channel: int) -> list[Buffer]:
        """Buffers on `channel` received but not yet handed to the task, and not held."""
        ...

    def queued_before_barrier(self, channel: int, checkpoint_id: int) -> tuple[list[Buffer], bool]:
        """Queued buffers on `channel` before its first queued barrier with id >= `checkpoint_id`,
        and whether such a barrier is queued (an aligned checkpoint that times out needs both)."""
        ...


@dataclass(frozen=True, slots=True)
class HandlerStats:
    pending_checkpoint_id: int | None
    latest_checkpoint_id: int
    num_barriers_received: int
    num_closed_channels: int
    num_triggered: int
    num_aborted: int
    #: seconds from first barrier to trigger of the last triggered checkpoint (0 if never aligned)
    last_alignment_time: float = 0.0


class BarrierHandler(abc.ABC):
    """Base of `BarrierAligner`, `BarrierTracker` and `UnalignedBarrierHandler`."""

    num_channels: int
    listener: CheckpointListener

    def bind(self, gate: InputView) -> None:
        """Called once by the gate that owns this handler."""
        self._gate = gate

    @abc.abstractmethod
    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None: ...

    @abc.abstractmethod
    def on_cancel(self, channel: int, marker: CancelCheckpointMarker) -> None: ...

    @abc.abstractmethod
    def on_end_of_partition(self, channel: int, event: EndOfPartition) -> None: ...

    def on_buffer_arrived(self, channel: int, buffer: Buffer) -> None:  # noqa: B027
        """Every buffer pushed into the gate (the unaligned handler records channel state)."""

    def on_buffer_held(self, channel: int, buffer: Buffer) -> None:  # noqa: B027
        """The gate held `buffer` because `channel` is blocked (the aligner counts bytes)."""

    def on_barrier_announced(self, channel: int, barrier: CheckpointBarrier) -> None:  # noqa: B027
        """`barrier` arrived and was queued behind data on `channel` (it is handed to
        `on_barrier` when dequeued). Flink's barrier announcement: lets an aligned checkpoint
        with an alignment timeout start its timer before the barrier reaches the head."""

    def is_blocked(self, channel: int) -> bool:
        return False

    def pending_checkpoint_id(self) -> int | None:
        """The checkpoint whose barriers are being collected, if any."""
        return None

    def handles_on_arrival(self, event: object) -> bool:
        """True: the gate hands `event` to the handler from `push()` (it overtakes queued data)."""
        return False

    @abc.abstractmethod
    def stats(self) -> HandlerStats: ...
