"""Key groups: a stable hash, and range/subtask formulas that agree with each other."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state.key_groups import (
    NAN_KEY,
    KeyGroupRange,
    canonical_key,
    canonical_key_bytes,
    default_max_parallelism,
    is_supported_key,
    key_group_for,
    key_group_range_for_subtask,
    stable_key_hash,
    subtask_for_key,
    subtask_for_key_group,
)

# Pinned: a change here moves keys between key groups and breaks restore of old checkpoints.
PINNED = [
    ("", 1826626647),
    ("a", 1058891890),
    ("app-1", 119060332),
    ("héllo", 1081200932),
    (0, 3499760864),
    (1, 1546272614),
    (-1, 1893944339),
    (2**70, 1055011878),
    (1.5, 1213948430),
    (None, 830372875),
    (b"x", 3218190313),
    (("a", 1), 1142275585),
    ((), 560745302),
]


@pytest.mark.parametrize(("key", "expected"), PINNED)
def test_hash_is_pinned(key, expected):
    assert stable_key_hash(key) == expected


def test_key_group_of_pinned_keys():
    assert [key_group_for(k, 128) for k in ("a", "app-1", 0, 1, ("a", 1))] == [114, 108, 96, 102, 1]


@pytest.mark.slow
def test_hash_is_stable_across_processes():
    # str hashing must not depend on PYTHONHASHSEED (Ray actors live in other processes)
    code = "from state.key_groups import stable_key_hash as h; print(h('app-1'), h(('x', 2)))"
    repo = Path(__file__).resolve().parents[2]
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo,
                       env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(repo)}).stdout
        for seed in ("1", "2")
    }
    assert outs == {f"{stable_key_hash('app-1')} {stable_key_hash(('x', 2))}\n"}


def test_equal_keys_share_a_key_group():
    assert key_group_for(True, 128) == key_group_for(1, 128) == key_group_for(1.0, 128)
    assert key_group_for(False, 7) == key_group_for(0, 7) == key_group_for(-0.0, 7)
    assert key_group_for((1, "a"), 128) == key_group_for((1.0, "a"), 128)


def test_fast_paths_agree_with_canonical_encoding():
    class Name(str):
        pass

    class Count(int):
        pass

    assert key_group_for(Name("abc"), 128) == key_group_for("abc", 128)
    assert key_group_for(Count(42), 128) == key_group_for(42, 128)
    assert stable_key_hash(Name("abc")) == stable_key_hash("abc")


def test_encoding_is_injective_for_near_misses():
    keys = [("ab", "c"), ("a", "bc"), (("a",),), ("a",), "a", b"a", 1, 1.5, "1", (1, 2), ((1, 2),), None]
    encodings = [canonical_key_bytes(k) for k in keys]
    assert len(set(encodings)) == len(keys)
    assert canonical_key_bytes(2**63) != canonical_key_bytes(-(2**63))


@pytest.mark.parametrize("bad", [[1, 2], {"a": 1}, {1, 2}, object(), ("a", [1])])
def test_unsupported_key_type_names_the_key(bad):
    with pytest.raises(TypeError, match="cannot be hashed to a key group") as info:
        key_group_for(bad, 128)
    assert repr(bad)[:10] in str(info.value)


def test_distribution_is_roughly_even():
    for keys in ([f"user-{i}" for i in range(12_800)], list(range(12_800))):
        counts = Counter(key_group_for(k, 128) for k in keys)
        assert len(counts) == 128
        assert max(counts.values()) < 100 * 1.45 and min(counts.values()) > 100 * 0.55


def test_key_group_range_basics():
    r = KeyGroupRange(3, 7)
    assert list(r) == [3, 4, 5, 6] and len(r) == 4
    assert 3 in r and 7 not in r and 2 not in r and "3" not in r
    assert r.intersection(KeyGroupRange(5, 10)) == KeyGroupRange(5, 7)
    assert len(r.intersection(KeyGroupRange(8, 10))) == 0
    assert not r.overlaps(KeyGroupRange(7, 9)) and r.overlaps(KeyGroupRange(6, 9))
    assert str(r) == "[3, 7)"
    assert KeyGroupRange.of(16) == KeyGroupRange(0, 16)
    with pytest.raises(ValueError, match="start <= end"):
        KeyGroupRange(5, 4)
    with pytest.raises(ValueError):
        KeyGroupRange(-1, 4)


def test_flink_ranges():
    # Flink: computeKeyGroupRangeForOperatorIndex(128, 3, i) = [0,42], [43,85], [86,127] (inclusive)
    assert [key_group_range_for_subtask(128, 3, i) for i in range(3)] == [
        KeyGroupRange(0, 43), KeyGroupRange(43, 86), KeyGroupRange(86, 128)]


@pytest.mark.parametrize(("args", "match"), [
    ((0, 1, 0), "max_parallelism"), ((40000, 1, 0), "max_parallelism"), ((8, 9, 0), "parallelism"),
    ((8, 0, 0), "parallelism"), ((8, 2, 2), "subtask"), ((8, 2, -1), "subtask"),
])
def test_bad_range_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        key_group_range_for_subtask(*args)


def test_bad_key_group_argument():
    with pytest.raises(ValueError, match="key_group"):
        subtask_for_key_group(8, 2, 8)


def test_default_max_parallelism():
    assert default_max_parallelism(1) == 128
    assert default_max_parallelism(100) == 256
    assert default_max_parallelism(1000) == 2048
    assert default_max_parallelism(100_000) == 32768


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_ranges_partition_and_agree_with_subtask_for_key_group(data):
    max_parallelism = data.draw(st.integers(1, 2000), label="max_parallelism")
    parallelism = data.draw(st.integers(1, max_parallelism), label="parallelism")
    ranges = [key_group_range_for_subtask(max_parallelism, parallelism, i) for i in range(parallelism)]
    assert ranges[0].start == 0 and ranges[-1].end == max_parallelism
    for left, right in zip(ranges, ranges[1:]):
        assert left.end == right.start
    for subtask, r in enumerate(ranges):
        assert len(r) >= 1  # parallelism <= max_parallelism: nobody is left without key groups
        for kg in (r.start, r.end - 1):
            assert subtask_for_key_group(max_parallelism, parallelism, kg) == subtask
    key = data.draw(st.one_of(st.text(max_size=8), st.integers(), st.tuples(st.integers(), st.text())))
    kg = key_group_for(key, max_parallelism)
    assert kg in ranges[subtask_for_key(key, max_parallelism, parallelism)]


class _Opaque:
    """A key type the encoding does not support."""


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=4),
                     st.binary(max_size=4), st.just(math.nan), st.builds(_Opaque))
_KEYS = st.recursive(_SCALARS, lambda inner: st.tuples(inner) | st.tuples(inner, inner) | st.tuples(inner, inner, inner),
                     max_leaves=8)


def _nan_replaced(key):
    """What `canonical_key` must return, spelled out: every NaN float (in tuples too) the one NAN_KEY."""
    if isinstance(key, float) and key != key:
        return NAN_KEY
    if type(key) is tuple:
        return tuple(_nan_replaced(element) for element in key)
    return key


def _same(a, b) -> bool:
    """Equal, with NaN only where the other has the very same NaN object."""
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a is b or (a == b and type(a) is type(b))


@given(_KEYS)
def test_canonical_key_replaces_every_nan_and_keeps_the_rest(key):
    assert _same(canonical_key(key), _nan_replaced(key))


@given(_KEYS)
def test_supported_keys_are_the_encodable_ones(key):
    try:
        canonical_key_bytes(key)
        encodable = True
    except TypeError:
        encodable = False
    assert is_supported_key(key) is encodable
