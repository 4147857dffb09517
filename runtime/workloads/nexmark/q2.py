"""NexMark Q2, selection: the bids on every 123rd auction (the `nexmark` repo's q2.sql, `SQL`)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from runtime.api.environment import DataStream

SQL = "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"
AUCTION_SKIP = 123


def build(events: DataStream) -> DataStream:
    return (events.filter(lambda e: e["kind"] == "bid" and e["auction"] % AUCTION_SKIP == 0, name="q2-select")
            .map(lambda b: {"auction": b["auction"], "price": b["price"]}, name="q2"))


def selected(batch: pa.RecordBatch) -> pa.RecordBatch:
    keep = pc.and_(pc.equal(batch["kind"], "bid"), pc.equal(pc.modulo(batch["auction"], AUCTION_SKIP), 0))
    return batch.filter(keep).select(["auction", "price"])


def build_vectorised(events: DataStream) -> DataStream:
    """The same on Arrow batches."""
    return events.map_batches(selected, name="q2")
