"""The NexMark events of an array of stream positions, built with numpy, as Arrow or as dicts.

One stream of three kinds (Flink's nexmark table: one row type with an event type): every event
has `kind` ("person", "auction" or "bid"), `date_time` (event time, ms since the epoch) and
`extra` (padding to the configured size), plus the fields of its kind:

    person   id, name, email_address, credit_card, city, state
    auction  id, item_name, description, initial_bid, reserve, expires, seller, category
    bid      auction, bidder, price, channel, url

As records, an event is a dict of its own fields only; as a batch (`EVENT_SCHEMA`), one row with
the other kinds' columns null — the same event under barrierflow's rule that a missing field is
None. Both forms come from the same arrays (`NexmarkGenerator.kind_batches`), so they cannot
differ. Field by field (model/PersonGenerator, AuctionGenerator, BidGenerator, PriceGenerator,
StringsGenerator of Beam's and Flink's nexmark generators):

* person: the next person id; name = first + " " + last from 11 and 9 names; email = a 3-6 letter
  string @ a 3-4 letter string .com; a 16-digit credit card in four groups; one of 10 cities and
  6 states.
* auction: the next auction id; seller hot with probability 1 - 1/hot_sellers_ratio (the first of
  the newest batch of 100 persons) else a random active person; category 10-14; initial bid and
  reserve (initial + another price) log-uniform from 100 to 10**8 cents; expires 1 ms to
  2 x the in-flight horizon after `date_time`; item name 3-19 and description 3-99 characters.
* bid: auction hot with probability 1 - 1/hot_auction_ratio (the first of the newest batch of 100
  auctions) else a random in-flight auction; bidder hot with probability 1 - 1/hot_bidders_ratio
  (the second of the newest batch of 100 persons) else a random active person; a price; a hot
  channel (one of 4, with its URL) with probability 1/2, else one of 10,000 channels, each with
  its own URL (Flink's nexmark `channel` and `url`).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runtime.workloads.nexmark.config import (
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    HOT_BATCH,
    NexmarkConfig,
)
from runtime.workloads.nexmark.draws import (
    below,
    event_keys,
    exact_strings,
    fixed_digits,
    prices,
    random_strings,
    slot_draws,
    text_base,
)

__all__ = ["COLUMNS", "EVENT_SCHEMA", "KINDS", "NexmarkGenerator"]

KINDS = ("person", "auction", "bid")
_INT, _STR = pa.int64(), pa.string()
EVENT_SCHEMA = pa.schema([
    ("kind", _STR), ("date_time", _INT),
    ("id", _INT), ("name", _STR), ("email_address", _STR), ("credit_card", _STR), ("city", _STR),
    ("state", _STR),
    ("item_name", _STR), ("description", _STR), ("initial_bid", _INT), ("reserve", _INT), ("expires", _INT),
    ("seller", _INT), ("category", _INT),
    ("auction", _INT), ("bidder", _INT), ("price", _INT), ("channel", _STR), ("url", _STR),
    ("extra", _STR),
])
#: every column, in `EVENT_SCHEMA` order
COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA.names)
#: each kind's own fields, in schema order
KIND_COLUMNS: dict[str, tuple[str, ...]] = {
    "person": ("kind", "date_time", "id", "name", "email_address", "credit_card", "city", "state", "extra"),
    "auction": ("kind", "date_time", "id", "item_name", "description", "initial_bid", "reserve", "expires",
                "seller", "category", "extra"),
    "bid": ("kind", "date_time", "auction", "bidder", "price", "channel", "url", "extra"),
}

FIRST_NAMES = pa.array(["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"])
LAST_NAMES = pa.array(["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"])
CITIES = pa.array(["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"])
STATES = pa.array(["AZ", "CA", "ID", "OR", "WA", "WY"])
NUM_CATEGORIES = 5
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
NUM_CHANNELS = 10_000

# Slots: each field of an event draws from its own (draws.py); a string takes its length slot and
# one per character after it, so string slots are spaced by 128.
SLOT_FIRST_NAME, SLOT_LAST_NAME, SLOT_CITY, SLOT_STATE = 0, 1, 2, 3
SLOT_CARD = 4  # four groups: 4..7
SLOT_HOT_1, SLOT_HOT_2, SLOT_PICK_1, SLOT_PICK_2 = 10, 11, 12, 13  # hot or not; whom, when not
SLOT_CATEGORY, SLOT_PRICE, SLOT_RESERVE, SLOT_LENGTH = 14, 15, 16, 17
SLOT_CHANNEL_HOT, SLOT_CHANNEL = 18, 19
SLOT_EXTRA_SIZE, SLOT_EXTRA_START = 20, 21
SLOT_EMAIL_USER, SLOT_EMAIL_HOST, SLOT_ITEM_NAME, SLOT_DESCRIPTION = 128, 256, 384, 512
SLOT_URL = 640  # three path parts: 640, 768, 896
#: counters of the channel table's draws live far from event numbers
_CHANNEL_KEYS = 1 << 62


def _lengths(array: pa.Array) -> np.ndarray:
    return pc.binary_length(array).to_numpy(zero_copy_only=False).astype(np.int64)


def _extras(keys: np.ndarray, seed: int, current: np.ndarray, average: int) -> pa.StringArray:
    """StringsGenerator.nextExtra: pad an event of `current` bytes to `average` on average
    (uniform within +-20 % of what is missing; nothing when already larger), cut from the seed's text."""
    missing = np.maximum(average - current, 0)
    delta = (2 * missing + 5) // 10  # Math.round(missing * 0.2)
    spread = below(slot_draws(keys, SLOT_EXTRA_SIZE), np.maximum(2 * delta, 1))
    sizes = missing - delta + np.where(delta > 0, spread, 0)
    base = text_base(seed)
    starts = below(slot_draws(keys, SLOT_EXTRA_START), len(base) - sizes)
    return exact_strings(base, starts, sizes)


def _hot_or_random(keys: np.ndarray, slot: int, ratio: int, hot: np.ndarray, randoms: np.ndarray) -> np.ndarray:
    """`hot` with probability 1 - 1/ratio (`random.nextInt(ratio) > 0`), else `randoms`."""
    return np.where(below(slot_draws(keys, slot), ratio) > 0, hot, randoms)


def _url_parts(keys: np.ndarray) -> pa.Array:
    """https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1, parts of 3-4 characters with '_'."""
    parts = [random_strings(keys, SLOT_URL + 128 * i, 5, "_") for i in range(3)]
    return pc.binary_join_element_wise("https://www.nexmark.com", *parts, "item.htm?query=1", "/")


@functools.cache
def channel_table(seed: int) -> tuple[pa.Array, pa.Array]:
    """(channels, urls): the 10,000 channels `channel-i` then the 4 hot ones, with their URLs (for
    9 in 10 channels the URL ends in `&channel_id=<abs(Integer.reverse(i))>`, as in Flink's nexmark)."""
    keys = event_keys(seed, _CHANNEL_KEYS + np.arange(NUM_CHANNELS + len(HOT_CHANNELS), dtype=np.int64))
    urls = _url_parts(keys).to_pylist()
    tagged = below(slot_draws(keys, SLOT_CHANNEL), 10) > 0
    for i in range(NUM_CHANNELS):
        if tagged[i]:
            reversed_bits = int(f"{i:032b}"[::-1], 2)
            urls[i] += f"&channel_id={abs(reversed_bits - (1 << 32) if reversed_bits >> 31 else reversed_bits)}"
    channels = [f"channel-{i}" for i in range(NUM_CHANNELS)] + list(HOT_CHANNELS)
    return pa.array(channels, _STR), pa.array(urls, _STR)


class NexmarkGenerator:
    """The events at stream positions `0 .. count-1` (`count` None: unbounded) of a config.

    Position p emits event number `config.event_numbers(p)` (= p unless out of order); all
    content of event e is a function of (config, e). Picklable: it holds the config only (per-seed
    tables are cached per process).
    """

    def __init__(self, config: NexmarkConfig, count: int | None = None) -> None:
        self.config = config
        self.count = count

    def kind_batches(self, positions: np.ndarray) -> list[tuple[np.ndarray, pa.RecordBatch]]:
        """For each kind present: the indices into `positions` of its events and a batch of them
        with the kind's own columns (`KIND_COLUMNS`), in position order."""
        c = self.config
        numbers = c.event_numbers(np.asarray(positions, dtype=np.int64), self.count)
        kinds = c.kinds(numbers)
        out = []
        for code, build in enumerate((self._persons, self._auctions, self._bids)):
            where = np.flatnonzero(kinds == code)
            if len(where):
                e = numbers[where]
                columns = {"kind": pa.array(np.full(len(e), KINDS[code]), _STR), "date_time": c.timestamps(e),
                           **build(e, event_keys(c.seed, e))}
                out.append((where, pa.RecordBatch.from_pydict(columns, schema=_kind_schema(KINDS[code]))))
        return out

    def batch(self, positions: np.ndarray) -> pa.RecordBatch:
        """The events as one batch of `EVENT_SCHEMA`, in position order."""
        parts = self.kind_batches(positions)
        if len(parts) == 1:
            return _widen(parts[0][1])
        order = np.argsort(np.concatenate([where for where, _ in parts]), kind="stable")
        table = pa.Table.from_batches([_widen(b) for _, b in parts]).take(order).combine_chunks()
        return table.to_batches()[0]

    def records(self, positions: np.ndarray) -> list[dict[str, Any]]:
        """The events as fresh dicts of their own fields, in position order."""
        out: list[Any] = [None] * len(positions)
        for where, batch in self.kind_batches(positions):
            for index, record in zip(where.tolist(), batch.to_pylist()):
                out[index] = record
        return out

    # ------------------------------------------------------------------------------- kinds

    def _persons(self, e: np.ndarray, keys: np.ndarray) -> dict[str, Any]:
        c = self.config
        name = pc.binary_join_element_wise(FIRST_NAMES.take(below(slot_draws(keys, SLOT_FIRST_NAME), 11)),
                                           LAST_NAMES.take(below(slot_draws(keys, SLOT_LAST_NAME), 9)), " ")
        email = pc.binary_join_element_wise(random_strings(keys, SLOT_EMAIL_USER, 7),
                                            random_strings(keys, SLOT_EMAIL_HOST, 5), "@")
        email = pc.binary_join_element_wise(email, ".com", "")
        groups = [fixed_digits(below(slot_draws(keys, SLOT_CARD + i), 10_000), 4) for i in range(4)]
        space = np.full((len(e), 1), ord(" "), np.uint8)
        card = np.hstack([groups[0], space, groups[1], space, groups[2], space, groups[3]])
        card = pa.array(card.view("S19").ravel()).cast(_STR)
        city = CITIES.take(below(slot_draws(keys, SLOT_CITY), 10))
        state = STATES.take(below(slot_draws(keys, SLOT_STATE), 6))
        current = 8 + _lengths(name) + _lengths(email) + 19 + _lengths(city) + _lengths(state)
        return {"id": c.last_person(e) + FIRST_PERSON_ID, "name": name, "email_address": email,
                "credit_card": card, "city": city, "state": state,
                "extra": _extras(keys, c.seed, current, c.avg_person_bytes)}

    def _auctions(self, e: np.ndarray, keys: np.ndarray) -> dict[str, Any]:
        c = self.config
        seller = _hot_or_random(keys, SLOT_HOT_1, c.hot_sellers_ratio, c.last_person(e) // HOT_BATCH * HOT_BATCH,
                                c.random_person(e, slot_draws(keys, SLOT_PICK_1)))
        initial_bid = prices(slot_draws(keys, SLOT_PRICE))
        length = 1 + below(slot_draws(keys, SLOT_LENGTH), np.maximum(2 * c.auction_horizon_ms(e), 1))
        item_name = random_strings(keys, SLOT_ITEM_NAME, 20)
        description = random_strings(keys, SLOT_DESCRIPTION, 100)
        current = 8 + _lengths(item_name) + _lengths(description) + 40
        return {"id": c.last_auction(e) + FIRST_AUCTION_ID, "item_name": item_name, "description": description,
                "initial_bid": initial_bid, "reserve": initial_bid + prices(slot_draws(keys, SLOT_RESERVE)),
                "expires": c.timestamps(e) + length, "seller": seller + FIRST_PERSON_ID,
                "category": FIRST_CATEGORY_ID + below(slot_draws(keys, SLOT_CATEGORY), NUM_CATEGORIES),
                "extra": _extras(keys, c.seed, current, c.avg_auction_bytes)}

    def _bids(self, e: np.ndarray, keys: np.ndarray) -> dict[str, Any]:
        c = self.config
        auction = _hot_or_random(keys, SLOT_HOT_1, c.hot_auction_ratio, c.last_auction(e) // HOT_BATCH * HOT_BATCH,
                                 c.random_auction(e, slot_draws(keys, SLOT_PICK_1)))
        # the second of the batch, so hot bidders and hot sellers differ
        bidder = _hot_or_random(keys, SLOT_HOT_2, c.hot_bidders_ratio, c.last_person(e) // HOT_BATCH * HOT_BATCH + 1,
                                c.random_person(e, slot_draws(keys, SLOT_PICK_2)))
        pick = slot_draws(keys, SLOT_CHANNEL)
        hot_channel = below(slot_draws(keys, SLOT_CHANNEL_HOT), 2) > 0
        channel = np.where(hot_channel, NUM_CHANNELS + below(pick, len(HOT_CHANNELS)), below(pick, NUM_CHANNELS))
        channels, urls = channel_table(c.seed)
        current = np.full(len(e), 32, np.int64)
        return {"auction": auction + FIRST_AUCTION_ID, "bidder": bidder + FIRST_PERSON_ID,
                "price": prices(slot_draws(keys, SLOT_PRICE)), "channel": channels.take(channel),
                "url": urls.take(channel), "extra": _extras(keys, c.seed, current, c.avg_bid_bytes)}


@functools.cache
def _kind_schema(kind: str) -> pa.Schema:
    return pa.schema([EVENT_SCHEMA.field(name) for name in KIND_COLUMNS[kind]])


def _widen(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` with every column of `EVENT_SCHEMA`, null where the kind has no such field."""
    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [batch.column(name) if name in batch.schema.names else pa.nulls(n, EVENT_SCHEMA.field(name).type)
         for name in COLUMNS], schema=EVENT_SCHEMA)
