"""Watermark strategies: how records get their timestamps and streams their watermarks.

Theory of operation
-------------------
A `WatermarkStrategy` (PyFlink's names) pairs a timestamp assigner — `fn(record, previous)` with
`previous` the record's timestamp so far (None) — with a watermark generator, built afresh per
source split or per parallel instance of `assign_timestamps_and_watermarks`:

* `for_bounded_out_of_orderness(d)`: the watermark trails the highest timestamp seen by `d` and
  one unit (`BoundedOutOfOrdernessWatermarks`, Flink's `maxTimestamp - d - 1`: a record `d` behind
  the highest is still on time). Floats step to the next float below instead of one unit.
* `for_monotonous_timestamps()`: `d` = 0, for timestamps that never decrease.
* `no_watermarks()`: timestamps only; the watermark moves at the end of input alone.
* `.with_idleness(t)`: a generator that saw no record for `t` seconds of processing time (its
  clock: virtual on the simulator) marks its output idle, so receivers leave it out of their
  minimum, until its next record (`WatermarksWithIdleness`; inactivity starts at the first
  periodic check that sees none, as Flink's `IdlenessTimer`).

Generators only update a `WatermarkOutput` (the latest watermark, never backwards, and whether
idle); whoever owns the output (a source split, the assigner operator) decides what to emit,
every `env.set_auto_watermark_interval` seconds (`on_periodic_emit`). A generator that saw no
record emits nothing (`-inf` stays `-inf`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from operators.base import Clock, OperatorError, Record
from operators.timestamps import (
    MIN_WATERMARK,
    TIMESTAMP_FIELD,
    check_timestamp,
    last_instant_before,
    split_batch,
    with_timestamp_column,
)

__all__ = [
    "BoundedOutOfOrdernessWatermarks",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarkStrategy",
    "WatermarksWithIdleness",
    "bounded_watermark",
]


class WatermarkOutput:
    """What a generator emits to: the latest watermark (never backwards) and the idle flag.

    Emitting a watermark marks the output active again (Flink's `WatermarkOutput`)."""

    __slots__ = ("idle", "watermark")

    def __init__(self, watermark: float = MIN_WATERMARK) -> None:
        self.watermark = watermark
        self.idle = False

    def emit_watermark(self, watermark: float) -> None:
        self.idle = False
        if watermark > self.watermark:
            self.watermark = watermark

    def mark_idle(self) -> None:
        self.idle = True

    def mark_active(self) -> None:
        self.idle = False

    def __repr__(self) -> str:
        return f"WatermarkOutput({self.watermark}{', idle' if self.idle else ''})"


class WatermarkGenerator:
    """Flink's `WatermarkGenerator`: told of each record's timestamp (or of a batch's highest),
    asked periodically for the watermark. The base class emits none."""

    def on_event(self, timestamp: Any, output: WatermarkOutput) -> None:  # noqa: B027
        """A record with `timestamp` passed (or a batch whose highest timestamp it is)."""

    def on_periodic_emit(self, output: WatermarkOutput) -> None:  # noqa: B027
        """Emit the current watermark, if any."""


class BoundedOutOfOrdernessWatermarks(WatermarkGenerator):
    """Watermark = highest timestamp - `max_out_of_orderness` - one unit (see the module docstring)."""

    def __init__(self, max_out_of_orderness: float) -> None:
        self.max_out_of_orderness = max_out_of_orderness
        self.max_timestamp: Any = None

    def on_event(self, timestamp: Any, output: WatermarkOutput) -> None:
        if self.max_timestamp is None or timestamp > self.max_timestamp:
            self.max_timestamp = timestamp

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self.max_timestamp is not None:
            output.emit_watermark(bounded_watermark(self.max_timestamp, self.max_out_of_orderness))


def bounded_watermark(max_timestamp: Any, delay: Any) -> float:
    """`max_timestamp - delay - 1` for ints (Flink's rule), the next float below
    `max_timestamp - delay` otherwise."""
    return last_instant_before(max_timestamp - delay)


class WatermarksWithIdleness(WatermarkGenerator):
    """Wraps a generator: idle after `timeout` seconds (of `clock`) without a record."""

    def __init__(self, watermarks: WatermarkGenerator, timeout: float, clock: Clock) -> None:
        self.watermarks = watermarks
        self.timeout = timeout
        self.clock = clock
        self._events = 0
        self._events_seen = 0
        self._inactive_since: float | None = None
        self._idle = False

    def on_event(self, timestamp: Any, output: WatermarkOutput) -> None:
        self.watermarks.on_event(timestamp, output)
        self._events += 1
        if self._idle:
            self._idle = False
            output.mark_active()

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self._is_idle():
            if not self._idle:
                self._idle = True
                output.mark_idle()
        else:
            self.watermarks.on_periodic_emit(output)

    def pause(self, seconds: float) -> None:
        """Do not count the last `seconds` as inactivity (a backpressured source read nothing)."""
        if self._inactive_since is not None:
            self._inactive_since += seconds

    def _is_idle(self) -> bool:
        if self._events != self._events_seen:
            self._events_seen = self._events
            self._inactive_since = None
            return False
        now = self.clock.now()
        if self._inactive_since is None:
            self._inactive_since = now
            return False
        return now - self._inactive_since > self.timeout


#: a timestamp assigner: `fn(record, previous_timestamp) -> timestamp`, an object with PyFlink's
#: `extract_timestamp(value, record_timestamp)`, or a column name (the record's value there)
TimestampAssigner = Callable[[Record, Any], Any] | str | Any


class WatermarkStrategy:
    """How a stream gets timestamps and watermarks (PyFlink's `WatermarkStrategy`).

    Use the constructors: `for_bounded_out_of_orderness(d)`, `for_monotonous_timestamps()`,
    `no_watermarks()`; then `with_timestamp_assigner(fn)` and `with_idleness(t)` return changed
    copies. Without an assigner a record keeps the timestamp it has (one is required then).
    """

    def __init__(self, max_out_of_orderness: float | None, assigner: TimestampAssigner | None = None,
                 idleness: float | None = None) -> None:
        self.max_out_of_orderness = max_out_of_orderness
        self.assigner = assigner
        self.idleness = idleness

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: float) -> WatermarkStrategy:
        """Watermarks trailing the highest timestamp by `max_out_of_orderness` (in the unit of
        the timestamps).

        Raises:
            ValueError: `max_out_of_orderness` is not a number >= 0.
        """
        if not check_timestamp(max_out_of_orderness) or max_out_of_orderness < 0:
            raise ValueError("WatermarkStrategy.for_bounded_out_of_orderness: the bound must be a finite "
                             f"number >= 0 (in the unit of the timestamps), got {max_out_of_orderness!r}")
        return WatermarkStrategy(max_out_of_orderness)

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Watermarks for timestamps that never decrease (one unit below the highest)."""
        return WatermarkStrategy(0)

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        """Timestamps without watermarks (the watermark jumps to `+inf` at the end of input)."""
        return WatermarkStrategy(None)

    def with_timestamp_assigner(self, assigner: TimestampAssigner) -> WatermarkStrategy:
        """A copy whose records get `assigner(record, previous_timestamp)` as their timestamp.

        `assigner` may also be an object with `extract_timestamp(value, record_timestamp)`
        (PyFlink's `TimestampAssigner`) or a column name: then vectorised sources and operators
        take the column as it is, without a dict per record.

        Raises:
            ValueError: `assigner` is none of these.
        """
        if not (callable(assigner) or isinstance(assigner, str) or callable(getattr(assigner, "extract_timestamp", None))):
            raise ValueError("with_timestamp_assigner: expected fn(record, previous_timestamp), an object with "
                             f"extract_timestamp(value, record_timestamp) or a column name, got {assigner!r}")
        return WatermarkStrategy(self.max_out_of_orderness, assigner, self.idleness)

    def with_idleness(self, timeout: float) -> WatermarkStrategy:
        """A copy that marks a split or subtask idle after `timeout` seconds without records.

        Raises:
            ValueError: `timeout` is not a number > 0.
        """
        if not check_timestamp(timeout) or not timeout > 0:
            raise ValueError(f"with_idleness: the timeout must be a number > 0 (seconds), got {timeout!r}")
        return WatermarkStrategy(self.max_out_of_orderness, self.assigner, timeout)

    # ------------------------------------------------------------------ used by sources and operators

    def create_generator(self, clock: Clock) -> WatermarkGenerator:
        """A fresh generator (per source split, per operator instance)."""
        generator = WatermarkGenerator() if self.max_out_of_orderness is None else \
            BoundedOutOfOrdernessWatermarks(self.max_out_of_orderness)
        if self.idleness is not None:
            return WatermarksWithIdleness(generator, self.idleness, clock)
        return generator

    def assign(self, records: list[Record], operator: str) -> tuple[list[Record], Any]:
        """`records` with their timestamps (copies), and the highest timestamp (None: no records).

        Raises:
            OperatorError: the assigner failed or returned no timestamp (names `operator` and the record).
        """
        assigner = self.assigner
        if isinstance(assigner, str):
            column = assigner
            extract = lambda record, previous: record[column]  # noqa: E731
        elif assigner is None:
            extract = _previous
        else:
            extract = getattr(assigner, "extract_timestamp", assigner)
        out: list[Record] = []
        highest: Any = None
        record: Any = None
        try:
            for record in records:
                previous = record.get(TIMESTAMP_FIELD)
                value = record if previous is None else {k: v for k, v in record.items() if k != TIMESTAMP_FIELD}
                timestamp = extract(value, previous)
                if not check_timestamp(timestamp):
                    raise TypeError(_bad_timestamp(timestamp, assigner))
                if highest is None or timestamp > highest:
                    highest = timestamp
                stamped = dict(value)
                stamped[TIMESTAMP_FIELD] = timestamp
                out.append(stamped)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(operator, record, exc) from exc
        return out, highest

    def assign_batch(self, batch: pa.RecordBatch, operator: str) -> tuple[pa.RecordBatch | list[Record], Any]:
        """`assign` for an Arrow batch: a column assigner stays vectorised (a batch comes back),
        a function takes the records path."""
        column = self.assigner if isinstance(self.assigner, str) else None
        if column is None:
            if self.assigner is None and TIMESTAMP_FIELD in batch.schema.names:
                column = TIMESTAMP_FIELD
            else:
                return self.assign(batch.to_pylist(), operator)
        values, _ = split_batch(batch)
        if column not in batch.schema.names:
            return self.assign(batch.to_pylist(), operator)  # the records path names the record
        timestamps = batch.column(column)
        kind = timestamps.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)) or timestamps.null_count or (
                pa.types.is_floating(kind) and len(timestamps) and not pc.all(pc.is_finite(timestamps)).as_py()):
            return self.assign(batch.to_pylist(), operator)
        if not len(timestamps):
            return values, None
        if pa.types.is_integer(kind):
            timestamps = timestamps.cast(pa.int64())
        return with_timestamp_column(values, timestamps), pc.max(timestamps).as_py()

    def __repr__(self) -> str:
        parts = ["no watermarks" if self.max_out_of_orderness is None else
                 f"bounded out of orderness {self.max_out_of_orderness}"]
        if self.assigner is not None:
            parts.append(f"assigner {self.assigner!r}")
        if self.idleness is not None:
            parts.append(f"idleness {self.idleness} s")
        return f"WatermarkStrategy({', '.join(parts)})"


def _previous(record: Record, previous: Any) -> Any:
    return previous


def _bad_timestamp(timestamp: Any, assigner: Any) -> str:
    if assigner is None:
        return ("the record has no timestamp and the watermark strategy no timestamp assigner: "
                "use with_timestamp_assigner(fn)")
    return (f"the timestamp assigner returned {type(timestamp).__name__} {timestamp!r}, expected an int "
            "or a finite float")

