"""A bounded, mergeable histogram of durations (end-to-end latencies), HDR/DDSketch style.

Keeping every latency costs 8 bytes per record, so a long job's memory grew without bound.
`LatencyHistogram` keeps a fixed array of log-spaced buckets instead (~15 KB whatever the count):
bucket `i >= 1` holds the values in `(LOWEST * g**(i-1), LOWEST * g**i]` with
`g = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)`, and reports them as
`2 * LOWEST * g**i / (g + 1)`, which is within `RELATIVE_ERROR` (1 %) of every value in the bucket.
Count, sum (so the mean), min and max are exact; a percentile is within 1 % of the exact
nearest-rank percentile (`sorted(values)[round(q / 100 * (n - 1))]`) for values in
`(LOWEST, HIGHEST]`, i.e. 1 ns to ~116 days; values at or below `LOWEST` (zero, a negative clock
skew) share bucket 0, reported as 0 clamped to the exact min. Histograms merge by adding buckets,
so per-task histograms add up to the job's. Values are buffered and bucketed 4,096 at a time in one
numpy pass, so recording costs about what appending to an `array` did.

Pure: numpy and math only.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

RELATIVE_ERROR = 0.01
LOWEST = 1e-9
HIGHEST = 1e7

_GAMMA = (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR)
_INV_LN_GAMMA = 1.0 / math.log(_GAMMA)
_LN_LOWEST = math.log(LOWEST)
NUM_BUCKETS = math.ceil((math.log(HIGHEST) - _LN_LOWEST) * _INV_LN_GAMMA) + 1
#: values are buffered (8 bytes each) and bucketed in one numpy pass per this many: the record path
#: then costs what appending to an array did, and the buffer bounds the memory
_FLUSH_AT = 4096


def _representative(index: int) -> float:
    return 0.0 if index == 0 else 2.0 * LOWEST * _GAMMA**index / (_GAMMA + 1.0)


class LatencyHistogram:
    """Durations in seconds, in `NUM_BUCKETS` log-spaced buckets (see the module docstring).

    `len(h)` is the exact number of values recorded.
    """

    __slots__ = ("_counts", "_count", "_total", "_min", "_max", "_pending")

    def __init__(self) -> None:
        self._counts = np.zeros(NUM_BUCKETS, dtype=np.int64)
        self._count = 0
        self._total = 0.0
        self._min = math.inf
        self._max = -math.inf
        self._pending = array("d")

    # -- recording --

    def record(self, value: float) -> None:
        """Add one duration (seconds)."""
        self._pending.append(value)
        if len(self._pending) >= _FLUSH_AT:
            self._flush()

    def record_many(self, values: Iterable[float]) -> None:
        """Add durations given as Python floats."""
        self._pending.extend(values)
        if len(self._pending) >= _FLUSH_AT:
            self._flush()

    def record_array(self, values: np.ndarray) -> None:
        """Add the durations of a numpy array (one call per buffer on the columnar path)."""
        values = values.astype(np.float64, copy=False)
        if values.size >= _FLUSH_AT:
            self._add(values)
            return
        self._pending.frombytes(values.tobytes())
        if len(self._pending) >= _FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            view = np.frombuffer(self._pending, dtype=np.float64)
            self._add(view)
            del view  # the array cannot shrink while numpy holds its buffer
            del self._pending[:]

    def _add(self, values: np.ndarray) -> None:
        self._count += int(values.size)
        self._total += float(values.sum())
        self._min = min(self._min, float(values.min()))
        self._max = max(self._max, float(values.max()))
        index = np.log(np.fmax(values, LOWEST))  # fmax: NaN -> LOWEST (bucket 0)
        index -= _LN_LOWEST
        index *= _INV_LN_GAMMA
        np.ceil(index, out=index)
        np.clip(index, 0, NUM_BUCKETS - 1, out=index)
        self._counts += np.bincount(index.astype(np.intp), minlength=NUM_BUCKETS)

    def merge(self, other: LatencyHistogram) -> None:
        """Add every value `other` holds (exactly: buckets, count, sum, min and max); `other` is
        left as it is (it may be read-only: Ray hands numpy arrays back zero-copy)."""
        self._flush()
        if other._pending:
            self._add(np.frombuffer(other._pending, dtype=np.float64))
        if not other._count:
            return
        self._counts += other._counts
        self._count += other._count
        self._total += other._total
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    # -- reading --

    def __len__(self) -> int:
        return self._count + len(self._pending)

    @property
    def count(self) -> int:
        return len(self)

    @property
    def min(self) -> float | None:
        """The smallest value recorded (exact), None when empty."""
        self._flush()
        return self._min if self._count else None

    @property
    def max(self) -> float | None:
        """The largest value recorded (exact), None when empty."""
        self._flush()
        return self._max if self._count else None

    @property
    def mean(self) -> float | None:
        self._flush()
        return self._total / self._count if self._count else None

    @property
    def counts(self) -> np.ndarray:
        """The bucket counts (a copy)."""
        self._flush()
        return self._counts.copy()

    def percentile(self, q: float) -> float | None:
        """The `q`-th percentile (0-100, nearest rank), within `RELATIVE_ERROR`; None when empty.

        Raises:
            ValueError: `q` is not a number in [0, 100].
        """
        if not isinstance(q, int | float) or isinstance(q, bool) or not 0 <= q <= 100:
            raise ValueError(f"percentile must be a number in [0, 100], got {q!r}")
        self._flush()
        if not self._count:
            return None
        rank = int(round(q / 100.0 * (self._count - 1)))
        if rank <= 0:
            return self._min
        if rank >= self._count - 1:
            return self._max
        index = int(np.searchsorted(np.cumsum(self._counts), rank + 1))
        return min(max(_representative(index), self._min), self._max)

    def percentiles(self, qs: Iterable[float]) -> list[float | None]:
        return [self.percentile(q) for q in qs]

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        self._flush()
        other._flush()
        # sums of the same values added in another order may differ in the last bits
        return (self._count, self._min, self._max) == (other._count, other._min, other._max) \
            and math.isclose(self._total, other._total, rel_tol=1e-9, abs_tol=1e-12) \
            and bool(np.array_equal(self._counts, other._counts))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        if not len(self):
            return "LatencyHistogram(empty)"
        return (f"LatencyHistogram(count={self.count}, min={self.min:.6g}, p50={self.percentile(50):.6g}, "
                f"p99={self.percentile(99):.6g}, max={self.max:.6g})")
