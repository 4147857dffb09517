"""Sources: deterministic, replayable inputs split into offset-addressed splits.

Theory of operation
-------------------
A `Source` describes *what* to read: a deterministic list of `SourceSplit`s (the same list on
every call, in every process). A source task reads the splits assigned to it
(`assign_splits`: split `index % parallelism == subtask`) through one `SplitReader` per split.

A reader is an offset cursor. `position` is the number of records it has emitted so far; that
number is the split's checkpointed state (the task snapshots `{split_id: position}`). Restoring is
`seek(position)`: the reader then emits exactly the records it would have emitted after its first
`position` records, which is what makes replay after a failure exact (sources rewind to
the checkpointed offsets).

Readers are pure: time comes from the `clock` handed to `Source.reader`, never from `time`.
A rate-limited reader returns `[]` from `read` when nothing is due yet and tells the task when
to come back through `next_ready_time()`.

Records handed out are fresh dicts (shallow copies for collections), so an operator that
mutates its input cannot change what a later replay reads. A vectorised generator
(`GeneratorSource(batch_fn=...)`) hands out Arrow record batches instead (immutable), so a chain of
vectorised operators never builds a dict.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from operators.base import Clock, OperatorError, Record
from operators.columns import to_record_batch

#: tolerance when turning elapsed time into a number of due records (float round-off must not
#: make a record due "at" t appear undue when the clock is set to exactly t)
_DUE_EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class SourceSplit:
    """One independently readable, offset-addressed part of a source.

    Attributes:
        split_id: stable identifier; the key of the split's offset in checkpoints.
        index: position in `Source.splits()`; decides which subtask reads it.
        start: first record (collection splits: index into the rows).
        end: one past the last record, or None when unbounded / decided by the reader.
    """

    split_id: str
    index: int
    start: int = 0
    end: int | None = None


class SplitReader(abc.ABC):
    """Reads one split. `position` = records emitted so far = the checkpointed offset."""

    split: SourceSplit
    position: int = 0

    @abc.abstractmethod
    def seek(self, position: int) -> None:
        """Continue as if `position` records had been emitted already (restore).

        Raises:
            ValueError: `position` is negative or beyond the end of the split.
        """

    @abc.abstractmethod
    def read(self, max_records: int) -> list[Record] | pa.RecordBatch:
        """Up to `max_records` next records; `[]` when nothing is due yet or the split ended."""

    @abc.abstractmethod
    def finished(self) -> bool:
        """True once every record of the split was emitted."""

    def next_ready_time(self) -> float | None:
        """When `read` will return data again, if it would return nothing now.

        Returns None when a record is available now or the split is finished; otherwise the clock
        time (seconds) at which the next record becomes due.
        """
        return None

    def lag(self) -> float | None:
        """How long overdue the next record is (seconds; 0 when none is overdue or the split
        ended), for a split read at a rate; None for one read as fast as it can."""
        return None


class Source(abc.ABC):
    """A replayable input: a deterministic list of splits and a reader per split."""

    name: str = "source"

    @abc.abstractmethod
    def splits(self) -> list[SourceSplit]:
        """All splits, in a deterministic order (`split.index` == position in the list)."""

    @abc.abstractmethod
    def reader(self, split: SourceSplit, clock: Clock) -> SplitReader:
        """A fresh reader positioned at the start of `split`."""

    def columns(self) -> list[str] | None:
        """The record fields, when known before running (used to validate `key_by("col")`)."""
        return None

    def expected_records(self) -> int:
        """Total records over all splits in a failure-free run, or 0 when unknown (unbounded).

        Executors use it to place faults and report progress, never for correctness.
        """
        return 0


def assign_splits(splits: Sequence[SourceSplit], parallelism: int, subtask: int) -> list[SourceSplit]:
    """The splits subtask `subtask` of `parallelism` reads: those with `index % parallelism == subtask`.

    Raises:
        ValueError: `subtask` is not in `range(parallelism)`.
    """
    if parallelism < 1 or not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} is not in range(parallelism={parallelism})")
    return [s for s in splits if s.index % parallelism == subtask]


def _check_position(reader: SplitReader, position: int, limit: int | None) -> None:
    if not isinstance(position, int) or position < 0 or (limit is not None and position > limit):
        bound = "" if limit is None else f" (the split has {limit} records)"
        raise ValueError(f"cannot seek split {reader.split.split_id!r} to position {position!r}{bound}")


# ---------------------------------------------------------------------------------- collection


class CollectionSource(Source):
    """A list of dict rows cut into `splits` contiguous chunks (sizes differ by at most one).

    Args:
        rows: the records; each must be a dict.
        splits: number of splits (>= 1); more splits than rows leaves some splits empty.
        name: the source name (`"collection"`).

    Raises:
        TypeError: a row is not a dict (names its index).
        ValueError: `splits` < 1.
    """

    def __init__(self, rows: Sequence[Record], splits: int = 1, name: str = "collection") -> None:
        if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
            raise ValueError(f"from_collection: splits must be an integer >= 1, got {splits!r}")
        rows = list(rows)
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise TypeError(
                    f"from_collection: row {index} is a {type(row).__name__}, not a dict: {row!r}"
                )
        self.rows = rows
        self.num_splits = splits
        self.name = name

    def splits(self) -> list[SourceSplit]:
        size, extra = divmod(len(self.rows), self.num_splits)
        out, start = [], 0
        for index in range(self.num_splits):
            end = start + size + (1 if index < extra else 0)
            out.append(SourceSplit(f"{self.name}-{index}", index, start, end))
            start = end
        return out

    def reader(self, split: SourceSplit, clock: Clock) -> CollectionSplitReader:
        return CollectionSplitReader(self.rows, split)

    def expected_records(self) -> int:
        return len(self.rows)

    def columns(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            for key in row:
                seen.setdefault(key, None)
        return list(seen)


class CollectionSplitReader(SplitReader):
    """Reads rows `[split.start, split.end)` of a collection."""

    def __init__(self, rows: list[Record], split: SourceSplit) -> None:
        assert split.end is not None and 0 <= split.start <= split.end <= len(rows), split
        self.rows = rows
        self.split = split
        self.position = 0
        self._size = split.end - split.start

    def seek(self, position: int) -> None:
        _check_position(self, position, self._size)
        self.position = position

    def read(self, max_records: int) -> list[Record]:
        begin = self.split.start + self.position
        end = min(begin + max(0, max_records), self.split.start + self._size)
        batch = [dict(row) for row in self.rows[begin:end]]
        self.position += len(batch)
        return batch

    def finished(self) -> bool:
        return self.position >= self._size

    def __repr__(self) -> str:
        return f"CollectionSplitReader({self.split.split_id}, position={self.position}/{self._size})"


# ---------------------------------------------------------------------------------- generator


class GeneratorSource(Source):
    """Generates record `i` as `fn(i)` (default `{"i": i}`), optionally rate limited; or, with
    `batch_fn`, whole Arrow batches at once (vectorised).

    The record indices are interleaved over the splits: split `j` of `n` produces `j, j+n, j+2n,
    ...`, so the union over all splits is `0 .. count-1` whatever the number of splits.

    Args:
        count: total number of records, or None for unbounded.
        rate: total records per second over all splits (each split gets `rate / splits`); None =
            as fast as the task reads. Record `k` of a split is due `k / (rate / splits)` seconds
            after the reader started (or after the position it was restored to).
        fn: `fn(i) -> dict`; it must be deterministic for replay to be exact.
        batch_fn: instead of `fn`: `batch_fn(indices) -> pyarrow.RecordBatch | Table | dict of
            columns` with one row per index of the int64 numpy array `indices` (in order); the
            reader hands out the batch as it is (plus the timestamp column), no dicts built.
            Deterministic, like `fn`.
        rows_fn: instead of `fn`: `rows_fn(indices) -> list of fresh dicts`, one per index of the
            int64 numpy array `indices` (in order): records built together (e.g. from numpy
            columns), handed out as records. Deterministic, like `fn`.
        duration: stop after this many seconds. With `rate` this is a record budget
            (`floor(rate * duration)` records in total, deterministic); without `rate` it is
            measured on the task clock from the reader's creation (not deterministic under replay).
        splits: number of splits (>= 1).
        name: source name.
        timestamp_field: field stamped with the creation time, or None for no stamp. The stamp
            is *not* deterministic: a replayed record gets a new one.
        stamp: what the creation time is: "read" (the task clock when the record was read) or,
            with a `rate`, "due" (when the record was due under the rate: the open-loop schedule
            of an external stream, so the time a due record waited for its source to read it
            counts as latency, instead of being left out, i.e. no coordinated omission).
        read_ahead: with `batch_fn` or `rows_fn`, build at least this many records per call
            (never past the split's end) and hand the rest out as later reads ask for them, due
            or not yet: for functions whose cost per call dwarfs their cost per record (numpy
            columns), called by a task that reads a few records per step. 1 (default): each call
            builds exactly what is read. The records are the same either way (the functions are
            deterministic); a restore drops what was built ahead.

    Raises:
        ValueError: an argument out of range (the message names it).
    """

    def __init__(
        self,
        count: int | None = None,
        rate: float | None = None,
        fn: Callable[[int], Record] | None = None,
        duration: float | None = None,
        *,
        splits: int = 1,
        name: str = "generator",
        timestamp_field: str | None = "created_at",
        batch_fn: Callable[[np.ndarray], Any] | None = None,
        stamp: str = "read",
        rows_fn: Callable[[np.ndarray], list[Record]] | None = None,
        read_ahead: int = 1,
    ) -> None:
        if stamp not in ("read", "due"):
            raise ValueError(f"generate: stamp must be 'read' or 'due', got {stamp!r}")
        if stamp == "due" and rate is None:
            raise ValueError("generate: stamp='due' needs a rate (records are due under it)")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
            raise ValueError(f"generate: count must be an integer >= 0 or None, got {count!r}")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0):
            raise ValueError(f"generate: rate must be a number > 0 (records/s) or None, got {rate!r}")
        if duration is not None and (
            isinstance(duration, bool) or not isinstance(duration, int | float) or not duration >= 0
        ):
            raise ValueError(f"generate: duration must be a number >= 0 (seconds) or None, got {duration!r}")
        if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
            raise ValueError(f"generate: splits must be an integer >= 1, got {splits!r}")
        if fn is not None and not callable(fn):
            raise ValueError(f"generate: fn must be callable, got {fn!r}")
        if batch_fn is not None and not callable(batch_fn):
            raise ValueError(f"generate: batch_fn must be callable, got {batch_fn!r}")
        if rows_fn is not None and not callable(rows_fn):
            raise ValueError(f"generate: rows_fn must be callable, got {rows_fn!r}")
        if isinstance(read_ahead, bool) or not isinstance(read_ahead, int) or read_ahead < 1:
            raise ValueError(f"generate: read_ahead must be an integer >= 1, got {read_ahead!r}")
        if sum(f is not None for f in (fn, batch_fn, rows_fn)) > 1:
            raise ValueError("generate: give one of fn (one record per index), batch_fn (a batch per index array) "
                             "or rows_fn (records per index array)")
        self.batch_fn = batch_fn
        self.rows_fn = rows_fn
        self.count = count
        self.rate = float(rate) if rate is not None else None
        self.fn = fn
        self.duration = float(duration) if duration is not None else None
        self.num_splits = splits
        self.name = name
        self.timestamp_field = timestamp_field
        self.stamp = stamp
        self.read_ahead = read_ahead

    def total_records(self) -> int | None:
        """The total number of records over all splits, when bounded by count or rate * duration."""
        limits = []
        if self.count is not None:
            limits.append(self.count)
        if self.rate is not None and self.duration is not None:
            limits.append(int(self.rate * self.duration + _DUE_EPSILON))
        return min(limits) if limits else None

    def splits(self) -> list[SourceSplit]:
        total = self.total_records()
        out = []
        for index in range(self.num_splits):
            end = None if total is None else len(range(index, total, self.num_splits))
            out.append(SourceSplit(f"{self.name}-{index}", index, 0, end))
        return out

    def expected_records(self) -> int:
        return self.total_records() or 0

    def reader(self, split: SourceSplit, clock: Clock) -> GeneratorSplitReader:
        return GeneratorSplitReader(self, split, clock)

    def columns(self) -> list[str] | None:
        if self.fn is not None or self.batch_fn is not None or self.rows_fn is not None:
            return None
        return ["i"] + ([self.timestamp_field] if self.timestamp_field else [])


class GeneratorSplitReader(SplitReader):
    """Reads one split of a `GeneratorSource`; see there for the rate and duration rules."""

    def __init__(self, source: GeneratorSource, split: SourceSplit, clock: Clock) -> None:
        self.source = source
        self.split = split
        self.clock = clock
        self.position = 0
        self._stride = source.num_splits
        self._limit = split.end  # records in this split, None = unbounded
        self._rate = source.rate / source.num_splits if source.rate is not None else None
        self._started_at = clock.now()
        # wall-clock duration only applies without a rate (with a rate it became `_limit`)
        self._deadline = (
            self._started_at + source.duration if source.duration is not None and source.rate is None else None
        )
        #: what `batch_fn` / `rows_fn` built ahead (`read_ahead`): the records of positions
        #: `_ahead_from` on, a batch or a list
        self._ahead: Any = None
        self._ahead_from = 0

    def seek(self, position: int) -> None:
        _check_position(self, position, self._limit)
        self.position = position
        self._ahead = None
        if self._rate is not None:
            # the next record (number `position`) is due now; the pace continues from here
            self._started_at = self.clock.now() - position / self._rate

    def _due(self, now: float) -> int:
        """How many records of this split may have been emitted by `now`."""
        due = self._limit if self._limit is not None else self.position + (1 << 62)
        if self._rate is not None:
            due = min(due, int((now - self._started_at) * self._rate + _DUE_EPSILON) + 1)
        return due

    def read(self, max_records: int) -> list[Record] | pa.RecordBatch:
        if self.finished():
            return []
        now = self.clock.now()
        n = max(0, min(max_records, self._due(now) - self.position))
        if n == 0:
            return []
        if self.source.batch_fn is not None:
            batch = self._stamp_batch(self._built(n, self._build_batch), n, now)
            self.position += n
            return batch
        if self.source.rows_fn is not None:
            rows = self._stamp_rows(self._built(n, self._build_rows), n, now)
            self.position += n
            return rows
        fn, field = self.source.fn, self.source.timestamp_field
        first = self.split.index + self.position * self._stride
        indices = range(first, first + n * self._stride, self._stride)
        stamps = self._stamps(n, now)
        if fn is None:
            out: list[Record] = [{"i": i} for i in indices] if field is None else \
                [{"i": i, field: stamp} for i, stamp in zip(indices, stamps)]
        else:
            out = []
            append = out.append
            for i, stamp in zip(indices, stamps):
                try:
                    record = fn(i)
                except Exception as exc:
                    raise OperatorError(f"Source: {self.source.name}", i, exc) from exc
                if type(record) is not dict and not isinstance(record, dict):
                    raise OperatorError(
                        f"Source: {self.source.name}",
                        i,
                        TypeError(f"generator fn returned {type(record).__name__} {record!r}, expected a dict"),
                    )
                # a copy with the stamp: fn may return a shared dict
                append(record if field is None else {**record, field: stamp})
        self.position += n
        return out

    def _built(self, n: int, build: Callable[[int, int], Any]) -> Any:
        """The next `n` records (a batch or a list), from what was built ahead or built now: at
        least `read_ahead` of them (never past the split's end), from the current position."""
        ahead, offset = self._ahead, self.position - self._ahead_from
        if ahead is None or offset + n > len(ahead):
            count = max(n, self.source.read_ahead)
            if self._limit is not None:
                count = min(count, self._limit - self.position)
            ahead, offset = build(self.split.index + self.position * self._stride, count), 0
            self._ahead, self._ahead_from = (ahead, self.position) if count > n else (None, 0)
        if offset == 0 and n == len(ahead):
            return ahead
        return ahead.slice(offset, n) if isinstance(ahead, pa.RecordBatch) else ahead[offset:offset + n]

    def _build_batch(self, first: int, n: int) -> pa.RecordBatch:
        indices = np.arange(first, first + n * self._stride, self._stride, dtype=np.int64)
        what = f"Source: {self.source.name}"
        try:
            result = self.source.batch_fn(indices)  # type: ignore[misc]
            if isinstance(result, dict):
                result = pa.RecordBatch.from_pydict(result)
        except Exception as exc:
            raise OperatorError(what, f"<indices {first}..{indices[-1]}>", exc) from exc
        if isinstance(result, pa.Table):
            result = to_record_batch(result)
        if not isinstance(result, pa.RecordBatch) or result.num_rows != n:
            got = f"{result.num_rows} rows" if isinstance(result, pa.RecordBatch) else type(result).__name__
            raise OperatorError(what, f"<indices {first}..{indices[-1]}>", TypeError(
                f"batch_fn returned {got}, expected a RecordBatch, Table or dict of columns with {n} rows"))
        return result

    def _stamp_batch(self, batch: pa.RecordBatch, n: int, now: float) -> pa.RecordBatch:
        field = self.source.timestamp_field
        if field is None:
            return batch
        stamp = pa.array(self._stamps(n, now), type=pa.float64())
        if field in batch.schema.names:
            return batch.set_column(batch.schema.get_field_index(field), field, stamp)
        return batch.append_column(field, stamp)

    def _build_rows(self, first: int, n: int) -> list[Record]:
        indices = np.arange(first, first + n * self._stride, self._stride, dtype=np.int64)
        where = f"<indices {first}..{indices[-1]}>"
        try:
            rows = self.source.rows_fn(indices)  # type: ignore[misc]
        except Exception as exc:
            raise OperatorError(f"Source: {self.source.name}", where, exc) from exc
        if not isinstance(rows, list) or len(rows) != n or not all(type(r) is dict or isinstance(r, dict) for r in rows):
            got = f"a list of {len(rows)}" if isinstance(rows, list) else type(rows).__name__
            raise OperatorError(f"Source: {self.source.name}", where, TypeError(
                f"rows_fn returned {got}, expected a list of {n} dicts"))
        return rows

    def _stamp_rows(self, rows: list[Record], n: int, now: float) -> list[Record]:
        field = self.source.timestamp_field
        if field is not None:
            for row, stamp in zip(rows, self._stamps(n, now)):
                row[field] = stamp
        return rows

    def _stamps(self, n: int, now: float) -> list[float]:
        """The creation times of the next `n` records (read at `now`): `now` for each, or with
        `stamp="due"` when each was due under the rate."""
        if self.source.stamp == "due" and self._rate is not None:
            return (self._started_at + (self.position + np.arange(n)) / self._rate).tolist()
        return [now] * n

    def finished(self) -> bool:
        if self._limit is not None and self.position >= self._limit:
            return True
        return self._deadline is not None and self.clock.now() >= self._deadline

    def lag(self) -> float | None:
        if self._rate is None:
            return None
        if self.finished():
            return 0.0
        return max(0.0, self.clock.now() - (self._started_at + self.position / self._rate))

    def next_ready_time(self) -> float | None:
        if self._rate is None or self.finished():
            return None
        due_at = self._started_at + self.position / self._rate
        return due_at if due_at > self.clock.now() else None

    def __repr__(self) -> str:
        return f"GeneratorSplitReader({self.split.split_id}, position={self.position}, limit={self._limit})"
