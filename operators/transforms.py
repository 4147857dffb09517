"""Stateless record transformations: map, filter, flat_map, map_batches (and union's pass-through).

Each operator runs its user function over one input buffer's records (`process_batch`), keeping
the per-record loop tight. A failing user function becomes `OperatorError(operator, record,
cause)`, and a result of the wrong type is reported the same way, naming the operator and the
input record, so a bad record is never silently dropped.

On an event-time stream the functions see records without their timestamp field, and what they
return carries the input record's timestamp (`operators.timestamps`), as in Flink.

User functions are shared, not copied, between the parallel instances of an operator on the
simulator (on Ray every task gets its own deserialised copy): they should not keep state —
that is what keyed state is for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from operators.base import OperatorError, Record, StreamOperator
from operators.columns import as_batch, to_record_batch
from operators.timestamps import (
    TIMESTAMP_FIELD,
    has_timestamps,
    split_batch,
    stamp,
    value_of,
    with_timestamp_column,
)


def _wrong_type(operator: str, record: Any, result: Any, expected: str) -> OperatorError:
    return OperatorError(
        operator,
        record,
        TypeError(f"the function returned {type(result).__name__} {result!r}, expected {expected}"),
    )


class MapOperator(StreamOperator):
    """One output record per input record: `fn(record) -> dict`."""

    def __init__(self, fn: Callable[[Record], Record], name: str = "map") -> None:
        self.fn = fn
        self.name = name

    def process_batch(self, records: list[Record]) -> list[Record]:
        fn = self.fn
        stamped = has_timestamps(records)
        out: list[Record] = []
        append = out.append
        try:
            for record in records:
                if stamped:
                    value = value_of(record)
                    result = fn(value)
                else:
                    result = fn(record)
                if type(result) is not dict and not isinstance(result, dict):
                    raise _wrong_type(self.name, record, result, "a dict")
                append(stamp(result, record.get(TIMESTAMP_FIELD), value) if stamped else result)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.name, records[len(out)], exc) from exc
        return out


class FilterOperator(StreamOperator):
    """Keeps the records for which `fn(record)` is truthy."""

    def __init__(self, fn: Callable[[Record], Any], name: str = "filter") -> None:
        self.fn = fn
        self.name = name

    def process_batch(self, records: list[Record]) -> list[Record]:
        fn = self.fn
        index = 0
        stamped = has_timestamps(records)
        try:
            kept = []
            for index, record in enumerate(records):  # noqa: B007 - index names the failing record
                if fn(value_of(record) if stamped else record):
                    kept.append(record)
        except Exception as exc:
            raise OperatorError(self.name, records[index], exc) from exc
        return kept


class FlatMapOperator(StreamOperator):
    """Zero or more output records per input record: `fn(record)` returns an iterable of dicts
    (a generator function is fine) or None for nothing."""

    def __init__(self, fn: Callable[[Record], Iterable[Record] | None], name: str = "flat_map") -> None:
        self.fn = fn
        self.name = name

    def process_batch(self, records: list[Record]) -> list[Record]:
        fn = self.fn
        stamped = has_timestamps(records)
        out: list[Record] = []
        append = out.append
        record: Any = None
        try:
            for record in records:
                timestamp = record.get(TIMESTAMP_FIELD) if stamped else None
                results = fn(value_of(record) if stamped else record)
                if results is None:
                    continue
                if isinstance(results, dict | str | bytes):
                    raise _wrong_type(self.name, record, results, "an iterable of dicts")
                for result in results:
                    if type(result) is not dict and not isinstance(result, dict):
                        raise _wrong_type(self.name, record, result, "dicts in the returned iterable")
                    append(stamp(result, timestamp) if stamped else result)
        except OperatorError:
            raise
        except TypeError as exc:
            if "not iterable" in str(exc):
                raise OperatorError(self.name, record, TypeError(f"flat_map function must return an iterable of dicts: {exc}")) from exc
            raise OperatorError(self.name, record, exc) from exc
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out


class MapBatchesOperator(StreamOperator):
    """Vectorised map: `fn(pyarrow.RecordBatch) -> pyarrow.RecordBatch | pyarrow.Table`, once per
    input buffer (empty buffers are skipped). The output may have any number of rows, and stays
    an Arrow batch for the operators after it that take columns. On an event-time stream `fn`
    gets the batch without its timestamp column; an output with as many rows as the input takes
    the input's timestamps row by row (a map), one with another number of rows has none."""

    accepts_columns = True
    prefers_columns = True

    def __init__(self, fn: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table], name: str = "map_batches") -> None:
        self.fn = fn
        self.name = name

    def process_batch(self, records: list[Record]) -> list[Record]:
        if not records:
            return []
        return self.process_columns(as_batch(records, self.name)).to_pylist()

    def process_columns(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        batch, timestamps = split_batch(batch)
        try:
            result = self.fn(batch)
        except Exception as exc:
            raise OperatorError(self.name, _describe_batch(batch), exc) from exc
        if not isinstance(result, pa.RecordBatch | pa.Table):
            raise OperatorError(
                self.name,
                _describe_batch(batch),
                TypeError(f"map_batches function returned {type(result).__name__}, expected a pyarrow RecordBatch or Table"),
            )
        result = to_record_batch(result)
        if timestamps is not None and result.num_rows == len(timestamps):
            return with_timestamp_column(result, timestamps)
        return result


def _describe_batch(batch: pa.RecordBatch) -> str:
    first = batch.slice(0, 1).to_pylist()
    return f"<batch of {batch.num_rows} records, first {first[0] if first else None!r}>"


class PassThroughOperator(StreamOperator):
    """Forwards records unchanged (the operator of a `union`)."""

    def __init__(self, name: str = "union") -> None:
        self.name = name

    accepts_columns = True

    def process_batch(self, records: list[Record]) -> list[Record]:
        return records

    def process_columns(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch
