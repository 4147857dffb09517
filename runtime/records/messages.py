"""What travels over a channel: data buffers and in-band events.

A channel carries `BufferOrEvent`s in FIFO order. Data travels in `Buffer`s (one
`pyarrow.RecordBatch` of many records; a buffer cut from dict records of one set of fields builds
it only once something needs it, so between tasks of one process the records go over as the
list); checkpoint barriers, cancellation markers, watermarks, watermark statuses and the
end-of-partition marker travel between buffers as events.

Watermarks and watermark statuses are in-band *data* events: the input gate queues and holds them
with the buffers of their channel (a blocked channel holds its watermarks back), and an unaligned
barrier that overtakes them makes them channel state, in order with the buffers. In channel-state
files they are one-row batches marked in their schema metadata (`channel_state_batch`,
`channel_state_item`); in memory they stay events.

Every class here is immutable and picklable so the same objects cross the simulator's
virtual network and Ray's object store unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from runtime.records.record_types import RecordConversionError, StreamSchema
from state.serialization import IPC_OPTIONS


class Buffer:
    """A data buffer: many records, as one Arrow record batch.

    A buffer cut from dict records that the writer's type check found to share one set of plain
    fields (`from_records(..., fields=...)`) keeps the list and builds its batch only when something
    asks for it: `batch`, `size_bytes`, pickling (a hop between processes carries the batch
    alone), channel state (`seal`). A receiver in the sender's own process — the simulator's
    network, a Ray worker's in-process channel — that takes records gets the producer's list back
    from `to_records()` with no Arrow round trip (the records a hop would give back but for ints a
    float field would widen). The batch is built by the same code whenever it is built, so it is the
    same bytes wherever that happens. Immutable in use; the caches are not pickled.
    """

    __slots__ = ("_batch", "_rows", "_records", "_size_bytes")

    def __init__(self, batch: pa.RecordBatch | None, rows: list[dict[str, Any]] | None = None,
                 records: list[dict[str, Any]] | None = None) -> None:
        #: the Arrow batch, once built (always set when `rows` is None)
        self._batch = batch
        #: the dict records the batch is built from (None: it came as a batch)
        self._rows = rows
        #: what `to_records` returns, once known
        self._records = records
        self._size_bytes: int | None = None

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], schema: pa.Schema | None = None, *, checked: bool = False,
        fields: tuple[str, ...] | None = None,
    ) -> Buffer:
        """Build a buffer from dict records.

        Records follow one rule wherever they become Arrow (`runtime/records/record_types.py`): every value
        is one Arrow can hold (an int fits in int64; no `object()`), and a field keeps one Arrow
        type, that of its first non-None value. None fits any field, and a record lacking a field
        has None there. Ints widen to floats (so an int may come back as an equal float, and must
        fit one exactly: |int| <= 2**53), narrower numbers to wider ones, dicts to the union of
        their keys, lists element-wise; nothing else mixes (not bool with numbers, str with bytes,
        int with str). Tasks check it per stream, record by record, before records are grouped
        into buffers, so a job fails or not whatever the buffer size and timing, on either
        executor; they pass `checked=True`, and `fields` when their check found every record
        with exactly these plain fields (`StreamSchema.last_fields`): the batch is then built when
        first asked for. Called directly, the records of this buffer are checked as one stream.
        With `schema`, the records are converted to it as Arrow does.

        Raises:
            RecordTypeError: a record breaks the rule (a `RecordConversionError`); the message
                names the field, the types and the record.
            RecordConversionError: Arrow could not convert the records otherwise; names a record.
        """
        rows = [r if isinstance(r, dict) else dict(r) for r in records]
        if checked and fields and schema is None:
            return cls(None, rows, rows)
        if not checked and schema is None:
            StreamSchema("records given to Buffer.from_records").check_records(rows)
        batch, uniform = _to_batch(rows, schema, checked=checked)
        return cls(batch, None, rows if uniform else None)

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> Buffer:
        return cls(batch)

    @property
    def batch(self) -> pa.RecordBatch:
        """The records as one Arrow batch (built on first use from the records, if need be)."""
        if self._batch is None:
            self._batch = _to_batch(self._rows, None, checked=True)[0]  # type: ignore[arg-type]
        return self._batch

    @property
    def has_batch(self) -> bool:
        """Whether the Arrow batch exists yet (a buffer of records builds it on first use)."""
        return self._batch is not None

    def seal(self) -> Buffer:
        """Build the batch now, from the records as they are (this buffer becomes channel state: a
        function downstream may change a record's dict in place once it processes it)."""
        self.batch  # noqa: B018 (builds it)
        return self

    def to_records(self) -> list[dict[str, Any]]:
        """The records as dicts (a fresh list; the dicts are shared, treat them as read-only)."""
        if self._records is None:
            self._records = self.batch.to_pylist()
        return list(self._records)

    @property
    def num_records(self) -> int:
        return len(self._rows) if self._rows is not None else self._batch.num_rows  # type: ignore[union-attr]

    def __len__(self) -> int:
        return self.num_records

    @property
    def size_bytes(self) -> int:
        """The bytes of the Arrow batch (builds it: buffer accounting counts what a hop carries)."""
        # cached: RecordBatch.nbytes walks every buffer (~10 µs), and the gate asks per held buffer
        if self._size_bytes is None:
            self._size_bytes = self.batch.nbytes
        return self._size_bytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Buffer) and self.batch.equals(other.batch)

    def __hash__(self) -> int:  # buffers are values but not used as keys; keep it cheap
        return hash(self.num_records)

    def __reduce__(self):
        # a hop carries the batch alone (never the python-object caches), as one Arrow IPC stream:
        # a pickler walks a batch object by object (Ray's ~260 µs for 140 NexMark events of 21
        # columns; Arrow's own pickling drops the rows of a batch without columns), while the stream
        # is written and read in one call each (~15 µs), and goes out of band under protocol 5
        return (_buffer_from_ipc, (_ipc_stream(self.batch),))

    def __repr__(self) -> str:
        return f"Buffer(records={self.num_records}, bytes={self.size_bytes})"


def _ipc_stream(batch: pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _buffer_from_ipc(stream: pa.Buffer) -> Buffer:
    return Buffer(pa.ipc.open_stream(stream).read_next_batch())


def _to_batch(rows: list[dict[str, Any]], schema: pa.Schema | None, *, checked: bool
              ) -> tuple[pa.RecordBatch, bool]:
    """`rows` as one Arrow batch (`Buffer.from_records`' rules; `checked`: they were checked), and
    whether the batch gives back the rows as they are (every row has the same fields)."""
    try:
        if schema is not None or not rows:
            return pa.RecordBatch.from_pylist(rows, schema=schema), True
        if (columns := _uniform_columns(rows)) is not None:
            return pa.RecordBatch.from_pydict(columns), True
        # a buffer is columnar: a record lacking a field its buffer-mates have gets None
        # (from_pylist would silently keep only the first record's fields)
        names = list(dict.fromkeys(k for r in rows for k in r))
        return pa.RecordBatch.from_pydict({k: [r.get(k) for r in rows] for k in names}), False
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        if schema is None and checked:
            # not expected after the caller's check; say which record and field if the rule can
            StreamSchema("records given to Buffer.from_records").check_records(rows)
        bad = _first_unconvertible(rows)
        raise RecordConversionError(
            f"record {bad!r} cannot be carried in an Arrow buffer: {exc}"
        ) from exc


def _uniform_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]] | None:
    """The rows as columns when every row has exactly the first row's fields, else None.

    Transposing by name fails on a missing field; equal field counts then rule out extra ones.
    (About twice as fast as comparing every row's key set and then `from_pylist`.)
    """
    names = list(rows[0])
    try:
        columns = {name: [row[name] for row in rows] for name in names}
    except KeyError:
        return None
    return columns if sum(map(len, rows)) == len(names) * len(rows) else None


def _first_unconvertible(rows: list[dict[str, Any]]) -> Any:
    """The first record Arrow cannot convert on its own (else the first record)."""
    for row in rows:
        try:
            pa.RecordBatch.from_pylist([row])
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return row
    return rows[0] if rows else None


class CheckpointType(enum.Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


@dataclass(frozen=True, slots=True)
class CheckpointOptions:
    """Per-barrier options: what kind of snapshot, and whether it may overtake data."""

    type: CheckpointType = CheckpointType.CHECKPOINT
    unaligned: bool = False
    #: seconds after the barrier's timestamp at which an aligned checkpoint turns unaligned
    alignment_timeout: float | None = None
    #: aligned whatever the task's mode, with no alignment timeout: the barrier never overtakes
    #: data (Flink's `FORCED_ALIGNED`; the final checkpoint, `CheckpointCoordinator`)
    forced_aligned: bool = False

    @classmethod
    def of_trigger(cls, unaligned: bool, alignment_timeout: float | None, forced_aligned: bool) -> CheckpointOptions:
        """The options of a barrier the coordinator triggered (`CoordinatorGateway.trigger_source`)."""
        if forced_aligned:
            return cls(forced_aligned=True)
        return cls(unaligned=unaligned, alignment_timeout=alignment_timeout)

    @property
    def is_savepoint(self) -> bool:
        return self.type is CheckpointType.SAVEPOINT


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    """In-band marker of checkpoint `id` (strictly increasing), created at `timestamp` seconds.

    `completed`: the newest checkpoint the sender knew completed (0: none), for receivers that
    get no completion notification of their own (`runtime.jobmaster.coordination.completions`)."""

    id: int
    timestamp: float = 0.0
    options: CheckpointOptions = CheckpointOptions()
    completed: int = 0


@dataclass(frozen=True, slots=True)
class CancelCheckpointMarker:
    """Tells downstream tasks that checkpoint `id` was aborted upstream."""

    id: int


@dataclass(frozen=True, slots=True)
class EndOfPartition:
    """The sender has no more data on this channel."""


@dataclass(frozen=True, slots=True)
class Watermark:
    """Event time has reached `timestamp` on this channel: no record with a timestamp at or below
    it follows (Flink's `Watermark`). In the unit the timestamp assigner returns; `-inf` is none
    yet, `+inf` the end of input (every event-time timer fires)."""

    timestamp: float

    @property
    def size_bytes(self) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class WatermarkStatus:
    """The sender's watermark is idle (`idle`: it will not advance for a while, so receivers leave
    this channel out of their minimum) or active again (Flink's `WatermarkStatus`)."""

    idle: bool

    @property
    def size_bytes(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "WatermarkStatus.IDLE" if self.idle else "WatermarkStatus.ACTIVE"


WatermarkStatus.IDLE = WatermarkStatus(True)  # type: ignore[attr-defined]
WatermarkStatus.ACTIVE = WatermarkStatus(False)  # type: ignore[attr-defined]

Event = CheckpointBarrier | CancelCheckpointMarker | EndOfPartition | Watermark | WatermarkStatus
#: what travels in order with data and becomes channel state with it
DataEvent = Watermark | WatermarkStatus
#: one entry of input or output channel state: a buffer, or a watermark event between buffers
ChannelItem = Buffer | Watermark | WatermarkStatus

_EVENT_KEY = b"barrierflow.event"


def sealed(items: Iterable[ChannelItem]) -> list[ChannelItem]:
    """`items` becoming channel state: each buffer's batch built now (`Buffer.seal`), so what is
    persisted is the records as they were in flight."""
    return [item.seal() if isinstance(item, Buffer) else item for item in items]


def channel_state_batch(item: ChannelItem) -> pa.RecordBatch:
    """`item` as a batch of channel-state files: a buffer's batch, or a one-row batch marked as a
    watermark (`timestamp`) or watermark status (`idle`) in its schema metadata."""
    if isinstance(item, Buffer):
        return item.batch
    if isinstance(item, Watermark):
        batch = pa.RecordBatch.from_pydict({"timestamp": [item.timestamp]})
        kind = b"watermark"
    else:
        batch = pa.RecordBatch.from_pydict({"idle": [item.idle]})
        kind = b"watermark_status"
    return batch.replace_schema_metadata({_EVENT_KEY: kind})


def channel_state_item(batch: pa.RecordBatch) -> ChannelItem:
    """The channel-state entry `batch` was written from (`channel_state_batch`)."""
    meta = batch.schema.metadata
    kind = meta.get(_EVENT_KEY) if meta else None
    if kind is None:
        return Buffer.of(batch)
    if kind == b"watermark":
        return Watermark(batch.column(0)[0].as_py())
    if kind == b"watermark_status":
        return WatermarkStatus(bool(batch.column(0)[0].as_py()))
    raise ValueError(f"channel state holds an unknown event kind {kind!r}")


@dataclass(frozen=True, slots=True)
class BufferOrEvent:
    """One item on input channel `channel`: a `Buffer` or an event."""

    channel: int
    payload: Buffer | Event

    @property
    def is_buffer(self) -> bool:
        return isinstance(self.payload, Buffer)

    @property
    def is_event(self) -> bool:
        return not isinstance(self.payload, Buffer)

    @property
    def size_bytes(self) -> int:
        return self.payload.size_bytes if isinstance(self.payload, Buffer) else 0
