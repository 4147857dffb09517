"""NexMark Q8, new users: the persons who opened an auction in the same tumbling 10 s window in
which they registered (the `nexmark` repo's q8.sql, `SQL`: persons and auction sellers, each
distinct per window, joined on the id and the window).

A window co-group of persons and auctions keyed by the person's id (the auction's seller): per key
and window one row if both sides are there, however many auctions the person opened in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runtime import TumblingEventTimeWindows
from runtime.api.environment import DataStream

SIZE_MS = 10_000
SQL = """
SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name, unix_millis(window.start) AS starttime, unix_millis(window.end) AS endtime
  FROM person GROUP BY id, name, window(timestamp_millis(date_time), '10 seconds')
) AS P
JOIN (
  SELECT seller, unix_millis(window.start) AS starttime, unix_millis(window.end) AS endtime
  FROM auction GROUP BY seller, window(timestamp_millis(date_time), '10 seconds')
) AS A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
"""


def new_sellers(persons: list[dict[str, Any]], auctions: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    if auctions:
        for person in {(p["id"], p["name"]): p for p in persons}.values():  # GROUP BY id, name
            yield {"id": person["id"], "name": person["name"],
                   "starttime": person["date_time"] - person["date_time"] % SIZE_MS}


def build(events: DataStream) -> DataStream:
    persons = (events.filter(lambda e: e["kind"] == "person", name="q8-persons")
               .map(lambda p: {"id": p["id"], "name": p["name"], "date_time": p["date_time"]}, name="q8-person-fields"))
    auctions = (events.filter(lambda e: e["kind"] == "auction", name="q8-auctions")
                .map(lambda a: {"seller": a["seller"]}, name="q8-sellers"))
    return (persons.co_group(auctions).where("id").equal_to("seller")
            .window(TumblingEventTimeWindows.of(SIZE_MS)).apply(new_sellers, name="q8"))
