"""NexMark Q4, average closing price per category: the mean of the winning bids of the closed
auctions of each category (the `nexmark` repo's q4.sql, `SQL`).

The closing price of an auction is Q9's winning bid (`q9.winning_bids`: emitted once, when the
auction expires); keyed by category, a running sum and count update the average with every auction
that closes, so the output is an updating one: the last row of a category is its average over
the whole input.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from operators import KeyedProcessFunction
from runtime.api.environment import DataStream
from runtime.workloads.nexmark.q9 import winning_bids

SQL = """
SELECT Q.category, AVG(Q.final) AS avg_price
FROM (
  SELECT MAX(B.price) AS final, A.category
  FROM auction AS A, bid AS B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
  GROUP BY A.id, A.category
) AS Q
GROUP BY Q.category
"""


class AveragePrice(KeyedProcessFunction):
    def process_element(self, record: dict[str, Any], ctx: Any) -> Iterator[dict[str, Any]]:
        total = ctx.value_state("total", default=0)
        count = ctx.value_state("count", default=0)
        total.update(total.value() + record["price"])
        count.update(count.value() + 1)
        yield {"category": ctx.key, "avg_price": total.value() / count.value()}


def build(events: DataStream) -> DataStream:
    return (winning_bids(events).map(lambda w: {"category": w["category"], "price": w["price"]}, name="q4-closing")
            .key_by("category").process(AveragePrice(), name="q4"))
