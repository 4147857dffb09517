"""Partitioners: hash by key group owner, round-robin, broadcast, forward; nothing lost or duplicated."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import OperatorError
from operators.keyed import ColumnKeySelector
from runtime.core.partitioners import Broadcast, Forward, KeyGroupHash, Rebalance
from state.key_groups import key_group_for, key_group_range_for_subtask, subtask_for_key_group


def recs(n, key=lambda i: f"k{i % 7}"):
    return [{"i": i, "k": key(i)} for i in range(n)]


def test_forward_sends_everything_to_its_single_channel():
    batch = recs(5)
    assert Forward().create().partition(batch, 1) == [batch]
    with pytest.raises(ValueError, match="exactly one channel"):
        Forward().create().partition(batch, 2)


def test_rebalance_is_round_robin_across_batches_and_starts_at_the_sender_index():
    p = Rebalance().create(subtask=1)
    first = p.partition(recs(4), 3)
    assert [[r["i"] for r in ch] for ch in first] == [[2], [0, 3], [1]]
    second = p.partition(recs(2), 3)  # continues after channel 1 -> next is channel 2
    assert [[r["i"] for r in ch] for ch in second] == [[1], [], [0]]


def test_rebalance_single_channel_and_empty_batch():
    p = Rebalance().create()
    assert p.partition([], 3) == [[], [], []]
    batch = recs(3)
    assert p.partition(batch, 1) == [batch]


def test_broadcast_sends_every_record_to_every_channel():
    batch = recs(3)
    parts = Broadcast().create().partition(batch, 3)
    assert parts == [batch, batch, batch]
    parts[1].append({"x": 1})
    assert parts[2] == batch  # channels do not share one list


@pytest.mark.parametrize("selector", [ColumnKeySelector("k"), lambda r: r["k"]])
def test_hash_sends_each_key_to_the_subtask_owning_its_key_group(selector):
    max_p, n = 128, 3
    p = KeyGroupHash(selector, max_p).create()
    parts = p.partition(recs(50), n)
    for channel, part in enumerate(parts):
        owned = key_group_range_for_subtask(max_p, n, channel)
        for record in part:
            kg = key_group_for(record["k"], max_p)
            assert kg in owned and subtask_for_key_group(max_p, n, kg) == channel
    assert sum(map(len, parts)) == 50


def test_hash_treats_equal_keys_alike_across_types():
    p = KeyGroupHash(ColumnKeySelector("k"), 128).create()
    for key in (1, 1.0, True, "1", (1, "a"), None, b"x", 2.5):
        (channel,) = [c for c, part in enumerate(p.partition([{"k": key}], 4)) if part]
        assert channel == subtask_for_key_group(128, 4, key_group_for(key, 128))


def test_hash_missing_column_and_bad_key_name_operator_and_record():
    p = KeyGroupHash(ColumnKeySelector("app"), 128, operator="key_by('app') -> count").create()
    with pytest.raises(OperatorError, match=r"key_by\('app'\) -> count. failed on record \{'i': 0.*no column 'app'"):
        p.partition([{"i": 0}], 2)
    with pytest.raises(OperatorError, match=r"failed on record \{'app': \[1\]\}.*cannot be hashed to a key group"):
        p.partition([{"app": [1]}], 2)


def test_specs_are_picklable_and_create_fresh_instances():
    spec = KeyGroupHash(lambda r: r["k"], 64, operator="x")
    clone = cloudpickle.loads(cloudpickle.dumps(spec))
    assert clone.max_parallelism == 64 and clone.create() is not clone.create()
    for s in (Forward(), Rebalance(), Broadcast(), KeyGroupHash(ColumnKeySelector("k"), 8)):
        assert pickle.loads(pickle.dumps(s)) == s
    a, b = Rebalance().create(), Rebalance().create()
    a.partition(recs(1), 2)
    assert [len(x) for x in b.partition(recs(1), 2)] == [1, 0]  # b has its own position


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["forward", "rebalance", "hash", "broadcast"]),
    sizes=st.lists(st.integers(0, 20), min_size=1, max_size=5),
    n=st.integers(1, 6),
    start=st.integers(0, 5),
    keys=st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none()), min_size=1, max_size=8),
)
def test_nothing_lost_or_duplicated_and_order_kept_per_channel(kind, sizes, n, start, keys):
    spec = {"forward": Forward(), "rebalance": Rebalance(), "broadcast": Broadcast(),
            "hash": KeyGroupHash(ColumnKeySelector("k"), 32)}[kind]
    channels = 1 if kind == "forward" else n
    p = spec.create(subtask=start)
    received: list[list[int]] = [[] for _ in range(channels)]
    sent: list[int] = []
    counter = 0
    for size in sizes:
        batch = [{"i": counter + j, "k": keys[(counter + j) % len(keys)]} for j in range(size)]
        counter += size
        sent.extend(r["i"] for r in batch)
        parts = p.partition(batch, channels)
        assert len(parts) == channels
        for ch, part in enumerate(parts):
            received[ch].extend(r["i"] for r in part)
    for ch in received:
        assert ch == sorted(ch)  # order kept per channel
    if kind == "broadcast":
        assert all(ch == sent for ch in received)
    else:
        assert sorted(i for ch in received for i in ch) == sent  # each record exactly once
    if kind == "rebalance":
        counts = [len(ch) for ch in received]
        assert max(counts) - min(counts) <= 1
