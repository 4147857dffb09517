"""NexMark's parameters and the formulas that derive ids, foreign keys and times from event numbers.

The formulas are those of Beam's nexmark generator (`sdks/java/testing/nexmark/.../sources/
generator/GeneratorConfig.java`, `model/PersonGenerator.java`, `model/AuctionGenerator.java`) and
of the `nexmark/nexmark` repo's Flink generator (`nexmark-flink/.../generator/`), which shares
them; written here over numpy arrays of event numbers. Event number `e` is a person, an auction or
a bid by `e % 50` (1 : 3 : 46); a person or auction takes the next id of its kind, so the newest
person and auction at any event follow from `e` alone (`last_person`, `last_auction`), and so do
the foreign keys, which mostly point at recent ("in flight") ones and at the hot ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FIRST_AUCTION_ID", "FIRST_CATEGORY_ID", "FIRST_PERSON_ID", "ID_LEAD", "NexmarkConfig"]

#: ids start here so that small runs still find matches (GeneratorConfig.FIRST_*_ID)
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
#: a random person or auction id may lie this far beyond the newest one (PERSON_ID_LEAD,
#: AUCTION_ID_LEAD): "newPerson and newAuction events appear to have been swapped in time"
ID_LEAD = 10
#: hot sellers, bidders and auctions are the first of each batch of this many (HOT_*_RATIO)
HOT_BATCH = 100
#: text cut for `extra` fields is drawn once per seed; an average size must leave room to cut
MAX_AVERAGE_BYTES = 1 << 16


@dataclass(frozen=True)
class NexmarkConfig:
    """What a NexMark event stream looks like (Flink's nexmark option names in snake case).

    Attributes:
        seed: every random draw derives from it (`draws.py`); same seed, same events.
        event_rate: events per second of event time: event `e` happens at
            `base_time + e * 1000 // event_rate` ms (the inter-event delay is 1/event_rate s).
        base_time: the time of event 0, ms since the epoch (2020-01-01T00:00:00Z by default).
        person_proportion, auction_proportion, bid_proportion: the mix of kinds (1 : 3 : 46).
        hot_auction_ratio, hot_sellers_ratio, hot_bidders_ratio: a bid goes to a hot auction, an
            auction to a hot seller, a bid comes from a hot bidder with probability `1 - 1/ratio`
            (2, 4, 4); 1 turns hot keys off, larger values skew harder (`with_hot_ratio`).
        num_active_people: random sellers and bidders come from the newest this many persons.
        num_in_flight_auctions: random bids go to the newest this many auctions; auctions last
            about as long as it takes to create that many more.
        out_of_order_group_size: events are emitted shuffled within groups of this many
            (Beam's `outOfOrderGroupSize`; 1 = in order), so event time is out of order by at most
            `max_out_of_orderness_ms`.
        avg_person_bytes, avg_auction_bytes, avg_bid_bytes: average event size; the `extra`
            field pads each event to it (+-20 %).
    """

    seed: int = 0
    event_rate: int = 10_000
    base_time: int = 1_577_836_800_000
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_active_people: int = 1000
    num_in_flight_auctions: int = 100
    out_of_order_group_size: int = 1
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100

    def __post_init__(self) -> None:
        minimum = {"event_rate": 1, "person_proportion": 1, "auction_proportion": 1, "bid_proportion": 0,
                   "hot_auction_ratio": 1, "hot_sellers_ratio": 1, "hot_bidders_ratio": 1,
                   "num_active_people": 1, "num_in_flight_auctions": 1, "out_of_order_group_size": 1,
                   "avg_person_bytes": 0, "avg_auction_bytes": 0, "avg_bid_bytes": 0, "base_time": 0}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"NexmarkConfig: {field.name} must be an integer, got {value!r}")
            if field.name in minimum and value < minimum[field.name]:
                raise ValueError(f"NexmarkConfig: {field.name} must be >= {minimum[field.name]}, got {value}")
        for name in ("avg_person_bytes", "avg_auction_bytes", "avg_bid_bytes"):
            if getattr(self, name) > MAX_AVERAGE_BYTES:
                raise ValueError(f"NexmarkConfig: {name} must be <= {MAX_AVERAGE_BYTES}, got {getattr(self, name)}")

    # ------------------------------------------------------------------------------ derived

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def max_out_of_orderness_ms(self) -> int:
        """How far an event's `date_time` can lie behind one emitted before it in the same split
        (the bound for a bounded-out-of-orderness watermark; 0 when in order)."""
        g = self.out_of_order_group_size
        return -(-(g - 1) * 1000 // self.event_rate)

    def with_hot_ratio(self, ratio: int) -> NexmarkConfig:
        """The same config with every hot ratio (auctions, sellers, bidders) set to `ratio`."""
        return dataclasses.replace(self, hot_auction_ratio=ratio, hot_sellers_ratio=ratio, hot_bidders_ratio=ratio)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> NexmarkConfig:
        """Raises: ValueError: an unknown or out-of-range option (named)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"NexmarkConfig: unknown option(s) {', '.join(unknown)}")
        return cls(**values)

    # ---------------------------------------------------- formulas over arrays of event numbers

    def event_numbers(self, positions: np.ndarray, count: int | None) -> np.ndarray:
        """The event emitted at each position: within each whole group of `out_of_order_group_size`
        positions, `base + (p * 953) % g` (GeneratorConfig.nextAdjustedEventNumber; 953 is prime,
        so a permutation of the group); a last, partial group of a bounded stream stays in order,
        so `count` events are exactly events 0 .. count-1."""
        g = self.out_of_order_group_size
        if g == 1:
            return positions
        base = positions // g * g
        shuffled = base + (positions * 953) % g
        if count is None:
            return shuffled
        return np.where(base + g <= count, shuffled, positions)

    def timestamps(self, numbers: np.ndarray) -> np.ndarray:
        """Event time (ms) of each event number (GeneratorConfig.timestampForEvent)."""
        return self.base_time + numbers * 1000 // self.event_rate

    def kinds(self, numbers: np.ndarray) -> np.ndarray:
        """0 person, 1 auction, 2 bid for each event number."""
        offset = numbers % self.total_proportion
        return (offset >= self.person_proportion).astype(np.int8) + \
            (offset >= self.person_proportion + self.auction_proportion).astype(np.int8)

    def last_person(self, numbers: np.ndarray) -> np.ndarray:
        """The newest person id (base 0) at each event; the event's own if it is a person
        (PersonGenerator.lastBase0PersonId)."""
        epoch, offset = np.divmod(numbers, self.total_proportion)
        return epoch * self.person_proportion + np.minimum(offset, self.person_proportion - 1)

    def last_auction(self, numbers: np.ndarray) -> np.ndarray:
        """The newest auction id (base 0) at each event; the event's own if it is an auction;
        -1 before the first auction (AuctionGenerator.lastBase0AuctionId)."""
        p, a = self.person_proportion, self.auction_proportion
        epoch, offset = np.divmod(numbers, self.total_proportion)
        return np.where(offset < p, epoch * a - 1, epoch * a + np.minimum(offset - p, a - 1))

    def random_person(self, numbers: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """A person among the newest `num_active_people`, or up to ID_LEAD beyond the newest
        (PersonGenerator.nextBase0PersonId); `draws` are uint64 random draws."""
        people = self.last_person(numbers) + 1
        active = np.minimum(people, self.num_active_people)
        return people - active + (draws % (active + ID_LEAD).astype(np.uint64)).astype(np.int64)

    def random_auction(self, numbers: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """An auction among the newest `num_in_flight_auctions` + 1, or up to ID_LEAD beyond the
        newest (AuctionGenerator.nextBase0AuctionId)."""
        newest = self.last_auction(numbers)
        oldest = np.maximum(newest - self.num_in_flight_auctions, 0)
        return oldest + (draws % (newest - oldest + 1 + ID_LEAD).astype(np.uint64)).astype(np.int64)

    def auction_horizon_ms(self, numbers: np.ndarray) -> np.ndarray:
        """Event time until `num_in_flight_auctions` more auctions exist: auctions last
        1 + uniform[0, 2 x this) ms (AuctionGenerator.nextAuctionLengthMs)."""
        ahead = self.num_in_flight_auctions * self.total_proportion // self.auction_proportion
        return self.timestamps(numbers + ahead) - self.timestamps(numbers)
