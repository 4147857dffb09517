"""Windowed `count()` and `sum(field)`, vectorised over Arrow batches.

`WindowCountSumOperator` is a `WindowOperator` aggregating one number per key and window (the
count, or the sum of `field`) and emitting `{<key>: key, "window_start", "window_end", <"count" |
field>: n}` when a window fires. Record lists take the window operator's path. An Arrow batch of
an event-time tumbling or sliding stream keyed by a column, with the default trigger, is counted
in one pass: every (row, window) pair gets its window bounds from numpy arithmetic (the same the
assigner computes, float time included), the pairs are
grouped by (key, window) with a sort, and each group touches the state once — the accumulator
gets the group's count or sum and the trigger's and cleanup timers are registered, the same
state the record path leaves (sums of floats may round differently, since they are added in
another order). A batch with a row for a window the watermark already reached (a late record, or
one within the allowed lateness, which fires at once) takes the record path whole.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from operators.base import OperatorError, Record
from operators.columns import encode_keys, first_record_with_key
from operators.side_outputs import OutputTag
from operators.timestamps import TIMESTAMP_FIELD, last_instant_before
from operators.windows.assigners import (
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    WindowAssigner,
)
from operators.windows.functions import AggregateFunction, ProcessWindowFunction
from operators.windows.operator import WindowOperator
from operators.windows.triggers import EventTimeTrigger, Trigger

__all__ = ["WindowCountSumOperator"]


class _CountOrSum(AggregateFunction):
    def __init__(self, field: str | None) -> None:
        self.field = field

    def create_accumulator(self) -> Any:
        return 0

    def add(self, value: Record, accumulator: Any) -> Any:
        if self.field is None:
            return accumulator + 1
        try:
            return accumulator + value[self.field]
        except KeyError:
            raise KeyError(f"record has no field {self.field!r} to sum (window sum({self.field!r}))") from None

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        return a + b


class _KeyedResult(ProcessWindowFunction):
    def __init__(self, key_field: str, value_field: str) -> None:
        self.key_field = key_field
        self.value_field = value_field

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        window = context.window()
        return [{self.key_field: key, "window_start": window.start, "window_end": window.end,
                 self.value_field: value} for value in elements]


class WindowCountSumOperator(WindowOperator):
    """Count or sum per key and window, vectorised over Arrow batches (see the module docstring).

    Args:
        field: the field to sum (None: count records).
        key_field: the output's key column.
        other arguments: as `WindowOperator`'s.
    """

    accepts_columns = True

    def __init__(self, assigner: WindowAssigner, key_selector: Any, key_field: str, field: str | None,
                 trigger: Trigger | None = None, allowed_lateness: Any = 0, late_tag: OutputTag | None = None,
                 name: str = "window-count") -> None:
        super().__init__(assigner, key_selector, "aggregate", _CountOrSum(field),
                         _KeyedResult(key_field, field or "count"), trigger, allowed_lateness, late_tag, name)
        self.field = field

    def _vectorisable(self, batch: pa.RecordBatch) -> str | None:
        """The key column when the batch can be counted vectorised, else None."""
        column = getattr(self.key_selector, "column", None)
        names = batch.schema.names
        if (column is None or column not in names or TIMESTAMP_FIELD not in names
                or type(self.assigner) not in (TumblingEventTimeWindows, SlidingEventTimeWindows)
                or type(self.trigger) is not EventTimeTrigger):
            return None
        timestamps = batch.column(TIMESTAMP_FIELD)
        if timestamps.null_count or not (pa.types.is_integer(timestamps.type) or pa.types.is_floating(timestamps.type)):
            return None
        if self.field is not None:
            if self.field not in names:
                return None
            values = batch.column(self.field)
            if values.null_count or not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
                return None
        return column

    def process_columns(self, batch: pa.RecordBatch) -> Any:
        column = self._vectorisable(batch)
        encoded = encode_keys(batch.column(column)) if column is not None else None
        if encoded is None:
            return self.process_batch(batch.to_pylist())
        keys, key_index = encoded
        timestamps = batch.column(TIMESTAMP_FIELD).to_numpy(zero_copy_only=False)
        rows, starts, ends = self._window_pairs(timestamps)
        last = ends - 1 if np.issubdtype(ends.dtype, np.integer) else np.nextafter(ends, -np.inf)
        if len(starts) and last.min() <= self.timer_service.current_watermark:
            return self.process_batch(batch.to_pylist())  # a late record, or one that fires at once
        pair_keys = key_index[rows]
        order = np.lexsort((starts, pair_keys))
        pair_keys, starts, ends, rows = pair_keys[order], starts[order], ends[order], rows[order]
        boundaries = np.flatnonzero((np.diff(pair_keys) != 0) | (np.diff(starts) != 0)) + 1
        group_starts = np.concatenate(([0], boundaries)) if len(rows) else np.array([], dtype=np.int64)
        if self.field is None:
            totals = np.diff(np.concatenate((group_starts, [len(rows)])))
        else:
            values = batch.column(self.field).to_numpy(zero_copy_only=False)[rows]
            totals = np.add.reduceat(values, group_starts) if len(rows) else values
        self._add_groups(keys, pair_keys[group_starts].tolist(), starts[group_starts].tolist(),
                         ends[group_starts].tolist(), totals.tolist(), batch, column)
        return []

    def _window_pairs(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (row, window start, window end) of the batch's rows, as three arrays: the bounds
        the assigner gives each row (ints on an integer grid, whatever the column's type)."""
        assigner = self.assigner
        size, offset = assigner.size, assigner.offset
        slide = getattr(assigner, "slide", size)
        integral = assigner.integral_grid()
        if np.issubdtype(timestamps.dtype, np.integer) and integral:
            last = timestamps - (timestamps - offset) % slide
            rows, starts = [], []
            for j in range(-(-size // slide)):
                start = last - j * slide
                valid = np.flatnonzero(start > timestamps - size)
                rows.append(valid)
                starts.append(start[valid])
            start_array = np.concatenate(starts)
            return np.concatenate(rows), start_array, start_array + size
        rows, start_array, end_array = _float_window_pairs(timestamps.astype(np.float64), offset, size, slide)
        if integral:  # offset + k * slide with ints: integral values
            return rows, start_array.astype(np.int64), end_array.astype(np.int64)
        return rows, start_array, end_array

    def _add_groups(self, keys: list[Any], key_indices: list[int], starts: list[Any], ends: list[Any],
                    totals: list[Any], batch: pa.RecordBatch, column: str) -> None:
        backend, contents, timers = self._backend, self.contents.contents, self.timer_service
        lateness = self.allowed_lateness
        key: Any = None
        try:
            for key_i, start, end, total in zip(key_indices, starts, ends, totals, strict=True):
                key = keys[key_i]
                backend.set_current_key(key)
                window = TimeWindow(start, end).key
                contents.put(window, contents.get(window, 0) + total)
                max_timestamp = last_instant_before(end)
                timers.register_event_time_timer(max_timestamp, window)
                if lateness:  # else the cleanup timer is the trigger's, registered just now
                    timers.register_event_time_timer(max_timestamp + lateness, window)
        except Exception as exc:
            raise OperatorError(self.name, first_record_with_key(batch, column, key), exc) from exc


def _float_window_pairs(t: np.ndarray, offset: Any, size: Any, slide: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_window_pairs` in float arithmetic: each window from its index `k`, as the assigner's float path."""
    k = np.floor((t - offset) / slide)
    while (below := offset + k * slide > t).any():  # rounding in the division: one step back
        k -= below
    while (beyond := offset + (k + 1) * slide <= t).any():
        k += beyond
    if slide == size:
        return np.arange(len(t)), offset + k * size, offset + (k + 1) * size
    rows, starts = [], []
    for j in range(math.ceil(size / slide) + 2):
        start = offset + (k - j) * slide
        valid = np.flatnonzero((start <= t) & (t < start + size))
        rows.append(valid)
        starts.append(start[valid])
    start_array = np.concatenate(starts)
    return np.concatenate(rows), start_array, start_array + size
