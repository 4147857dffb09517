"""NexMark Q11, user sessions: how many bids each bidder placed per session, a session ending
after 10 s without a bid of theirs (the `nexmark` repo's q11.sql, `SQL`: SESSION windows; a
session ends 10 s after its last bid).

Event-time session windows keyed by the bidder, counted incrementally (sessions merge, and so do
their counts).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runtime import AggregateFunction, EventTimeSessionWindows, ProcessWindowFunction
from runtime.api.environment import DataStream

GAP_MS = 10_000
SQL = """
SELECT bidder, COUNT(*) AS bid_count,
       unix_millis(session_window.start) AS starttime, unix_millis(session_window.end) AS endtime
FROM bid GROUP BY bidder, session_window(timestamp_millis(date_time), '10 seconds')
"""


class Count(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: dict[str, Any], acc: int) -> int:
        return acc + 1

    def get_result(self, acc: int) -> int:
        return acc

    def merge(self, a: int, b: int) -> int:
        return a + b


class BidsPerWindow(ProcessWindowFunction):
    """`{bidder, bid_count, starttime, endtime}` of a window's count."""

    def process(self, key: Any, context: Any, elements: Any) -> Iterator[dict[str, Any]]:
        window = context.window()
        for count in elements:
            yield {"bidder": key, "bid_count": count, "starttime": window.start, "endtime": window.end}


def build(events: DataStream) -> DataStream:
    return (events.filter(lambda e: e["kind"] == "bid", name="q11-bids").key_by("bidder")
            .window(EventTimeSessionWindows.with_gap(GAP_MS)).aggregate(Count(), BidsPerWindow(), name="q11"))
