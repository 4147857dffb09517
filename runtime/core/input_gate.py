"""`CheckpointedInputGate`: a task's input channels, with barrier-driven blocking and spilling.

Theory of operation
-------------------
The gate owns the queues; the `BarrierHandler` owns the checkpoint decisions (see
`runtime/core/barriers/handler.py`). The task `push()`es what the network delivers and `poll()`s the
next item it may process (Flink's `CheckpointedInputGate.pollNext`).

Data structures, all O(1) amortised per item:

* `_pending[ch]`: FIFO of `(seq, BufferOrEvent)` pushed on `ch` and not yet consumed; `seq` is
  the global arrival number.
* `_order`: one channel id per pushed item, in arrival order. Because each channel is FIFO, the
  token popped for `ch` always stands for the head of `_pending[ch]` — no scanning.
* `_held[ch]`: items `poll()` stepped over while `ch` was blocked, in arrival order; past
  `spill_bound_bytes` runs of held buffers are replaced by `_SpilledRun`s through the `Spiller`.
* Release: when the handler unblocks `ch`, its held items go back to the *front* of
  `_pending[ch]` (they are older than anything still queued there) and `_released[ch]` counts
  them. `_release_heap` holds `(seq of head, ch)` for channels with released items, so released
  items of several channels are handed out merged in arrival order, before any other input.
  Heap entries are checked against the channel's real head when popped (stale ones skipped);
  a released channel that gets blocked again simply holds its released items again.
  Spilled runs are read back only when they reach the head of their channel.

Watermark events (`Watermark`, `WatermarkStatus`) are in-band data: queued, held and released
with their channel's buffers, never handed to the handler as events, and reported to it on
arrival and in the channel-state views like buffers (`on_buffer_arrived`, `queued_buffers`,
`queued_before_barrier`), so an unaligned barrier that overtakes them makes them channel state in
order with the buffers; the task hands them to its watermark valve when `poll` returns them.

Blocking only changes in response to a handler call: the gate re-reads every channel's
`is_blocked` after an event, re-checks only the blocked channels after a buffer callback, and
re-checks the blocked channels at the start of `poll` because a handler timer (the alignment
timeout) may have released them in between.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from runtime.core.barriers.handler import BarrierHandler
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CancelCheckpointMarker,
    ChannelItem,
    CheckpointBarrier,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
)
from runtime.records.spilling import MemorySpiller, Spiller, SpillHandle
from vocabulary.ports import Clock

__all__ = ["DEFAULT_SPILL_BOUND_BYTES", "CheckpointedInputGate", "GateStats"]

#: held bytes kept in memory before the gate spills (per gate)
DEFAULT_SPILL_BOUND_BYTES = 64 * 1024 * 1024

_Entry = tuple[int, BufferOrEvent]
#: what travels as data: buffers, and the events queued and held with them, handed to the task
_DATA = (Buffer, Watermark, WatermarkStatus)


@dataclass(slots=True)
class _SpilledRun:
    """Consecutive held buffers of one channel, spilled together."""

    seqs: list[int]
    handle: SpillHandle
    size_bytes: int


@dataclass(frozen=True, slots=True)
class GateStats:
    """A snapshot of the gate's counters."""

    #: bytes of buffers held on blocked channels now (in memory or spilled)
    bytes_held: int
    bytes_held_max: int
    #: total bytes ever spilled, and number of spill calls
    bytes_spilled: int
    num_spills: int
    #: the handler's alignment time of its last triggered checkpoint (seconds)
    last_alignment_time: float
    #: seconds with at least one channel blocked, measured with the gate's clock
    blocked_time: float
    items_delivered: int
    items_queued: int
    items_held: int
    num_blocked_channels: int


class CheckpointedInputGate:
    """Input channels of one task, feeding a barrier handler.

    Args:
        num_channels: number of input channels, >= 1; must match the handler's.
        handler: decides on checkpoints; bound to this gate (`handler.bind(self)`).
        clock: measures `blocked_time`; defaults to the handler's clock if it has one.
        spill_bound_bytes: held bytes kept in memory; beyond it held buffers are spilled.
        spiller: where spilled buffers go (default: a `MemorySpiller`).

    Raises:
        ValueError: bad `num_channels`/`spill_bound_bytes`, or a handler for another count.

    Not thread-safe: push, poll and the handler's timers must run on one thread.
    """

    def __init__(
        self,
        num_channels: int,
        handler: BarrierHandler,
        *,
        clock: Clock | None = None,
        spill_bound_bytes: int = DEFAULT_SPILL_BOUND_BYTES,
        spiller: Spiller | None = None,
    ) -> None:
        if isinstance(num_channels, bool) or not isinstance(num_channels, int) or num_channels < 1:
            raise ValueError(f"CheckpointedInputGate: num_channels must be a positive int, got {num_channels!r}")
        handler_channels = getattr(handler, "num_channels", num_channels)
        if handler_channels != num_channels:
            raise ValueError(
                f"CheckpointedInputGate: gate has {num_channels} channels but {type(handler).__name__} "
                f"was built for {handler_channels}"
            )
        if isinstance(spill_bound_bytes, bool) or not isinstance(spill_bound_bytes, int) or spill_bound_bytes < 0:
            raise ValueError(
                f"CheckpointedInputGate: spill_bound_bytes must be an int >= 0, got {spill_bound_bytes!r}"
            )
        self.num_channels = num_channels
        self.handler = handler
        self.clock = clock if clock is not None else getattr(handler, "clock", None)
        self.spill_bound_bytes = spill_bound_bytes
        self.spiller: Spiller = spiller if spiller is not None else MemorySpiller()

        self._pending: list[deque[_Entry | _SpilledRun]] = [deque() for _ in range(num_channels)]
        self._order: deque[int] = deque()
        self._held: list[list[_Entry | _SpilledRun]] = [[] for _ in range(num_channels)]
        self._held_items = [0] * num_channels
        #: entries of `_held[ch]` before this index hold no in-memory buffer
        self._spill_mark = [0] * num_channels
        self._held_bytes_ch = [0] * num_channels
        self._mem_bytes_ch = [0] * num_channels
        self._released = [0] * num_channels
        self._release_heap: list[tuple[int, int]] = []
        self._blocked: set[int] = set()
        self._eop_pushed = [False] * num_channels
        self._eop_delivered = [False] * num_channels
        self._num_eop_delivered = 0

        self._seq = 0
        self._size = 0  # items pushed (and queued), not yet delivered
        self._num_held = 0
        self._held_bytes = 0
        self._held_bytes_max = 0
        self._mem_held_bytes = 0
        self._bytes_spilled = 0
        self._num_spills = 0
        self._delivered = 0
        self._blocked_since: float | None = None
        self._blocked_time = 0.0
        handler.bind(self)

    # ------------------------------------------------------------------ input

    def push(self, boe: BufferOrEvent) -> None:
        """Append an item to its channel's FIFO.

        Buffers are reported to `handler.on_buffer_arrived`. An event the handler
        `handles_on_arrival` is given to it at once and never queued.

        Raises:
            ValueError: unknown channel, or the channel already delivered EndOfPartition.
            TypeError: the payload is neither a Buffer nor an event.
            BarrierProtocolError: from the handler, for an event handled on arrival.
        """
        ch = boe.channel
        if isinstance(ch, bool) or not isinstance(ch, int) or not 0 <= ch < self.num_channels:
            raise ValueError(
                f"CheckpointedInputGate: push on unknown channel {ch!r} (channels are 0..{self.num_channels - 1})"
            )
        if self._eop_pushed[ch]:
            raise ValueError(f"CheckpointedInputGate: push on channel {ch} after its EndOfPartition: {boe.payload!r}")
        payload = boe.payload
        if isinstance(payload, _DATA):
            self._enqueue(ch, boe)
            self.handler.on_buffer_arrived(ch, payload)  # type: ignore[arg-type]
            if self._blocked:
                self._check_released()
            return
        if not isinstance(payload, CheckpointBarrier | CancelCheckpointMarker | EndOfPartition):
            raise TypeError(f"CheckpointedInputGate: channel {ch} carries neither a Buffer nor an event: {payload!r}")
        if self.handler.handles_on_arrival(payload):
            self._dispatch(ch, payload)
        else:
            self._enqueue(ch, boe)
            if isinstance(payload, CheckpointBarrier):
                # queued behind data: the handler may still start an alignment timer now
                self.handler.on_barrier_announced(ch, payload)
        if isinstance(payload, EndOfPartition):
            self._eop_pushed[ch] = True

    def _enqueue(self, ch: int, boe: BufferOrEvent) -> None:
        self._pending[ch].append((self._seq, boe))
        self._seq += 1
        self._order.append(ch)
        self._size += 1

    # ------------------------------------------------------------------ output

    def poll(self) -> BufferOrEvent | None:
        """The next item in arrival order on a channel that is not blocked, or None.

        Items on blocked channels are held. Events are handed to the handler, then returned.
        Released items come first, in their original arrival order.
        """
        if self._blocked:
            self._check_released()
        pending = self._pending
        while True:
            ch = self._pop_released() if self._release_heap else -1
            if ch >= 0:
                entry = pending[ch].popleft()
                self._released[ch] -= 1
                if self._released[ch]:
                    self._expand_head(ch)
                    heapq.heappush(self._release_heap, (pending[ch][0][0], ch))
            elif self._order:
                ch = self._order.popleft()
                entry = pending[ch].popleft()
            else:
                return None
            if ch in self._blocked:
                self._hold(ch, entry)
                continue
            self._size -= 1
            self._delivered += 1
            boe = entry[1]
            payload = boe.payload
            if not isinstance(payload, _DATA):
                self._dispatch(ch, payload)
            return boe

    def _pop_released(self) -> int:
        """The channel whose released head is oldest, or -1 (skipping stale heap entries)."""
        heap = self._release_heap
        while heap:
            seq, ch = heapq.heappop(heap)
            if self._released[ch] and self._pending[ch][0][0] == seq:
                return ch
        return -1

    def _dispatch(self, ch: int, event: CheckpointBarrier | CancelCheckpointMarker | EndOfPartition) -> None:
        if isinstance(event, CheckpointBarrier):
            self.handler.on_barrier(ch, event)
        elif isinstance(event, CancelCheckpointMarker):
            self.handler.on_cancel(ch, event)
        else:
            self._eop_delivered[ch] = True
            self._num_eop_delivered += 1
            self.handler.on_end_of_partition(ch, event)
        self._sync_blocked()

    # ------------------------------------------------------------------ blocking

    def _sync_blocked(self) -> None:
        is_blocked = self.handler.is_blocked
        for ch in range(self.num_channels):
            if is_blocked(ch):
                if ch not in self._blocked:
                    if not self._blocked and self.clock is not None:
                        self._blocked_since = self.clock.now()
                    self._blocked.add(ch)
            elif ch in self._blocked:
                self._release(ch)

    def _check_released(self) -> None:
        for ch in sorted(self._blocked):
            if not self.handler.is_blocked(ch):
                self._release(ch)

    def _hold(self, ch: int, entry: _Entry) -> None:
        self._held[ch].append(entry)
        self._held_items[ch] += 1
        self._num_held += 1
        payload = entry[1].payload
        if not isinstance(payload, Buffer):
            return
        size = payload.size_bytes
        self._held_bytes_ch[ch] += size
        self._mem_bytes_ch[ch] += size
        self._mem_held_bytes += size
        self._held_bytes += size
        self._held_bytes_max = max(self._held_bytes_max, self._held_bytes)
        self.handler.on_buffer_held(ch, payload)
        self._check_released()
        if self._mem_held_bytes > self.spill_bound_bytes:
            self._spill()

    def _release(self, ch: int) -> None:
        self._blocked.discard(ch)
        if not self._blocked and self._blocked_since is not None:
            self._blocked_time += self.clock.now() - self._blocked_since  # type: ignore[union-attr]
            self._blocked_since = None
        held = self._held[ch]
        if not held:
            return
        queue = self._pending[ch]
        queue.extendleft(reversed(held))
        self._released[ch] += self._held_items[ch]
        self._num_held -= self._held_items[ch]
        self._held_bytes -= self._held_bytes_ch[ch]
        self._mem_held_bytes -= self._mem_bytes_ch[ch]
        self._held[ch] = []
        self._held_items[ch] = 0
        self._held_bytes_ch[ch] = 0
        self._mem_bytes_ch[ch] = 0
        self._spill_mark[ch] = 0
        self._expand_head(ch)
        heapq.heappush(self._release_heap, (queue[0][0], ch))

    # ------------------------------------------------------------------ spilling

    def _spill(self) -> None:
        for ch in range(self.num_channels):
            if self._mem_bytes_ch[ch]:
                self._spill_channel(ch)

    def _spill_channel(self, ch: int) -> None:
        held = self._held[ch]
        mark = self._spill_mark[ch]
        tail = held[mark:]
        del held[mark:]
        seqs: list[int] = []
        buffers: list[Buffer] = []
        for entry in tail:
            # entries after the mark are never runs: runs are only made here, before the new mark
            assert not isinstance(entry, _SpilledRun)
            payload = entry[1].payload
            if isinstance(payload, Buffer):
                seqs.append(entry[0])
                buffers.append(payload)
                continue
            if buffers:
                held.append(self._spill_run(ch, seqs, buffers))
                seqs, buffers = [], []
            held.append(entry)
        if buffers:
            held.append(self._spill_run(ch, seqs, buffers))
        self._spill_mark[ch] = len(held)
        assert self._mem_bytes_ch[ch] == 0, "every in-memory held buffer was spilled"

    def _spill_run(self, ch: int, seqs: list[int], buffers: list[Buffer]) -> _SpilledRun:
        size = sum(b.size_bytes for b in buffers)
        handle = self.spiller.spill(buffers)
        self._num_spills += 1
        self._bytes_spilled += size
        self._mem_bytes_ch[ch] -= size
        self._mem_held_bytes -= size
        return _SpilledRun(seqs, handle, size)

    def _expand_head(self, ch: int) -> None:
        """Read a spilled run back once it reaches the head of its channel."""
        queue = self._pending[ch]
        if queue and isinstance(queue[0], _SpilledRun):
            run = queue.popleft()
            queue.extendleft(reversed(self._unspill(ch, run)))

    def _unspill(self, ch: int, run: _SpilledRun) -> list[_Entry]:
        buffers = self.spiller.read(run.handle)
        self.spiller.discard(run.handle)
        if len(buffers) != len(run.seqs):
            raise RuntimeError(
                f"CheckpointedInputGate: spill of channel {ch} read back {len(buffers)} buffers, "
                f"expected {len(run.seqs)}"
            )
        return [(seq, BufferOrEvent(ch, buf)) for seq, buf in zip(run.seqs, buffers)]

    def _materialize(self, ch: int) -> deque[_Entry]:
        """`_pending[ch]` with every spilled run read back (only released items can be spilled)."""
        queue = self._pending[ch]
        if self._released[ch] and any(isinstance(e, _SpilledRun) for e in queue):
            entries: list[_Entry | _SpilledRun] = []
            for entry in queue:
                entries.extend(self._unspill(ch, entry) if isinstance(entry, _SpilledRun) else (entry,))
            queue.clear()
            queue.extend(entries)
        return queue  # type: ignore[return-value]

    # ------------------------------------------------------------------ InputView

    def queued_buffers(self, channel: int) -> list[ChannelItem]:
        """Buffers (and watermark events) received on `channel`, not yet handed out and not
        held, in order."""
        self._check_view_channel(channel)
        out: list[ChannelItem] = []
        for _, boe in self._materialize(channel):
            if isinstance(boe.payload, Buffer | Watermark | WatermarkStatus):
                out.append(boe.payload)
        return out

    def queued_before_barrier(self, channel: int, checkpoint_id: int) -> tuple[list[ChannelItem], bool]:
        """Queued buffers (and watermark events) on `channel` before its first queued barrier with
        id >= `checkpoint_id`, and whether such a barrier is queued."""
        self._check_view_channel(channel)
        out: list[ChannelItem] = []
        for _, boe in self._materialize(channel):
            payload = boe.payload
            if isinstance(payload, Buffer | Watermark | WatermarkStatus):
                out.append(payload)
            elif isinstance(payload, CheckpointBarrier) and payload.id >= checkpoint_id:
                return out, True
        return out, False

    def _check_view_channel(self, channel: int) -> None:
        if isinstance(channel, bool) or not isinstance(channel, int) or not 0 <= channel < self.num_channels:
            raise ValueError(f"CheckpointedInputGate: no channel {channel!r} (channels are 0..{self.num_channels - 1})")
        if self._blocked:
            self._check_released()  # a handler timer may have released channels since the last call

    # ------------------------------------------------------------------ introspection

    @property
    def is_finished(self) -> bool:
        """Every channel delivered EndOfPartition and nothing is left."""
        return self._num_eop_delivered == self.num_channels and self._size == 0

    @property
    def has_data(self) -> bool:
        """Something is queued that is not held (a `poll()` may return it)."""
        return self._size > self._num_held

    def __len__(self) -> int:
        """Items pushed and not yet delivered: queued, held and released."""
        return self._size

    def is_blocked(self, channel: int) -> bool:
        return channel in self._blocked

    def stats(self) -> GateStats:
        blocked_time = self._blocked_time
        if self._blocked_since is not None and self.clock is not None:
            blocked_time += self.clock.now() - self._blocked_since
        handler_stats = self.handler.stats()
        return GateStats(
            bytes_held=self._held_bytes,
            bytes_held_max=self._held_bytes_max,
            bytes_spilled=self._bytes_spilled,
            num_spills=self._num_spills,
            last_alignment_time=getattr(handler_stats, "last_alignment_time", 0.0),
            blocked_time=blocked_time,
            items_delivered=self._delivered,
            items_queued=self._size - self._num_held,
            items_held=self._num_held,
            num_blocked_channels=len(self._blocked),
        )

    def close(self) -> None:
        """Discard every spilled run still held or queued (the gate is being thrown away)."""
        for ch in range(self.num_channels):
            for entry in [*self._held[ch], *self._pending[ch]]:
                if isinstance(entry, _SpilledRun):
                    self.spiller.discard(entry.handle)

    def __repr__(self) -> str:
        return (
            f"CheckpointedInputGate(channels={self.num_channels}, queued={self._size - self._num_held}, "
            f"held={self._num_held}, held_bytes={self._held_bytes}, blocked={sorted(self._blocked)}, "
            f"delivered={self._delivered}, spills={self._num_spills}, finished={self.is_finished})"
        )
