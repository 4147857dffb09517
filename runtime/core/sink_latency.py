"""`SinkLatency`: end-to-end latencies of the records reaching a sink task.

A record's latency is its arrival at the sink task minus its `created_at` stamp (when it has
one). Kept in a bounded histogram (`vocabulary/histogram.py`): memory does not grow with the
number of records. With a warm-up (`StreamEnvironment.set_latency_warmup`), records stamped within
that many seconds of the earliest stamp the task saw are counted, not measured. Pure: the time
comes in as an argument.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import numpy as np

from vocabulary.histogram import LatencyHistogram

__all__ = ["SinkLatency"]


class SinkLatency:
    """The latencies one sink task measured (see the module docstring)."""

    def __init__(self, warmup: float) -> None:
        self.latencies = LatencyHistogram()
        #: earliest creation stamp and latest arrival among the stamped records that reached the sink
        self.first_created_at: float | None = None
        self.last_arrival_at: float | None = None
        #: stamped records left out of `latencies`: stamped within `warmup` seconds of `first_created_at`
        self.warmup_records = 0
        self._warmup = warmup

    def record(self, data: Any, now: float) -> None:
        """`data` (records or an Arrow batch) reached the sink at `now`."""
        if isinstance(data, list):
            if "created_at" not in data[0]:
                return
            stamps = np.fromiter(map(itemgetter("created_at"), data), dtype=np.float64, count=len(data))
        elif "created_at" in data.schema.names:
            stamps = data.column("created_at").to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        else:
            return
        first = float(stamps.min())
        since = self._measured_since(first)
        if first < since:  # (only with a warm-up: `since` is the earliest stamp otherwise)
            measured = stamps[stamps >= since]
            self.warmup_records += len(stamps) - len(measured)
            stamps = measured
        # no Python float per record (this runs for every buffer at a sink)
        self.latencies.record_array(now - stamps)
        self.last_arrival_at = now

    def _measured_since(self, first: float) -> float:
        """Widen `first_created_at` to a buffer's earliest stamp `first`; returns the stamp from
        which records are measured (`warmup` after the earliest one)."""
        if self.first_created_at is None or first < self.first_created_at:
            self.first_created_at = first
        return self.first_created_at + self._warmup
