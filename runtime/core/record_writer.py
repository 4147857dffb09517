"""`RecordWriter`: a task's output — partitioning, buffers, credits, and where barriers go in the
output queues (Flink's `RecordWriter` over its `ResultPartition`'s subpartitions).

One `OutputChannel` per (edge, downstream subtask), in the graph's order. Emitted data is checked
for one Arrow type per field (in emission order, before partitioning), split by each edge's
partitioner, collected into the channel's next buffer and cut at the channel's buffer size (the
job's, or smaller as the receiver announced: debloating). Buffers leave only while the channel has
credits; events always, but never ahead of a buffer queued before them (channel FIFO) unless a
barrier overtakes on purpose (unaligned). The main output goes to the untagged edges, a side
output's records (`emit(data, tag)`) to the edges of its tag only; watermark events go to every
channel (`emit_event`), behind the data emitted before them. What an overtaking barrier leaves
behind it — buffers and watermark events — is the output channel state. Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from operators.columns import Batch, compact, concat, num_rows
from operators.side_outputs import SideOutputs
from runtime.records.messages import (
    Buffer,
    CancelCheckpointMarker,
    ChannelItem,
    CheckpointBarrier,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
    sealed,
)
from runtime.records.record_types import StreamSchema
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from runtime.core.graph import JobGraph, JobVertex

Payload = Buffer | CheckpointBarrier | CancelCheckpointMarker | EndOfPartition | Watermark | WatermarkStatus


def _channel_state(queue: deque[Payload] | list[Payload]) -> list[ChannelItem]:
    """What of a queue is channel state: its buffers (sealed) and watermark events, in order."""
    return sealed(p for p in queue if isinstance(p, Buffer | Watermark | WatermarkStatus))


class OutputChannel:
    """One outgoing channel: the pieces of the next buffer (record lists or Arrow batches, in
    order), a queue of ready payloads, and credits."""

    __slots__ = ("index", "credits", "queue", "builder", "builder_rows", "builder_fields", "target", "buffer_size",
                 "last_watermark")

    def __init__(self, index: int, credits: int, target: TaskId, buffer_size: int) -> None:
        self.index = index
        self.credits = credits
        #: records per buffer: the job's, or smaller as the receiver announced (debloating)
        self.buffer_size = buffer_size
        self.queue: deque[Payload] = deque()
        self.builder: list[Batch] = []
        self.builder_rows = 0
        #: the fields every record in the builder's record lists has, exactly (): not known so
        self.builder_fields: tuple[str, ...] = ()
        self.target = target
        #: the highest watermark queued on this channel (restored channel state included)
        self.last_watermark = float("-inf")

    def restore(self, channel_state: list[ChannelItem]) -> None:
        """Queue restored output channel state; a watermark in it is the channel's highest so far."""
        self.queue.extend(channel_state)
        for item in channel_state:
            if isinstance(item, Watermark):
                self.last_watermark = max(self.last_watermark, item.timestamp)

    def queued_buffers(self) -> int:
        return sum(1 for p in self.queue if isinstance(p, Buffer))


class RecordWriter:
    """The output channels of one subtask and the partitioners that feed them."""

    def __init__(self, graph: JobGraph, vertex: JobVertex, subtask: int, stream_name: str) -> None:
        self.buffer_size = graph.buffer_size
        self.channels: list[OutputChannel] = []
        #: output tag (None: the main output) -> (partitioner instance, out channels) per edge
        self._routes: dict[str | None, list[tuple[Any, list[int]]]] = {}
        for edge, targets in self._output_groups(graph, vertex, subtask):
            indexes = []
            for downstream in targets:
                ch = OutputChannel(len(self.channels), graph.credits, TaskId(edge.target, downstream),
                                   self.buffer_size)
                self.channels.append(ch)
                indexes.append(ch.index)
            self._routes.setdefault(edge.output_tag, []).append((edge.partitioner.create(subtask), indexes))
        self._edge_routes = self._routes.get(None, [])
        #: one Arrow type per field, per stream: the main output's and each side output's
        self._types = {tag: StreamSchema(stream_name if tag is None else f"{stream_name} to side output {tag!r}")
                       for tag in self._routes}
        self.records_out = 0

    @property
    def side_output_tags(self) -> frozenset[str]:
        """The side outputs some output edge carries."""
        return frozenset(tag for tag in self._routes if tag is not None)

    @staticmethod
    def _output_groups(graph: JobGraph, vertex: JobVertex, subtask: int) -> list[tuple[Any, list[int]]]:
        groups: dict[int, tuple[Any, list[int]]] = {}
        order: list[int] = []
        for edge, downstream in graph.output_channels(vertex.name, subtask):
            key = id(edge)
            if key not in groups:
                groups[key] = (edge, [])
                order.append(key)
            groups[key][1].append(downstream)
        return [groups[k] for k in order]

    # ------------------------------------------------------------------ data

    def emit(self, data: Batch, tag: str | None = None) -> None:
        """Partition `data` — the main output, or side output `tag` — into its edges' channels."""
        routes = self._edge_routes if tag is None else self._routes.get(tag)
        if tag is None:
            self.records_out += num_rows(data)
        if not routes:
            return
        types = self._types[tag]
        types.check(data)  # before partitioning: in emission order
        if tag is not None:
            self.records_out += num_rows(data)
        channels = self.channels
        columns = not isinstance(data, list)
        fields = () if columns else types.last_fields
        for partitioner, indexes in routes:
            if columns:
                parts = partitioner.partition_columns(data, len(indexes))
            else:
                parts = partitioner.partition(data, len(indexes))
            for part, index in zip(parts, indexes):
                rows = num_rows(part)
                if not rows:
                    continue
                ch = channels[index]
                if not columns:  # a buffer's records are known uniform if every list in it was so alike
                    ch.builder_fields = fields if not ch.builder_rows or ch.builder_fields == fields else ()
                ch.builder.append(part)
                ch.builder_rows += rows
                if ch.builder_rows >= ch.buffer_size:
                    self._cut(ch)

    def _cut(self, ch: OutputChannel) -> None:
        pieces, ch.builder, ch.builder_rows = ch.builder, [], 0
        fields = ch.builder_fields or None
        size = ch.buffer_size
        for piece in concat(pieces):
            if isinstance(piece, list):
                for start in range(0, len(piece), size):
                    ch.queue.append(Buffer.from_records(piece[start:start + size], checked=True, fields=fields))
            elif piece.num_rows <= size:
                ch.queue.append(Buffer.of(compact(piece)))
            else:
                for start in range(0, piece.num_rows, size):
                    ch.queue.append(Buffer.of(compact(piece.slice(start, size))))

    def flush(self) -> None:
        """Turn partly filled output buffers into buffers (buffer timeout, before events)."""
        for ch in self.channels:
            if ch.builder:
                self._cut(ch)

    def pending_output(self) -> bool:
        return any(ch.builder for ch in self.channels)

    # ------------------------------------------------------------------ credits and sending

    def add_credit(self, out_channel: int, buffer_size: int | None = None) -> None:
        """The receiver consumed a buffer of `out_channel`; `buffer_size`: the size it asks for
        (buffer debloating; buffers already cut keep theirs)."""
        ch = self.channels[out_channel]
        ch.credits += 1
        if buffer_size is not None:
            ch.buffer_size = max(1, min(buffer_size, self.buffer_size))

    def drain_sendable(self) -> list[tuple[int, Payload]]:
        """Pop everything that may be sent now: buffers while credits last, events always
        (an event behind a buffer without credit waits, keeping channel FIFO)."""
        out = []
        for ch in self.channels:
            queue = ch.queue
            while queue:
                head = queue[0]
                if isinstance(head, Buffer):
                    if ch.credits <= 0:
                        break
                    ch.credits -= 1
                out.append((ch.index, queue.popleft()))
        return out

    @property
    def is_backpressured(self) -> bool:
        """True when some output channel has more ready buffers than it has credits for."""
        return any(ch.credits <= 0 and ch.queued_buffers() > 1 for ch in self.channels)

    def read_size(self) -> int:
        """Records a source reads in one step: a buffer, but no more than its outputs can send
        now (one buffer per channel at least). Without debloating that is always a whole buffer;
        with debloated (smaller) buffers a backpressured source then holds about what its
        credits allow, as Flink's record writer waits for a free buffer, instead of a whole
        read cut into small buffers in front of the barrier."""
        room = sum(max(1, ch.credits) * ch.buffer_size for ch in self.channels)
        return min(self.buffer_size, room) if room else self.buffer_size

    # ------------------------------------------------------------------ events

    def cancel_checkpoint(self, checkpoint_id: int) -> None:
        """Queue a `CancelCheckpointMarker` on every channel."""
        for ch in self.channels:
            ch.queue.append(CancelCheckpointMarker(checkpoint_id))

    def emit_elements(self, elements: list[Any], side_outputs: SideOutputs) -> None:
        """Send what a chain emitted, in order: data, and each watermark event behind the side
        outputs collected before it (`side_outputs`, sent last too)."""
        for element in elements:
            if isinstance(element, Watermark | WatermarkStatus):
                self.emit_side_outputs(side_outputs)
                self.emit_event(element)
            elif num_rows(element):
                self.emit(element)
        self.emit_side_outputs(side_outputs)

    def emit_side_outputs(self, side_outputs: SideOutputs) -> None:
        for tag, records in side_outputs.take():
            self.emit(records, tag)

    def emit_event(self, event: Watermark | WatermarkStatus) -> None:
        """Queue a watermark event on every channel, behind everything emitted before it. A
        watermark never goes backwards on a channel: one at or below the channel's highest is not
        sent (after a restore, the task's valve and any timestamp assigner start again from -inf
        behind watermarks its restored output channel state holds)."""
        self.flush()
        for ch in self.channels:
            if isinstance(event, Watermark):
                if event.timestamp <= ch.last_watermark:
                    continue
                ch.last_watermark = event.timestamp
            ch.queue.append(event)

    def end_of_partition(self) -> None:
        """Queue `EndOfPartition` on every channel (after flushing what is left)."""
        self.flush()
        for ch in self.channels:
            ch.queue.append(EndOfPartition())

    def put_barrier(self, barrier: CheckpointBarrier, *, overtake: bool) -> dict[int, list[ChannelItem]]:
        """Queue `barrier` on every channel: behind the queued output, or (`overtake`, unaligned)
        at the head; returns the output it overtook per channel (its output channel state)."""
        overtaken: dict[int, list[ChannelItem]] = {}
        for ch in self.channels:
            if overtake:
                queued = _channel_state(ch.queue)
                if queued:
                    overtaken[ch.index] = queued
                ch.queue.appendleft(barrier)
            else:
                ch.queue.append(barrier)
        return overtaken

    def barrier_queued_behind_data(self, barrier: CheckpointBarrier) -> bool:
        for ch in self.channels:
            for payload in ch.queue:
                if payload is barrier:
                    break
                if isinstance(payload, Buffer):
                    return True
        return False

    def barrier_queued(self, checkpoint_id: int) -> bool:
        """Whether checkpoint `checkpoint_id`'s barrier is still queued on some channel."""
        return any(isinstance(p, CheckpointBarrier) and p.id == checkpoint_id
                   for ch in self.channels for p in ch.queue)

    def overtake_with_barrier(self, checkpoint_id: int) -> dict[int, list[ChannelItem]]:
        """Move checkpoint `checkpoint_id`'s queued barrier to the head of every channel (an
        alignment timeout expired); returns the output it overtook per channel."""
        overtaken: dict[int, list[ChannelItem]] = {}
        for ch in self.channels:
            index = next((i for i, p in enumerate(ch.queue)
                          if isinstance(p, CheckpointBarrier) and p.id == checkpoint_id), None)
            if index is None:
                continue
            ahead = _channel_state(list(ch.queue)[:index])
            barrier = ch.queue[index]
            del ch.queue[index]
            ch.queue.appendleft(barrier)
            if ahead:
                overtaken[ch.index] = ahead
        return overtaken
