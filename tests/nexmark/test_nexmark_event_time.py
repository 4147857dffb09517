"""The NexMark queries keep the source's event time: a bid out of order within the source's
bounded-out-of-orderness bound, just before a window's end and read after a later bid past that
end, counts in its window (as in Flink SQL, whose source declares the WATERMARK) — no query
stamps the events again with a tighter bound that would make it late. Checked against plain-Python
references of Q7 (tumbling window + window join) and Q5 (sliding windows), and by hand for Q8 (a tumbling
window co-group) and Q9 (an auction closed by an event-time timer at its expiry)."""

from __future__ import annotations

from collections import Counter, defaultdict

from test_nexmark_queries import T, auction, bid, person

from operators import CollectSink, WatermarkStrategy
from runtime import StreamEnvironment
from runtime.workloads.nexmark import q5, q7, q8, q9

#: the source's bound: every event is at most this far behind one read before it in its split
BOUND = 500
#: the late bids: 410 ms behind the bids read before them, 10 ms before the first window's end
LATE_AT = T + 9_990


def events() -> list[dict]:
    """Bids every 10 ms up to T + 10_400 (and 300 more there, so that watermarks go out past the
    first 10 s window's end), then ten bids on auction 9 at `LATE_AT` with the highest price."""
    fillers = [bid(100 + i % 200, 10 + (i * 7) % 13, T + 10 * i) for i in range(1_041)]
    fillers += [bid(100 + i % 200, 10 + (i * 7) % 13, T + 10_400) for i in range(300)]
    late = [bid(9, 99, LATE_AT, bidder=2000 + i) for i in range(10)]
    return [*fillers, *late, bid(100, 5, T + 10_450)]


def run(build, rows: list[dict]) -> list[dict]:
    env = StreamEnvironment(parallelism=2, buffer_size=4)
    env.set_auto_watermark_interval(0.001)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(BOUND).with_timestamp_assigner("date_time")
    build(env.from_collection(rows, splits=1, watermark_strategy=strategy)).sink_to(CollectSink("out"))
    return env.execute("nexmark", executor="sim", seed=1).output("out")


def q7_reference(bids: list[dict]) -> list[tuple]:
    """Every bid at its window's highest price, its time in `[start, end]` (q7.SQL)."""
    highest: dict[int, int] = defaultdict(int)
    for b in bids:
        start = b["date_time"] - b["date_time"] % q7.SIZE_MS
        highest[start] = max(highest[start], b["price"])
    return sorted((b["auction"], b["price"], b["date_time"]) for start, price in highest.items() for b in bids
                  if b["price"] == price and start <= b["date_time"] <= start + q7.SIZE_MS)


def q5_reference(bids: list[dict]) -> list[tuple]:
    """Per sliding window, the auctions with the most bids in it (q5.SQL)."""
    counts: dict[int, Counter] = defaultdict(Counter)
    for b in bids:
        t = b["date_time"]
        last = t - t % q5.SLIDE_MS
        for start in range(last, t - q5.SIZE_MS, -q5.SLIDE_MS):
            counts[start][b["auction"]] += 1
    return sorted((auction, n) for per_auction in counts.values() for auction, n in per_auction.items()
                  if n == max(per_auction.values()))


def test_q7_keeps_a_bid_out_of_order_within_the_sources_bound_in_its_window() -> None:
    rows = events()
    out = sorted((r["auction"], r["price"], r["date_time"]) for r in run(q7.build, rows))
    assert (9, 99, LATE_AT) in out, "the late bids' window lost them"
    assert out == q7_reference(rows)


def test_q5_counts_bids_out_of_order_within_the_sources_bound_in_their_windows() -> None:
    rows = events()
    out = sorted((r["auction"], r["num"]) for r in run(q5.build, rows))
    assert (9, 10) in out, "the late bids' windows lost them"
    assert out == q5_reference(rows)


def test_q8_joins_a_person_and_an_auction_out_of_order_within_the_sources_bound_in_their_window() -> None:
    rows = events()
    rows[-11:-1] = [person(1001, "OR", "Ann", t=LATE_AT), auction(1, 1001, t=LATE_AT + 5)]
    assert run(q8.build, rows) == [{"id": 1001, "name": "Ann", "starttime": T}]


def test_q9_counts_a_bid_out_of_order_within_the_sources_bound_before_the_auction_closes() -> None:
    rows = [auction(1, 1000, t=T, expires=T + 9_995), *events()[:-11], bid(1, 99, LATE_AT, bidder=7)]
    assert [(r["id"], r["price"], r["bid_date_time"]) for r in run(q9.build, rows)] == [(1, 99, LATE_AT)]
