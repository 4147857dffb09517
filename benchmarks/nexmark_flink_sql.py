"""The NexMark queries in Flink SQL over the recorded events: the table, the views, the queries.

`events` is a `filesystem` CSV table of the union record (`generator.EVENT_SCHEMA`) with the
rowtime `dt` (`date_time` as TIMESTAMP(3), UTC) and a bounded-out-of-orderness watermark of the
generator's bound (`NexmarkConfig.max_out_of_orderness_ms`), as the barrierflow jobs assign them.
The views `person`, `auction` and `bid` are `oracle.VIEWS` with `dt` added. The stateless queries
and q3 run the oracle's SQL as it is (`Query.sql`: it is Flink SQL too); the windowed ones are the
`nexmark` repo's Flink SQL (`nexmark-flink/src/main/resources/queries/q*.sql`) with window TVFs
(`TUMBLE`, `HOP`, `SESSION`) over `dt`, their window bounds turned back into epoch milliseconds
(`epoch_ms`) as barrierflow's rows hold them:

* q5: HOP windows of 10 s every 2 s, the count per auction joined with the window's maximum count
  (`num >= maxn`: ties all win). Flink plans the join on the window bounds as a window join, so the
  output is append-only.
* q7: the bids whose price equals the maximum of a 10 s tumbling window and whose time lies in
  `[window_end - 10 s, window_end]` (a regular join, BETWEEN including both ends).
* q8: the persons and the auction sellers of each 10 s tumbling window, joined on the id and the
  window (a window join).
* q11: SESSION windows of a 10 s gap per bidder, their count, start and end (the repo's legacy
  `SESSION(...)` group window written as the `SESSION` TVF).

Event time needs each reader to see the events in order: the event-time queries read one CSV file
in event order (`EVENT_TIME_QUERIES`), because Flink's CSV format does not split a file and a
reader that took a later file before an earlier one would drop the earlier one's events as late.
"""

from __future__ import annotations

from typing import Any

from runtime.workloads.nexmark.oracle import VIEWS

__all__ = ["EVENT_TIME_QUERIES", "FLINK_SQL", "events_ddl", "flink_views", "sql_of"]

#: Flink SQL types of the event columns (`generator.EVENT_SCHEMA`: int64 -> BIGINT, string -> STRING)
_SQL_TYPES = {"int64": "BIGINT", "string": "STRING"}
#: the rowtime column every view carries
ROWTIME = "dt"
#: the session time zone: window bounds (TIMESTAMP) are read as UTC
TIME_ZONE = "UTC"


def epoch_ms(expression: str) -> str:
    """`expression` (a TIMESTAMP(3) in UTC) as BIGINT milliseconds since the epoch (Flink SQL has
    no UNIX_MILLIS; TIMESTAMPDIFF in milliseconds overflows its INT)."""
    return (f"(1000 * CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', {expression}) AS BIGINT)"
            f" + MOD(EXTRACT(MILLISECOND FROM {expression}), 1000))")


FLINK_SQL: dict[str, str] = {
    "q5": """
SELECT AuctionBids.auction, AuctionBids.num
FROM (
  SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dt), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
  SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
  FROM (
    SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dt), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
  ) AS CountBids
  GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn
""",
    "q7": """
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid AS B
JOIN (
  SELECT MAX(price) AS maxprice, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dt), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) AS B1
ON B.price = B1.maxprice
WHERE B.dt BETWEEN B1.endtime - INTERVAL '10' SECOND AND B1.endtime
""",
    "q8": f"""
SELECT P.id, P.name, {epoch_ms("P.starttime")} AS starttime
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dt), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) AS P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dt), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) AS A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
""",
    "q11": f"""
SELECT bidder, COUNT(*) AS bid_count,
       {epoch_ms("window_start")} AS starttime, {epoch_ms("window_end")} AS endtime
FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(dt), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end
""",
}
#: the queries whose answer depends on event time (they read the events in order)
EVENT_TIME_QUERIES = frozenset(FLINK_SQL)


def sql_of(query: Any) -> str:
    """The Flink SQL of a NexMark `Query`: the nexmark repo's for the windowed ones, else its own."""
    if query.name in FLINK_SQL:
        return FLINK_SQL[query.name]
    if query.sql is None:
        raise ValueError(f"query {query.name}: no SQL computes its answer, so Flink cannot run it")
    return query.sql


def events_ddl(schema: Any, path: str, out_of_orderness_ms: int) -> str:
    """The `events` table over the CSV files at `path`, with the rowtime `dt` and its watermark."""
    columns = ", ".join(f"`{f.name}` {_SQL_TYPES[str(f.type)]}" for f in schema)
    return (f"CREATE TABLE events ({columns}, "
            f"{ROWTIME} AS CAST(TO_TIMESTAMP_LTZ(date_time, 3) AS TIMESTAMP(3)), "
            f"WATERMARK FOR {ROWTIME} AS {ROWTIME} - INTERVAL '{out_of_orderness_ms / 1000:.3f}' SECOND) "
            f"WITH ('connector' = 'filesystem', 'path' = '{path}', "
            "'format' = 'csv', 'csv.null-literal' = '', 'csv.ignore-parse-errors' = 'false')")


def flink_views() -> dict[str, str]:
    """`oracle.VIEWS` with the rowtime `dt` selected too."""
    views = {}
    for name, sql in VIEWS.items():
        head, sep, tail = sql.partition(" FROM events")
        if not sep:
            raise ValueError(f"view {name}: expected '... FROM events ...', got {sql!r}")
        views[name] = f"{head}, {ROWTIME}{sep}{tail}"
    return views
