"""Data in a task's chain: a list of dict records, or one `pyarrow.RecordBatch`.

Theory of operation
-------------------
Records travel through an operator chain one buffer at a time. Per-record operators (`map`,
`filter`, keyed functions) work on lists of dicts; vectorised operators (`map_batches`, the keyed
`count`, `CollectSink`) also take Arrow batches (`StreamOperator.accepts_columns`), so a chain of
them never builds a dict: a vectorised source's batch is partitioned, shipped and counted as
columns. The task converts only where a chain changes from one kind to the other:

* batch -> records (`as_records`): `RecordBatch.to_pylist()`, exact for every Arrow type.
* records -> batch (`as_batch`): through `Buffer.from_records`'s rules (one Arrow type per field;
  a record lacking a field its buffer-mates have gets None); a record Arrow cannot carry raises
  `OperatorError` naming the operator that needed the batch and the record. In a task, the records
  were checked for the rule before, in stream order (`runtime/records/record_types.py`).

`concat` joins the pieces of an output buffer in order: consecutive batches of one schema into one
batch, consecutive record lists into one list (a mixed or schema-changing stream is carried as
several buffers, never dropped or coerced).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from operators.base import OperatorError, Record

#: what flows between operators: one buffer's worth of records, as dicts or as columns
Batch = list[Record] | pa.RecordBatch


def num_rows(data: Batch) -> int:
    return data.num_rows if isinstance(data, pa.RecordBatch) else len(data)


def as_records(data: Batch) -> list[Record]:
    """The records of `data` as dicts (a list the caller may keep)."""
    return data.to_pylist() if isinstance(data, pa.RecordBatch) else data


def as_batch(data: Batch, operator: str, *, checked: bool = False) -> pa.RecordBatch:
    """`data` as one Arrow batch (`checked`: as `Buffer.from_records`, the records were checked
    for one type per field already).

    Raises:
        OperatorError: a record cannot be represented in Arrow (names `operator` and the record).
    """
    if isinstance(data, pa.RecordBatch):
        return data
    from runtime.records.messages import Buffer, RecordConversionError

    try:
        return Buffer.from_records(data, checked=checked).batch
    except RecordConversionError as exc:
        raise OperatorError(operator, _first_record(exc, data), exc) from exc


def to_record_batch(result: Any) -> pa.RecordBatch:
    """A `RecordBatch` from a batch, or a Table (its chunks combined)."""
    if isinstance(result, pa.RecordBatch):
        return result
    table = result.combine_chunks()
    batches = table.to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return batches[0]


def concat(pieces: Sequence[Batch]) -> list[Batch]:
    """Join consecutive pieces into as few as possible, in order: runs of batches with one
    schema into one batch, runs of record lists into one list."""
    out: list[Batch] = []
    run: list[pa.RecordBatch] = []
    records: list[Record] = []

    def close_run() -> None:
        if run:
            out.append(run[0] if len(run) == 1 else pa.concat_batches(run))
            run.clear()

    def close_records() -> None:
        if records:
            out.append(list(records))
            records.clear()

    for piece in pieces:
        if isinstance(piece, pa.RecordBatch):
            if run and not piece.schema.equals(run[0].schema):
                close_run()
            close_records()
            run.append(piece)
        else:
            close_run()
            records.extend(piece)
    close_run()
    close_records()
    return out


def _first_record(exc: Exception, data: list[Record]) -> Any:
    text = str(exc)
    for record in data:
        if repr(record) in text:
            return record
    return data[0] if data else None


def compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` with buffers of its own size. A slice shares its parent's buffers, so a small slice
    of a big batch, queued (an output queue, an in-process receiver's gate during alignment), would
    keep the whole batch in memory."""
    if batch.get_total_buffer_size() > 2 * batch.nbytes + 4096:
        return batch.take(pa.array(range(batch.num_rows), type=pa.int64()))
    return batch


def encode_keys(values: pa.Array) -> tuple[list[Any], Any] | None:
    """The distinct keys of a key column and, per row, the index of its key (a numpy array), with
    the keys as the record path sees them (`to_pylist`) — or None when Arrow's idea of "distinct"
    can differ from Python's, and the caller must take the records path: floats (-0.0 == 0.0 and
    NaN != NaN in Python) and types Arrow cannot dictionary-encode."""
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_floating(values.type) or pa.types.is_nested(values.type):
        return None
    try:
        encoded = pc.dictionary_encode(values, null_encoding="encode")
    except pa.ArrowNotImplementedError:
        return None
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)


def first_record_with_key(batch: pa.RecordBatch, column: str, key: Any) -> Record | None:
    """The first record of `batch` whose `column` is `key` (to name it in an error; slow path)."""
    return next((r for r in batch.to_pylist() if r[column] is key or r[column] == key), None)
