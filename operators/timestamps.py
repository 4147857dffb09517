"""Record timestamps: how an event time travels with its record.

Theory of operation
-------------------
A record of an event-time stream carries its timestamp in the reserved field `TIMESTAMP_FIELD`:
through a chain as a dict key (or, in an Arrow batch, a column), across channels, into spilled
and channel-state buffers, unchanged. It is the number the timestamp assigner returned, in its
unit (ints stay ints unless a float shares the column: see the record type rules). A record
without a timestamp lacks the field or has None there.

User functions never see the field (Flink's `StreamRecord` keeps the timestamp beside the value):
the operators that call them hand over the record without it (`value_of`) and put the input's
timestamp on what they return (`stamp`), as Flink's operators do (a map keeps its input's
timestamp, a keyed process function's output gets the element's or the timer's); a sink strips
it. Whether a batch carries timestamps is read off its first record (`has_timestamps`): a batch
comes from one buffer or one operator call, whose records share their fields.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

#: the reserved record field (Arrow column) holding a record's event timestamp
TIMESTAMP_FIELD = "__timestamp"
#: the watermark before any: no event time has passed yet
MIN_WATERMARK = -math.inf
#: the watermark at the end of input: every event-time timer and window fires
MAX_WATERMARK = math.inf

Record = dict[str, Any]


def last_instant_before(end: Any) -> Any:
    """The last instant before `end`: `end - 1` in integer time (Flink's `maxTimestamp`), the float
    just below `end` otherwise (seconds are continuous: `end - 1` would lose a whole unit)."""
    if type(end) is int:
        return end - 1
    return math.nextafter(float(end), -math.inf)


def has_timestamps(records: list[Record]) -> bool:
    """Whether the batch `records` carries timestamps (the field is on its first record)."""
    return bool(records) and TIMESTAMP_FIELD in records[0]


def record_timestamp(record: Record) -> Any:
    """The timestamp of `record` (None: it has none)."""
    return record.get(TIMESTAMP_FIELD)


def value_of(record: Record) -> Record:
    """`record` as user functions see it: without its timestamp field (a copy when it has one)."""
    if TIMESTAMP_FIELD not in record:
        return record
    value = dict(record)
    del value[TIMESTAMP_FIELD]
    return value


def stamp(result: Record, timestamp: Any, value: Record | None = None) -> Record:
    """`result` (what a user function returned) carrying `timestamp` (None: none, but the field is
    there, so every record of a stamped batch has it): set in place when `result` is `value`, the
    copy `value_of` made for the call, else on a copy (the function may keep or share the dict
    it returned)."""
    if result is value:
        result[TIMESTAMP_FIELD] = timestamp
        return result
    stamped = dict(result)
    stamped[TIMESTAMP_FIELD] = timestamp
    return stamped


def strip(records: list[Record]) -> list[Record]:
    """`records` without their timestamps (what a sink keeps)."""
    return [value_of(r) for r in records] if has_timestamps(records) else records


def batch_has_timestamps(batch: pa.RecordBatch) -> bool:
    return TIMESTAMP_FIELD in batch.schema.names


def split_batch(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.Array | None]:
    """`batch` without its timestamp column, and that column (None: it has none)."""
    names = batch.schema.names
    if TIMESTAMP_FIELD not in names:
        return batch, None
    index = names.index(TIMESTAMP_FIELD)
    return batch.remove_column(index), batch.column(index)


def with_timestamp_column(batch: pa.RecordBatch, timestamps: pa.Array | None) -> pa.RecordBatch:
    """`batch` carrying `timestamps` (one per row) as its timestamp column (None: unchanged)."""
    if timestamps is None:
        return batch
    names = batch.schema.names
    if TIMESTAMP_FIELD in names:
        return batch.set_column(names.index(TIMESTAMP_FIELD), TIMESTAMP_FIELD, timestamps)
    return batch.append_column(TIMESTAMP_FIELD, timestamps)


def check_timestamp(value: Any) -> bool:
    """Whether `value` can be an event timestamp: an int or a finite float (not a bool)."""
    t = type(value)
    return t is int or (t is float and math.isfinite(value))
