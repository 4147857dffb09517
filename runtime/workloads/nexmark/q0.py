"""NexMark Q0, pass-through: every bid as it came, nothing computed (the cost of the plumbing).

Same as the `nexmark` repo's q0.sql (`SQL`, over the `bid` view of `oracle.VIEWS`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from runtime.api.environment import DataStream

SQL = "SELECT auction, bidder, price, date_time, extra FROM bid"
COLUMNS = ["auction", "bidder", "price", "date_time", "extra"]


def build(events: DataStream) -> DataStream:
    return (events.filter(lambda e: e["kind"] == "bid", name="q0-bids")
            .map(lambda b: {c: b[c] for c in COLUMNS}, name="q0"))


def bids(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.filter(pc.equal(batch["kind"], "bid")).select(COLUMNS)


def build_vectorised(events: DataStream) -> DataStream:
    """The same on Arrow batches (a vectorised source: no dict is built)."""
    return events.map_batches(bids, name="q0")
