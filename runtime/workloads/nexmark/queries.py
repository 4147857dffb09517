"""The NexMark queries the oracle checks: one entry each (builder, Spark SQL, how to compare).

A windowed or joined query plugs in with one more `Query(...)` in `QUERIES`: its module's
`build` (events stream -> output stream, public API), its `SQL` over the views `person`,
`auction` and `bid` (`oracle.VIEWS`), and how its output compares with Spark's: as a multiset
(append-only output) or as the final row per key (updating output: the last row the job emitted
for a key must be Spark's row for it). A query whose answer depends on when records are processed
(q12: processing-time windows) has no SQL (`ORACLE_QUERIES` leaves it out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime.api.environment import DataStream
from runtime.workloads.nexmark import q0, q1, q2, q3, q4, q5, q7, q8, q9, q11, q12

__all__ = ["COMPARISONS", "ORACLE_QUERIES", "QUERIES", "Query"]

#: how a query's committed output is checked against Spark's result
COMPARISONS = ("multiset", "final")


@dataclass(frozen=True)
class Query:
    """One NexMark query, as a job and as Spark SQL.

    Attributes:
        name: the query's name ("q3"), also its sink's name in the oracle's jobs.
        build: events stream (with its event time, `source.event_time`) -> the query's output
            stream (dicts).
        sql: the same query in Spark SQL over the views `person`, `auction`, `bid`; None when
            no SQL computes its answer (processing time).
        compare: "multiset" (every output row, each as often as Spark's) or "final" (the last
            row per `key`).
        key: the columns that name a row's key (compare="final" only).
        build_vectorised: the query on Arrow batches, when it has such a form.
        group: the columns naming the group a row aggregates (compare="multiset" only): under
            at-least-once a replayed record may be counted twice, changing the row, so only the
            groups are compared (every group of Spark's there).
    """

    name: str
    build: Callable[[DataStream], DataStream]
    sql: str | None
    compare: str = "multiset"
    key: tuple[str, ...] = ()
    build_vectorised: Callable[[DataStream], DataStream] | None = None
    group: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.compare not in COMPARISONS:
            raise ValueError(f"query {self.name}: compare must be one of {', '.join(COMPARISONS)}, got {self.compare!r}")
        if (self.compare == "final") != bool(self.key):
            raise ValueError(f"query {self.name}: a key is needed with compare='final' and only there")
        if self.group and self.compare != "multiset":
            raise ValueError(f"query {self.name}: a group is for compare='multiset' only")


QUERIES: dict[str, Query] = {q.name: q for q in (
    Query("q0", q0.build, q0.SQL, build_vectorised=q0.build_vectorised),
    Query("q1", q1.build, q1.SQL, build_vectorised=q1.build_vectorised),
    Query("q2", q2.build, q2.SQL, build_vectorised=q2.build_vectorised),
    Query("q3", q3.build, q3.SQL),
    Query("q4", q4.build, q4.SQL, compare="final", key=("category",)),
    Query("q5", q5.build, q5.SQL),
    Query("q7", q7.build, q7.SQL),
    Query("q8", q8.build, q8.SQL),
    Query("q9", q9.build, q9.SQL, compare="final", key=("id",)),
    Query("q11", q11.build, q11.SQL, group=("bidder", "starttime")),
    Query("q12", q12.build, None),
)}
#: the queries Spark SQL answers
ORACLE_QUERIES: dict[str, Query] = {name: q for name, q in QUERIES.items() if q.sql is not None}
