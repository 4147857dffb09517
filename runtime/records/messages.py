"""What travels over a channel: data buffers and in-band events.

A channel carries `BufferOrEvent`s in FIFO order. Data travels in `Buffer`s (one
`pyarrow.RecordBatch` of many records); checkpoint barriers, cancellation markers, watermarks,
watermark statuses and the end-of-partition marker travel between buffers as events.

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
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from runtime.records.record_types import RecordConversionError, StreamSchema


@dataclass(frozen=True, eq=False, slots=True)
class Buffer:
    """A data buffer: one Arrow record batch.

    `to_records()` is cached because operators read the same buffer once per record path; the
    cache is an implementation detail and is not pickled.
    """

    batch: pa.RecordBatch
    _records: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    _size_bytes: int | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], schema: pa.Schema | None = None, *, checked: bool = False
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
        executor; they pass `checked=True`. Called directly, the records of this buffer are
        checked as one stream. With `schema`, the records are converted to it as Arrow does.

        Raises:
            RecordTypeError: a record breaks the rule (a `RecordConversionError`); the message
                names the field, the types and the record.
            RecordConversionError: Arrow could not convert the records otherwise; names a record.
        """
        rows = [r if isinstance(r, dict) else dict(r) for r in records]
        if not checked and schema is None:
            StreamSchema("records given to Buffer.from_records").check_records(rows)
        uniform = True
        try:
            if schema is not None or not rows:
                batch = pa.RecordBatch.from_pylist(rows, schema=schema)
            elif (columns := _uniform_columns(rows)) is not None:
                batch = pa.RecordBatch.from_pydict(columns)
            else:
                uniform = False
                # a buffer is columnar: a record lacking a field its buffer-mates have gets None
                # (from_pylist would silently keep only the first record's fields)
                names = list(dict.fromkeys(k for r in rows for k in r))
                batch = pa.RecordBatch.from_pydict({k: [r.get(k) for r in rows] for k in names})
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            if schema is None and checked:
                # not expected after the caller's check; say which record and field if the rule can
                StreamSchema("records given to Buffer.from_records").check_records(rows)
            bad = _first_unconvertible(rows)
            raise RecordConversionError(
                f"record {bad!r} cannot be carried in an Arrow buffer: {exc}"
            ) from exc
        return cls(batch, rows if uniform else None)

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> Buffer:
        return cls(batch, None)

    def to_records(self) -> list[dict[str, Any]]:
        """The records as dicts (a fresh list; the dicts are shared, treat them as read-only)."""
        if self._records is None:
            object.__setattr__(self, "_records", self.batch.to_pylist())
        return list(self._records)  # type: ignore[arg-type]

    @property
    def num_records(self) -> int:
        return self.batch.num_rows

    def __len__(self) -> int:
        return self.batch.num_rows

    @property
    def size_bytes(self) -> int:
        # cached: RecordBatch.nbytes walks every buffer (~10 µs), and the gate asks per held buffer
        if self._size_bytes is None:
            object.__setattr__(self, "_size_bytes", self.batch.nbytes)
        return self._size_bytes  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Buffer) and self.batch.equals(other.batch)

    def __hash__(self) -> int:  # buffers are values but not used as keys; keep it cheap
        return hash((self.batch.num_rows, tuple(self.batch.schema.names)))

    def __reduce__(self):  # do not ship the python-object cache
        return (Buffer.of, (self.batch,))

    def __repr__(self) -> str:
        return f"Buffer(records={self.num_records}, bytes={self.size_bytes})"


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
