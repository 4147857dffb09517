"""The oracle: NexMark queries as Spark SQL over the same events, compared with a job's output.

The events are Parquet files (`dataset.write_events`: one table of the union record, a `kind`
column). `spark_answers` runs each query's SQL through a Spark session (`spark_bridge.
local_session()`) over the views `person`, `auction` and `bid` (`VIEWS`: Flink's nexmark
`ddl_views.sql`, in snake case); `sink_queries` adds the queries to a job, each to a `CollectSink`
named after it; `disagreement` says how a job's committed output differs from Spark's (None when
it does not): as a multiset, or the final row per key; under at-least-once, only what is missing.

Values are compared as Python values: Spark's decimals become the nearest double (a query
computing `0.908 * price` in doubles rounds once, to that same double: see q1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from operators import CollectSink
from runtime.api.environment import DataStream
from runtime.workloads.nexmark.queries import Query

__all__ = ["VIEWS", "disagreement", "sink_queries", "spark_answers"]

VIEWS = {
    "person": "SELECT id, name, email_address, credit_card, city, state, date_time, extra "
              "FROM events WHERE kind = 'person'",
    "auction": "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, "
               "extra FROM events WHERE kind = 'auction'",
    "bid": "SELECT auction, bidder, price, channel, url, date_time, extra FROM events WHERE kind = 'bid'",
}

Row = dict[str, Any]


def _plain(value: Any) -> Any:
    return float(value) if isinstance(value, Decimal) else value


def spark_answers(spark: Any, events_path: str, queries: Iterable[Query]) -> dict[str, list[Row]]:
    """Each query's rows, computed by Spark SQL over the Parquet events at `events_path`."""
    spark.read.parquet(events_path).createOrReplaceTempView("events")
    for view, sql in VIEWS.items():
        spark.sql(sql).createOrReplaceTempView(view)
    return {q.name: [{k: _plain(v) for k, v in row.items()} for row in spark.sql(q.sql).toArrow().to_pylist()]
            for q in queries}


def sink_queries(events: DataStream, queries: Iterable[Query], *, vectorised: bool = False) -> None:
    """Add every query to `events`' job, its output into a `CollectSink` named after it (`vectorised`:
    the query's Arrow-batch form where it has one)."""
    for q in queries:
        build = q.build_vectorised if vectorised and q.build_vectorised is not None else q.build
        build(events).sink_to(CollectSink(q.name))


def _multiset(rows: Iterable[Row]) -> Counter:
    return Counter(tuple(sorted((k, _plain(v)) for k, v in row.items())) for row in rows)


def _examples(rows: Counter) -> str:
    shown = [dict(row) for row in list(rows)[:3]]
    return f"{sum(rows.values())} row(s), e.g. {shown}"


def disagreement(query: Query, ours: list[Row], theirs: list[Row], *, exactly_once: bool = True) -> str | None:
    """How `ours` (a job's committed output) differs from `theirs` (Spark's), or None.

    Exactly-once: equal as multisets (compare="multiset") or in the final row per key ("final").
    At-least-once: nothing of Spark's missing (repeats allowed; for "final", every key present; for a
    query with a `group`, every group present).
    """
    if query.compare == "final":
        def final(rows: list[Row]) -> dict[tuple, Row]:  # the last row of each key
            return {tuple(_plain(r[k]) for k in query.key): {k: _plain(v) for k, v in r.items()} for r in rows}
        mine, expected = final(ours), final(theirs)
        missing = sorted(set(expected) - set(mine), key=repr)
        if missing:
            return f"{query.name}: no row for {len(missing)} key(s) of Spark's, e.g. {missing[:3]}"
        wrong = [k for k in expected if mine[k] != expected[k]] if exactly_once else []
        extra = sorted(set(mine) - set(expected), key=repr) if exactly_once else []
        if wrong or extra:
            return (f"{query.name}: the final rows of {len(wrong)} key(s) differ from Spark's, e.g. "
                    f"{[(mine[k], expected[k]) for k in wrong[:3]]}; {len(extra)} key(s) Spark has not")
        return None
    if query.group and not exactly_once:
        def groups(rows: list[Row]) -> set[tuple]:
            return {tuple(_plain(r[k]) for k in query.group) for r in rows}
        lost = sorted(groups(theirs) - groups(ours), key=repr)
        return f"{query.name}: no row for {len(lost)} group(s) of Spark's, e.g. {lost[:3]}" if lost else None
    mine, expected = _multiset(ours), _multiset(theirs)
    missing = expected - mine
    extra = mine - expected if exactly_once else Counter()
    if not missing and not extra:
        return None
    parts = [f"missing {_examples(missing)}"] if missing else []
    parts += [f"not in Spark's {_examples(extra)}"] if extra else []
    return f"{query.name}: " + "; ".join(parts)
