"""NexMark Q5, hot items: the auctions with the most bids in each sliding window of 10 s every 2 s
(the `nexmark` repo's q5.sql, `SQL`: a HOP window count per auction, joined with the window's
maximum count; ties all win).

Two window stages, as Beam's Query5: the bids per auction and window (`count()` on sliding
windows, each result stamped with its window's last millisecond), then, keyed by the window, one
tumbling window of the slide that every count of that window falls into; it keeps only the
highest count so far and the auctions that reached it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runtime import (
    AggregateFunction,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from runtime.api.environment import DataStream

SIZE_MS, SLIDE_MS = 10_000, 2_000
SQL = """
WITH auction_bids AS (
  SELECT auction, COUNT(*) AS num, window.start AS starttime, window.end AS endtime
  FROM bid GROUP BY auction, window(timestamp_millis(date_time), '10 seconds', '2 seconds')
)
SELECT A.auction, A.num
FROM auction_bids AS A
JOIN (SELECT MAX(num) AS maxn, starttime, endtime FROM auction_bids GROUP BY starttime, endtime) AS M
ON A.starttime = M.starttime AND A.endtime = M.endtime AND A.num >= M.maxn
"""


class MostBids(AggregateFunction):
    """The highest count of a window so far and the auctions that have it."""

    def create_accumulator(self) -> dict[str, Any]:
        return {"num": 0, "auctions": []}

    def add(self, value: dict[str, Any], acc: dict[str, Any]) -> dict[str, Any]:
        if value["count"] > acc["num"]:
            return {"num": value["count"], "auctions": [value["auction"]]}
        if value["count"] == acc["num"]:
            return {"num": acc["num"], "auctions": [*acc["auctions"], value["auction"]]}
        return acc

    def get_result(self, acc: dict[str, Any]) -> dict[str, Any]:
        return acc


class HotItems(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Iterator[dict[str, Any]]:
        for best in elements:
            for auction in best["auctions"]:
                yield {"auction": auction, "num": best["num"]}


def build(events: DataStream) -> DataStream:
    counts = (events.filter(lambda e: e["kind"] == "bid", name="q5-bids")
              .key_by("auction").window(SlidingEventTimeWindows.of(SIZE_MS, SLIDE_MS)).count(name="q5-counts"))
    return (counts.key_by("window_start").window(TumblingEventTimeWindows.of(SLIDE_MS))
            .aggregate(MostBids(), HotItems(), name="q5"))
