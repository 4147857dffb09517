"""The NexMark queries on scripted events (no Spark), and the oracle's comparison rules."""

from __future__ import annotations

import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.workloads.nexmark import event_time, q1, q2, q3, q4, q5, q7, q8, q9, q11, q12
from runtime.workloads.nexmark.oracle import disagreement
from runtime.workloads.nexmark.queries import ORACLE_QUERIES, QUERIES, Query


def bid(auction: int, price: int, t: int = 0, bidder: int = 1001) -> dict:
    return {"kind": "bid", "date_time": t, "auction": auction, "bidder": bidder, "price": price, "channel": "Apple",
            "url": "u", "extra": ""}


def person(pid: int, state: str, name: str = "Kate Smith", t: int = 0) -> dict:
    return {"kind": "person", "date_time": t, "id": pid, "name": name, "email_address": "a@b.com",
            "credit_card": "0000 0000 0000 0000", "city": "Bend", "state": state, "extra": ""}


def auction(aid: int, seller: int, category: int = 10, t: int = 0, expires: int = 5) -> dict:
    return {"kind": "auction", "date_time": t, "id": aid, "item_name": "x", "description": "y", "initial_bid": 1,
            "reserve": 2, "expires": expires, "seller": seller, "category": category, "extra": ""}


def run(build, events: list[dict], parallelism: int = 2, out_of_orderness: int = 0) -> list[dict]:
    """`build` over `events` from one split, stamped with their event time (watermarks
    `out_of_orderness` ms behind)."""
    env = StreamEnvironment(parallelism=parallelism, buffer_size=2)
    source = env.from_collection(events, splits=1, watermark_strategy=event_time(out_of_orderness))
    build(source).sink_to(CollectSink("out"))
    return env.execute("q", executor="sim", seed=1).output("out")


def test_q1_converts_each_bid_once_rounded_like_the_exact_decimal() -> None:
    out = run(q1.build, [person(1000, "OR"), bid(1000, 3), bid(1001, 123_456_789)])
    assert sorted(r["price"] for r in out) == [2.724, 112098764.412]  # 0.908 x price, exactly representable digits


def test_q2_selects_the_bids_on_every_123rd_auction() -> None:
    out = run(q2.build, [bid(1107, 5), bid(1108, 6), bid(1230, 7), auction(1107, 1000)])
    assert sorted(map(tuple, (r.values() for r in out))) == [(1107, 5), (1230, 7)]


def test_q3_joins_each_auction_with_its_seller_whichever_comes_first() -> None:
    events = [auction(1, 1005), person(1005, "OR", "Luke Jones"),   # auction first: it waits for its seller
              auction(2, 1005), auction(3, 1005, category=11),      # seller known; another category
              person(1006, "WA"), auction(4, 1006),                 # a seller of another state: never joined
              auction(5, 1007), person(1007, "CA", "Sarah White")]
    out = run(q3.build, events)
    assert sorted((r["id"], r["name"], r["state"]) for r in out) == \
        [(1, "Luke Jones", "OR"), (2, "Luke Jones", "OR"), (5, "Sarah White", "CA")]
    assert all(set(r) == {"name", "city", "state", "id"} for r in out)


def test_q9_emits_each_auctions_best_bid_within_its_lifetime_once_it_expires() -> None:
    events = [bid(2, 99, t=9),                                      # before its auction arrives: waits
              auction(1, 1000, t=10, expires=20), auction(2, 1000, t=8, expires=30),  # 1 ms out of order
              bid(1, 50, t=12), bid(1, 70, t=15), bid(1, 70, t=14),  # a tie on price: the earlier bid wins
              bid(1, 500, t=9), bid(1, 900, t=21),                  # before the start, after the expiry
              auction(3, 1000, t=11, expires=40), bid(3, 5, t=10),  # auction 3: no bid in its lifetime
              person(1000, "OR")]
    out = run(q9.winning_bids, events, out_of_orderness=2)
    assert sorted((r["id"], r["price"], r["bid_date_time"]) for r in out) == [(1, 70, 14), (2, 99, 9)]
    assert all(r["auction"] == r["id"] and set(q9.AUCTION_FIELDS) <= set(r) for r in out)


def test_q4_averages_the_closing_prices_of_each_category_updating_as_auctions_close() -> None:
    events = sorted([auction(1, 1000, category=10, t=1, expires=5), auction(2, 1000, category=10, t=2, expires=9),
                     auction(3, 1000, category=11, t=3, expires=7), bid(1, 10, t=4), bid(1, 30, t=4),
                     bid(2, 60, t=6), bid(3, 7, t=6), person(1000, "CA")], key=lambda e: e["date_time"])
    out = run(q4.build, events)
    by_category: dict[int, list[float]] = {}
    for row in out:
        by_category.setdefault(row["category"], []).append(row["avg_price"])
    assert by_category == {10: [30.0, 45.0], 11: [7.0]}


T = 1_000_000  # a multiple of every window size: windows start here


def test_q5_emits_the_auctions_with_most_bids_in_every_sliding_window_ties_included() -> None:
    events = [bid(1, 5, T), bid(1, 5, T + 500), bid(2, 5, T + 600), bid(2, 5, T + 700), bid(3, 5, T + 5_000)]
    out = run(q5.build, events)
    # the five windows holding T .. T+700 have a tie (1 and 2, two bids each); two later ones hold only auction 3
    assert sorted((r["auction"], r["num"]) for r in out) == [(1, 2)] * 5 + [(2, 2)] * 5 + [(3, 1)] * 2


def test_q7_emits_the_bids_at_each_windows_highest_price_up_to_its_end_included() -> None:
    events = [bid(1, 10, T + 100), bid(2, 30, T + 5_000), bid(3, 30, T + 9_999),
              bid(4, 30, T + 10_000),  # in the next window, and at the first one's end with its highest price
              bid(5, 20, T + 12_000), bid(6, 5, T + 15_000)]
    out = run(q7.build, events)
    assert sorted(r["auction"] for r in out) == [2, 3, 4, 4]
    assert all(set(r) == {"auction", "price", "bidder", "date_time", "extra"} for r in out)


def test_q8_emits_each_person_who_opened_an_auction_in_the_window_they_registered_in_once() -> None:
    events = sorted([person(1001, "OR", "Ann", t=T + 100), person(1002, "OR", "Bob", t=T + 200),
                     person(1003, "CA", "Cid", t=T + 9_000), auction(1, 1001, t=T + 500), auction(2, 1001, t=T + 600),
                     auction(3, 1002, t=T + 10_500), auction(4, 1003, t=T + 9_500)], key=lambda e: e["date_time"])
    out = run(q8.build, events)
    assert sorted(out, key=lambda r: r["id"]) == [{"id": 1001, "name": "Ann", "starttime": T},
                                                  {"id": 1003, "name": "Cid", "starttime": T}]


def test_q11_counts_each_bidders_bids_per_session_sessions_a_gap_apart_merging() -> None:
    events = [bid(1, 5, T, bidder=7), bid(1, 5, T + 1_000, bidder=8), bid(1, 5, T + 5_000, bidder=7),
              bid(1, 5, T + 15_000, bidder=7),  # exactly the gap after the last: the same session
              bid(1, 5, T + 25_001, bidder=7)]  # a millisecond more: a new one
    out = run(q11.build, events)
    assert sorted((r["bidder"], r["bid_count"], r["starttime"], r["endtime"]) for r in out) == \
        [(7, 1, T + 25_001, T + 35_001), (7, 3, T, T + 25_000), (8, 1, T + 1_000, T + 11_000)]


def test_q12_counts_every_bid_once_in_a_window_of_the_task_clock_open_windows_fire_at_the_end() -> None:
    bids = [bid(1, 5, T + i, bidder=1000 + i % 3) for i in range(300)]
    out = run(lambda events: q12.build(events, size=3600.0), bids)  # one window: it fires only as the input ends
    assert sorted((r["bidder"], r["bid_count"], r["starttime"], r["endtime"]) for r in out) == \
        [(1000, 100, 0.0, 3600.0), (1001, 100, 0.0, 3600.0), (1002, 100, 0.0, 3600.0)]


def test_every_query_has_sql_and_a_comparison() -> None:
    assert list(QUERIES) == ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11", "q12"]
    assert [name for name, q in QUERIES.items() if q.sql is None] == ["q12"]  # processing time: no oracle
    assert all(q.sql.strip().upper().startswith(("SELECT", "WITH")) for q in ORACLE_QUERIES.values())
    assert {n: (q.compare, q.key) for n, q in QUERIES.items() if q.compare == "final"} == \
        {"q4": ("final", ("category",)), "q9": ("final", ("id",))}
    with pytest.raises(ValueError, match="compare must be one of multiset, final"):
        Query("q9", q1.build, "SELECT 1", compare="latest")
    with pytest.raises(ValueError, match="a key is needed with compare='final'"):
        Query("q9", q1.build, "SELECT 1", compare="final")


MULTISET = Query("qm", q1.build, "SELECT 1")
FINAL = Query("qf", q1.build, "SELECT 1", compare="final", key=("category",))


def test_a_multiset_comparison_names_what_is_missing_and_what_is_extra() -> None:
    theirs = [{"a": 1}, {"a": 1}, {"a": 2}]
    assert disagreement(MULTISET, [{"a": 2}, {"a": 1}, {"a": 1}], theirs) is None
    assert disagreement(MULTISET, [{"a": 1}, {"a": 2}], theirs) == "qm: missing 1 row(s), e.g. [{'a': 1}]"
    assert disagreement(MULTISET, theirs + [{"a": 3}], theirs) == "qm: not in Spark's 1 row(s), e.g. [{'a': 3}]"
    # at-least-once: repeats are fine, a loss is not
    assert disagreement(MULTISET, theirs + [{"a": 2}], theirs, exactly_once=False) is None
    assert "missing" in disagreement(MULTISET, [{"a": 1}, {"a": 2}], theirs, exactly_once=False)


def test_an_aggregates_at_least_once_comparison_asks_only_for_its_groups() -> None:
    grouped = Query("qg", q1.build, "SELECT 1", group=("bidder", "start"))
    theirs = [{"bidder": 1, "start": 0, "n": 2}, {"bidder": 2, "start": 0, "n": 1}]
    recounted = [{"bidder": 1, "start": 0, "n": 3}, {"bidder": 2, "start": 0, "n": 1}]  # a replayed bid counted twice
    assert disagreement(grouped, recounted, theirs, exactly_once=False) is None
    assert "not in Spark's" in disagreement(grouped, recounted, theirs)
    assert disagreement(grouped, recounted[:1], theirs, exactly_once=False) == \
        "qg: no row for 1 group(s) of Spark's, e.g. [(2, 0)]"
    with pytest.raises(ValueError, match="a group is for compare='multiset' only"):
        Query("qg", q1.build, "SELECT 1", compare="final", key=("bidder",), group=("bidder",))


def test_a_final_comparison_takes_the_last_row_the_job_emitted_per_key() -> None:
    theirs = [{"category": 10, "avg": 7.5}, {"category": 11, "avg": 2.0}]
    updates = [{"category": 10, "avg": 5.0}, {"category": 11, "avg": 2.0}, {"category": 10, "avg": 7.5}]
    assert disagreement(FINAL, updates, theirs) is None
    assert "the final rows of 1 key(s) differ" in disagreement(FINAL, updates[:2], theirs)
    assert "no row for 1 key(s)" in disagreement(FINAL, updates[:1], theirs)
    assert "1 key(s) Spark has not" in disagreement(FINAL, updates + [{"category": 12, "avg": 1.0}], theirs)
    assert disagreement(FINAL, updates[:2], theirs, exactly_once=False) is None  # every key is there
