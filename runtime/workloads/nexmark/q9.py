"""NexMark Q9, winning bids: every auction with its highest bid placed between its start and its
expiry (the `nexmark` repo's q9.sql, `SQL`; ties go to the earliest bid, then to the lower bidder
and `extra`, so that the winner is one row).

Auctions and bids come in one stream, so the join is one keyed function, keyed by the auction's
id: an auction registers an event-time timer at its expiry and keeps only its best bid so far; a
bid that arrives before its auction (the other split can be ahead) waits in a list until it does.
When the watermark passes the expiry the winner is emitted, once, and the key's state cleared.
At the end of input the watermark jumps to infinity and every auction still open closes, as the
SQL over the whole input sees every bid. State: one entry per open auction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from operators import KeyedProcessFunction
from runtime.api.environment import DataStream

SQL = """
SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, extra,
       auction, bidder, price, bid_date_time, bid_extra
FROM (
  SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time, B.extra AS bid_extra,
         ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC, B.bidder ASC,
                                                       B.extra ASC) AS rownum
  FROM auction AS A, bid AS B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
)
WHERE rownum <= 1
"""
AUCTION_FIELDS = ("id", "item_name", "description", "initial_bid", "reserve", "date_time", "expires", "seller",
                  "category", "extra")


def join_side(e: dict[str, Any]) -> list[dict[str, Any]]:
    """An auction or a bid keyed by the auction's id (`auction_id`); persons: nothing."""
    if e["kind"] == "auction":
        return [{"auction_id": e["id"], "kind": "auction", **{f: e[f] for f in AUCTION_FIELDS}}]
    if e["kind"] == "bid":
        return [{"auction_id": e["auction"], "kind": "bid", "bidder": e["bidder"], "price": e["price"],
                 "date_time": e["date_time"], "extra": e["extra"]}]
    return []


def rank(bid: dict[str, Any]) -> tuple:
    """Smaller is better: the highest price, then the earliest bid, the lower bidder, the lower extra."""
    return -bid["price"], bid["date_time"], bid["bidder"], bid["extra"]


class WinningBid(KeyedProcessFunction):
    def process_element(self, record: dict[str, Any], ctx: Any) -> Iterator[dict[str, Any]]:
        auction, best, early = ctx.value_state("auction"), ctx.value_state("best"), ctx.list_state("early_bids")
        if record["kind"] == "auction":
            auction.update({f: record[f] for f in AUCTION_FIELDS})
            ctx.timer_service().register_event_time_timer(record["expires"])
            for bid in early.get():
                self._offer(auction.value(), best, bid)
            early.clear()
        elif auction.value() is None:
            early.add({k: record[k] for k in ("bidder", "price", "date_time", "extra")})
        else:
            self._offer(auction.value(), best, record)
        return iter(())

    @staticmethod
    def _offer(auction: dict[str, Any], best: Any, bid: dict[str, Any]) -> None:
        if auction["date_time"] <= bid["date_time"] <= auction["expires"] and \
                (best.value() is None or rank(bid) < rank(best.value())):
            best.update({k: bid[k] for k in ("bidder", "price", "date_time", "extra")})

    def on_timer(self, timestamp: Any, ctx: Any) -> Iterator[dict[str, Any]]:
        auction, best = ctx.value_state("auction"), ctx.value_state("best")
        if best.value() is not None:
            bid = best.value()
            yield {**auction.value(), "auction": ctx.key, "bidder": bid["bidder"], "price": bid["price"],
                   "bid_date_time": bid["date_time"], "bid_extra": bid["extra"]}
        auction.clear()
        best.clear()


def winning_bids(events: DataStream) -> DataStream:
    """The winning bid of each auction, as it expires; `events` carry their event time
    (`source.event_time`: the source's watermarks decide when an auction closes)."""
    return (events.flat_map(join_side, name="auctions-and-bids")
            .key_by("auction_id").process(WinningBid(), name="winning-bids"))


def build(events: DataStream) -> DataStream:
    return winning_bids(events).name("q9")
