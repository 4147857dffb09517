"""NexMark Q7, highest bid: the bids at the highest price of each tumbling 10 s window (the
`nexmark` repo's q7.sql, `SQL`: every bid whose price equals a window's maximum and whose time lies
between the window's start and its end, both included).

The maximum per window is a tumbling window over all bids (one key: a global aggregate), stamped
with the window's last millisecond; a window join on the price then meets each maximum with the
bids of its window. The join's windows are one millisecond longer than the tumbling ones,
`[start, end]`, because the SQL's BETWEEN includes the end: a bid at exactly `end` (it belongs to
the next tumbling window) still matches the previous window's maximum if its price equals it. A
maximum lies in one join window only, so each matching bid is emitted once per window it matches.
"""

from __future__ import annotations

from typing import Any

from runtime import SlidingEventTimeWindows, TumblingEventTimeWindows
from runtime.api.environment import DataStream

SIZE_MS = 10_000
SQL = """
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid AS B
JOIN (
  SELECT MAX(price) AS maxprice, unix_millis(window.end) AS date_time
  FROM bid GROUP BY window(timestamp_millis(date_time), '10 seconds')
) AS B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - 10000 AND B1.date_time
"""


def higher(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return b if b["price"] > a["price"] else a


def build(events: DataStream) -> DataStream:
    bids = (events.filter(lambda e: e["kind"] == "bid", name="q7-bids")
            .map(lambda b: {k: b[k] for k in ("auction", "price", "bidder", "date_time", "extra")}, name="q7-fields"))
    maxima = (bids.map(lambda b: {"price": b["price"]}, name="q7-prices").key_by(lambda _: 0)
              .window(TumblingEventTimeWindows.of(SIZE_MS)).reduce(higher, name="q7-max"))
    return (bids.join(maxima).where("price").equal_to("price")
            .window(SlidingEventTimeWindows.of(SIZE_MS + 1, SIZE_MS))
            .apply(lambda bid, _: dict(bid), name="q7"))
