"""Counter-based random draws: every value of event `e` is a hash of (seed, e, slot).

Why not a seeded generator per event (Beam seeds `java.util.Random` with the event id)? A hash
needs no sequential state, so any event — any position of any split, in any order, one at a time
or a numpy array of thousands — gets the same values: seeking a split, changing the split count
and the vectorised and record forms cannot disagree. Each field of an event draws from its own
*slot* (`SLOT_*` in `generator.py`), a string's characters from consecutive slots.

The mixer is SplitMix64's finalizer (Steele, Lea and Flood 2014; Vigna's `splitmix64.c`) over
uint64 arrays, whose multiplications wrap mod 2**64 in numpy as in the reference. Everything here is
integer arithmetic or IEEE-754 multiplication, identical on every machine: prices are a product of
three table entries (`prices`), never a `pow` (whose last bit differs between libm builds and
numpy's SIMD loops).
"""

from __future__ import annotations

import decimal
import functools

import numpy as np
import pyarrow as pa

__all__ = ["below", "event_keys", "exact_strings", "fixed_digits", "prices", "random_strings", "slot_draws",
           "text_base", "unit"]

_U64 = np.uint64
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: SplitMix64's increment
_SLOT_STEP = 0xD1B54A32D192ED03  # odd constant spreading slots over the key space
MASK64 = (1 << 64) - 1


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, elementwise on a uint64 array (a new array)."""
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def _seed_key(seed: int) -> int:
    return int(mix64(np.array([seed & MASK64], dtype=np.uint64))[0])


def event_keys(seed: int, numbers: np.ndarray) -> np.ndarray:
    """One uint64 key per event number (or other counter): the root every draw of it derives from."""
    with np.errstate(over="ignore"):
        return mix64(_U64(_seed_key(seed)) + numbers.astype(np.uint64) * _U64(_GOLDEN))


def slot_draws(keys: np.ndarray, slot: int, width: int | None = None) -> np.ndarray:
    """The uint64 draw of `slot` for each key; with `width`, a (keys x width) matrix of slots
    `slot .. slot + width - 1` (a string's characters)."""
    if width is None:
        return mix64(keys ^ _U64((slot * _SLOT_STEP) & MASK64))
    steps = (np.arange(slot, slot + width, dtype=np.uint64) * _U64(_SLOT_STEP))
    return mix64(keys[:, None] ^ steps[None, :])


def below(draws: np.ndarray, bound: int | np.ndarray) -> np.ndarray:
    """Draws reduced to `[0, bound)` as int64 (`bound` >= 1, a number or an array per draw)."""
    return (draws % np.asarray(bound).astype(np.uint64)).astype(np.int64)


def unit(draws: np.ndarray) -> np.ndarray:
    """Draws as floats uniform in [0, 1) (53 bits, as `java.util.Random.nextDouble`)."""
    return (draws >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))


# --------------------------------------------------------------------------------------- prices


@functools.cache
def _decade_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """10 ** (6 k / 2**30) = T1[k >> 20] * T2[(k >> 10) & 1023] * T3[k & 1023]. Each table holds the
    powers 0..1023 of one step (the correctly rounded double of an exact decimal power), multiplied
    up one by one in double precision: IEEE arithmetic in a fixed order, the same everywhere."""
    context = decimal.Context(prec=40)

    def table(shift: int) -> np.ndarray:
        step = float(context.power(decimal.Decimal(10), decimal.Decimal(6) / (1 << shift)))
        values = [1.0]
        for _ in range(1023):
            values.append(values[-1] * step)
        return np.array(values)

    return table(10), table(20), table(30)


def prices(draws: np.ndarray) -> np.ndarray:
    """NexMark's price in cents: `round(10 ** (6 u) * 100)` for u uniform in [0, 1) — log-uniform
    from $1 to $1,000,000 (`PriceGenerator.nextPrice`); u in steps of 2**-30 (~1.3e-8 decades)."""
    t1, t2, t3 = _decade_tables()
    k = (draws >> _U64(34)).astype(np.int64)
    value = ((100.0 * t1[k >> 20]) * t2[(k >> 10) & 1023]) * t3[k & 1023]
    return np.floor(value + 0.5).astype(np.int64)


# -------------------------------------------------------------------------------------- strings


def _string_array(chars: np.ndarray, keep: np.ndarray) -> pa.StringArray:
    """Row i = the bytes `chars[i, keep[i]]` (ASCII), as an Arrow string array."""
    data = chars[keep]
    offsets = np.zeros(len(chars) + 1, dtype=np.int32)
    np.cumsum(keep.sum(axis=1), out=offsets[1:])
    return pa.StringArray.from_buffers(len(chars), pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))


def random_strings(keys: np.ndarray, slot: int, max_length: int, special: str = " ") -> pa.StringArray:
    """NexMark's `nextString(random, max_length, special)` per key: 3 .. max_length - 1 characters,
    each `special` with probability 1/13, else a lowercase letter; spaces trimmed at both ends
    (Java's `trim()`, which only ever meets the space here).

    Slot `slot` draws the length, slots `slot + 1 ..` the characters.
    """
    n, width = len(keys), max_length - 1
    lengths = 3 + below(slot_draws(keys, slot), max_length - 3)
    draws = slot_draws(keys, slot + 1, width)
    chars = np.where(draws % _U64(13) == 0, ord(special), 97 + (draws // _U64(13)) % _U64(26)).astype(np.uint8)
    position = np.arange(width)
    keep = position[None, :] < lengths[:, None]
    if special == " " and n:
        solid = keep & (chars != ord(" "))
        first = np.where(solid.any(axis=1), solid.argmax(axis=1), width)
        last = width - 1 - solid[:, ::-1].argmax(axis=1)
        keep &= (position[None, :] >= first[:, None]) & (position[None, :] <= last[:, None])
    return _string_array(chars, keep)


def fixed_digits(values: np.ndarray, digits: int) -> np.ndarray:
    """(len(values) x digits) uint8 matrix of the zero-padded decimal digits of `values` (>= 0)."""
    powers = 10 ** np.arange(digits - 1, -1, -1, dtype=np.int64)
    return (48 + (values[:, None] // powers[None, :]) % 10).astype(np.uint8)


@functools.cache
def text_base(seed: int, length: int = 1 << 20) -> np.ndarray:
    """`length` lowercase letters (uint8) drawn from `seed`: the text `exact_strings` cuts from
    (Flink's nexmark cuts every `extra` from one reusable 1 MiB random string the same way)."""
    keys = event_keys(seed ^ 0x5EED_7E47, np.arange(length, dtype=np.int64))
    return (97 + keys % _U64(26)).astype(np.uint8)


def exact_strings(base: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> pa.StringArray:
    """Row i = `base[starts[i] : starts[i] + sizes[i]]` (ASCII), as an Arrow string array."""
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    gather = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, sizes)
    return pa.StringArray.from_buffers(len(sizes), pa.py_buffer(offsets.astype(np.int32)),
                                       pa.py_buffer(base[gather].tobytes()))
