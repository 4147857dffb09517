"""Key groups: how keys map to subtasks, stably across processes and rescaling.

Theory of operation (Flink's `KeyGroupRangeAssignment`)
-------------------------------------------------------
Keyed state is partitioned into `max_parallelism` *key groups*, the atomic unit of state
redistribution. A key belongs to key group `stable_hash(key) % max_parallelism` forever (for a
given `max_parallelism`); a subtask owns a contiguous range of key groups. Rescaling from
parallelism p to q only re-slices the ranges, so restore reads whole key groups from old
snapshots and never has to re-hash keys.

Ranges here are half-open, `[start, end)`, like Python's `range` (Flink's `KeyGroupRange` is
inclusive on both ends). Subtask i of p owns `[ceil(i*M/p), ceil((i+1)*M/p))`, and key group g
belongs to subtask `floor(g*p/M)`; the two formulas are exact inverses (see the property test).

The hash must be stable: Python's `hash()` is salted per process for `str`, and Ray actors in
different processes (and a restore next week) must agree. We hash a canonical byte encoding of the
key with CRC-32 (C speed via `zlib`) and run Murmur3's 32-bit finalizer over it, as Flink runs
`murmurHash` over `hashCode()`. CRC-32 alone is linear, so keys differing in a few bits would
land in structured patterns modulo a power of two; the finalizer scrambles them.

Keys that compare equal in Python (`1 == 1.0 == True`) share a dict slot in the backend, so they
must also share a key group: the hash encoding maps bools and integral floats to the int
encoding. NaN is the exception Python makes: it is unequal to itself, and every record carries a
NaN object of its own, so each would be a new key. Flink compares keys by their serialised bytes,
where every NaN is one key; `canonical_key` gives every NaN (also inside a tuple key) one object,
which the backend uses for lookups and restored snapshots use for their keys. Changing anything in this file changes where keys live and breaks restore of existing
checkpoints; `tests/state` pins a few hash values to catch that.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from zlib import crc32

#: Flink's upper bound for max parallelism (key groups are addressed with 15 bits there).
UPPER_BOUND_MAX_PARALLELISM = 1 << 15
#: Lower bound Flink uses when deriving a default max parallelism.
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128

_TAG_NONE = b"n"
_TAG_INT = b"i"
_TAG_FLOAT = b"f"
_TAG_STR = b"s"
_TAG_BYTES = b"b"
_TAG_TUPLE = b"t"

# crc32(tag + payload) == crc32(payload, crc32(tag)): the fast paths skip the concatenation.
_SEED_INT = crc32(_TAG_INT)
_SEED_STR = crc32(_TAG_STR)
_MASK32 = 0xFFFFFFFF
_PACK_LEN = struct.Struct("<I").pack
_PACK_FLOAT = struct.Struct("<d").pack


def _int_payload(value: int) -> bytes:
    try:
        return value.to_bytes(8, "little", signed=True)
    except OverflowError:  # longer than 8 bytes, so it cannot collide with an int64 encoding
        return value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)


#: the one NaN object every NaN key becomes (`canonical_key`): a dict finds it by identity
NAN_KEY = math.nan


def canonical_key(key: Any) -> Any:
    """`key`, with every NaN float (also inside tuples) replaced by `NAN_KEY`, so all NaN keys are
    one dict key. A str or int key is returned at once (the backend calls it on a key-group cache
    miss only, which every NaN object is)."""
    t = type(key)
    if t is str or t is int:
        return key
    if t is tuple:
        return key if _nan_free(key) else tuple([canonical_key(element) for element in key])
    if isinstance(key, float):
        return NAN_KEY if key != key else key
    return key


def _nan_free(key: tuple) -> bool:
    """No NaN float anywhere in tuple `key` (nested tuples included): it is its own canonical key,
    and the common window and timer keys of ints are returned without a copy."""
    for element in key:
        t = type(element)
        if t is str or t is int:
            continue
        if t is tuple:
            if not _nan_free(element):
                return False
        elif isinstance(element, float) and element != element:
            return False
    return True


def is_supported_key(key: Any) -> bool:
    """`canonical_key_bytes` can encode `key` (int, str, float, bool, bytes, None and nested
    tuples of those), checked without encoding it."""
    t = type(key)
    if t is str or t is int or t is float or key is None or t is bool or t is bytes:
        return True
    if t is tuple:
        return all(is_supported_key(element) for element in key)
    return isinstance(key, int | float | str | bytes)


def canonical_key_bytes(key: Any) -> bytes:
    """The canonical, process-independent byte encoding of a key (tag + payload).

    Supported keys: `int`, `str`, `float`, `bool`, `bytes`, `None` and tuples of those (nested).
    Keys equal in Python encode equally (`True`, `1` and `1.0` all encode as the int 1).

    Raises:
        TypeError: the key (or an element of a tuple key) has another type; names the key.
    """
    try:
        return _encode(key)
    except _UnsupportedKey as exc:
        inner = "" if exc.element is key else f" (element {exc.element!r})"
        raise TypeError(
            f"key {key!r} cannot be hashed to a key group: unsupported type "
            f"{type(exc.element).__name__}{inner}; keys must be int, str, float, bool, bytes, None "
            "or tuples of those") from None


class _UnsupportedKey(Exception):
    def __init__(self, element: Any) -> None:
        self.element = element


def _encode(key: Any) -> bytes:
    if key is None:
        return _TAG_NONE
    if isinstance(key, bool):
        return _TAG_INT + _int_payload(int(key))
    if isinstance(key, int):
        return _TAG_INT + _int_payload(key)
    if isinstance(key, str):
        return _TAG_STR + key.encode("utf-8", "surrogatepass")
    if isinstance(key, float):
        if key.is_integer():
            return _TAG_INT + _int_payload(int(key))
        return _TAG_FLOAT + _PACK_FLOAT(math.nan if key != key else key)
    if isinstance(key, bytes):
        return _TAG_BYTES + key
    if isinstance(key, tuple):
        parts = [_TAG_TUPLE]
        for element in key:
            encoded = _encode(element)
            parts.append(_PACK_LEN(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    raise _UnsupportedKey(key)


def _fmix32(h: int) -> int:
    """Murmur3's 32-bit finalizer (avalanche)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def stable_key_hash(key: Any) -> int:
    """A 32-bit hash of `key` that is identical in every process and every run.

    Raises:
        TypeError: unsupported key type (see `canonical_key_bytes`).
    """
    t = type(key)
    if t is str:
        return _fmix32(crc32(key.encode("utf-8", "surrogatepass"), _SEED_STR))
    if t is int:
        return _fmix32(crc32(_int_payload(key), _SEED_INT))
    return _fmix32(crc32(canonical_key_bytes(key)))


def key_group_for(key: Any, max_parallelism: int) -> int:
    """The key group of `key`: `stable_key_hash(key) % max_parallelism`.

    This is on the per-record path; `str` and `int` keys take a fast path.

    Raises:
        TypeError: unsupported key type; the message names the key.
    """
    t = type(key)
    if t is str:
        h = crc32(key.encode("utf-8", "surrogatepass"), _SEED_STR)
    elif t is int:
        h = crc32(_int_payload(key), _SEED_INT)
    else:
        h = crc32(canonical_key_bytes(key))
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    return (h ^ (h >> 16)) % max_parallelism


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """A half-open range `[start, end)` of key groups (Flink's is inclusive; ours is not).

    An empty range has `start == end`. Supports `in`, `len()` and iteration.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (isinstance(self.start, int) and isinstance(self.end, int)):
            raise TypeError(f"KeyGroupRange bounds must be ints, got {self.start!r}, {self.end!r}")
        if not 0 <= self.start <= self.end:
            raise ValueError(f"invalid KeyGroupRange [{self.start}, {self.end}): need 0 <= start <= end")

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group < self.end

    def __len__(self) -> int:
        return self.end - self.start

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end))

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        """The key groups in both ranges (possibly empty)."""
        start = max(self.start, other.start)
        return KeyGroupRange(start, max(start, min(self.end, other.end)))

    def overlaps(self, other: KeyGroupRange) -> bool:
        return len(self.intersection(other)) > 0

    def __str__(self) -> str:
        return f"[{self.start}, {self.end})"

    @classmethod
    def of(cls, max_parallelism: int) -> KeyGroupRange:
        """All key groups of a job with `max_parallelism`."""
        check_max_parallelism(max_parallelism)
        return cls(0, max_parallelism)


def check_max_parallelism(max_parallelism: int) -> None:
    """Raise `ValueError` naming the option unless 1 <= max_parallelism <= 32768."""
    if isinstance(max_parallelism, bool) or not isinstance(max_parallelism, int):
        raise TypeError(f"max_parallelism must be an int, got {max_parallelism!r}")
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"max_parallelism must be in [1, {UPPER_BOUND_MAX_PARALLELISM}], got {max_parallelism}")


def _check_parallelism(max_parallelism: int, parallelism: int) -> None:
    check_max_parallelism(max_parallelism)
    if isinstance(parallelism, bool) or not isinstance(parallelism, int):
        raise TypeError(f"parallelism must be an int, got {parallelism!r}")
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(
            f"parallelism must be in [1, max_parallelism={max_parallelism}], got {parallelism}")


def key_group_range_for_subtask(max_parallelism: int, parallelism: int, subtask: int) -> KeyGroupRange:
    """The key groups owned by `subtask` (0-based) of `parallelism` subtasks.

    Raises:
        ValueError: parallelism outside [1, max_parallelism] or subtask outside [0, parallelism).
    """
    _check_parallelism(max_parallelism, parallelism)
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask must be in [0, {parallelism}), got {subtask}")
    # ceil(i * M / p) without floats: -(-a // b)
    start = -(-subtask * max_parallelism // parallelism)
    end = -(-(subtask + 1) * max_parallelism // parallelism)
    return KeyGroupRange(start, end)


def subtask_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask (of `parallelism`) that owns `key_group`.

    Raises:
        ValueError: key_group outside [0, max_parallelism) or a bad parallelism.
    """
    _check_parallelism(max_parallelism, parallelism)
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key_group must be in [0, {max_parallelism}), got {key_group}")
    return key_group * parallelism // max_parallelism


def subtask_for_key(key: Any, max_parallelism: int, parallelism: int) -> int:
    """The subtask that owns `key` (what a hash partitioner uses); Flink's
    `assignKeyToParallelOperator`."""
    return subtask_for_key_group(max_parallelism, parallelism, key_group_for(key, max_parallelism))


def default_max_parallelism(parallelism: int) -> int:
    """Flink's default: `parallelism * 1.5` rounded up to a power of two, within [128, 32768]."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    wanted = parallelism + parallelism // 2
    power = 1 << max(0, (wanted - 1).bit_length())
    return min(max(power, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)
