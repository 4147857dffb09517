"""NexMark Q1, currency conversion: every bid with its price in euros (x 0.908).

`price * 908 / 1000` is 0.908 x price rounded once, to the double nearest the exact decimal
Flink SQL and Spark compute (`DECIMAL(23, 3)` in the `nexmark` repo's q1.sql, `SQL` here).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from runtime.api.environment import DataStream

SQL = "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid"


def build(events: DataStream) -> DataStream:
    return (events.filter(lambda e: e["kind"] == "bid", name="q1-bids")
            .map(lambda b: {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"] * 908 / 1000,
                            "date_time": b["date_time"], "extra": b["extra"]}, name="q1"))


def in_euros(batch: pa.RecordBatch) -> pa.RecordBatch:
    bids = batch.filter(pc.equal(batch["kind"], "bid"))
    euros = pc.divide(pc.multiply(bids["price"], 908).cast(pa.float64()), 1000.0)
    return pa.RecordBatch.from_arrays([bids["auction"], bids["bidder"], euros, bids["date_time"], bids["extra"]],
                                      ["auction", "bidder", "price", "date_time", "extra"])


def build_vectorised(events: DataStream) -> DataStream:
    """The same on Arrow batches."""
    return events.map_batches(in_euros, name="q1")
