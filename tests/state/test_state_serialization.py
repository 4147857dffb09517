"""Arrow IPC encodings: keyed snapshots, operator state, channel state. Lossless or loud."""

from __future__ import annotations

import datetime
import struct
import zlib

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from state import (
    KeyedStateBackend,
    KeyGroupRange,
    StateFormatError,
    StateSerializationError,
    buffers_from_bytes,
    buffers_to_bytes,
    keyed_snapshot_from_bytes,
    operator_state_from_bytes,
    operator_state_to_bytes,
)
from state.serialization import _decode_key, _encode_key, _key_column, to_arrow_column
from state.values import values_equal

MAX_P = 32


def filled_backend() -> KeyedStateBackend:
    b = KeyedStateBackend("agg", KeyGroupRange(0, MAX_P), MAX_P)
    for i, key in enumerate(["a", "b", "c"]):
        b.set_current_key(key)
        b.value_state("count").update(i + 1)
        b.value_state("last", default={}).update({"app": key, "n": i, "tags": ["x", "y"][: i]})
        b.list_state("seen").add_all(range(i + 1))
        b.map_state("per_region").put(f"r{i}", float(i) / 2)
        b.map_state("per_region").put(f"s{i}", None)
    b.set_current_key("d")
    b.list_state("empty-later").add(1)
    b.list_state("empty-later").clear()
    return b


def test_keyed_round_trip():
    b = filled_backend()
    snap = b.snapshot(7)
    back = keyed_snapshot_from_bytes(snap.to_bytes())
    assert back.operator_name == "agg" and back.checkpoint_id == 7 and back.max_parallelism == MAX_P
    assert back.key_group_range == KeyGroupRange(0, MAX_P)
    assert dict(back.kinds) == dict(snap.kinds)  # empty states keep their registration
    assert back.to_dump() == snap.to_dump() == b.dump()
    assert {n: dict(g) for n, g in back.groups.items()} == {n: dict(g) for n, g in snap.groups.items()}


def test_keyed_round_trip_is_deterministic():
    assert filled_backend().snapshot(1).to_bytes() == filled_backend().snapshot(1).to_bytes()


def test_schema_records_operator_state_and_kind():
    blob = filled_backend().snapshot(3).to_bytes()
    # read the raw streams back with plain pyarrow: the format is inspectable without barrierflow
    (count,) = struct.unpack_from("<I", blob, 8)
    lengths = struct.unpack_from(f"<{count}Q", blob, 16)
    offset = 16 + 8 * count
    tables = []
    for length in lengths:
        tables.append(pa.ipc.open_stream(blob[offset:offset + length]).read_all())
        offset += length
    header = tables[0]
    assert header.schema.metadata[b"barrierflow.operator"] == b"agg"
    assert header.column("kind").to_pylist() == ["value", "value", "list", "map", "list"]
    count_table = tables[1]
    assert count_table.schema.names == ["key_group", "key", "value"]
    assert count_table.schema.field("key_group").type == pa.int32()
    assert count_table.schema.metadata[b"barrierflow.state"] == b"count"
    assert tables[3].schema.field("value").type == pa.list_(pa.int64())
    assert tables[4].schema.names == ["key_group", "key", "map_key", "map_value"]


def test_tuple_keys_and_tuple_map_keys_round_trip():
    b = KeyedStateBackend("composite", KeyGroupRange(0, MAX_P), MAX_P)
    for key in [("eu", 1), ("us", 2), ("eu", 3)]:
        b.set_current_key(key)
        b.value_state("v").update(key[1])
        b.map_state("m").put((key[0], (key[1], "x")), "y")
    back = keyed_snapshot_from_bytes(b.snapshot(1).to_bytes())
    assert back.to_dump() == b.dump()
    assert all(type(k) is tuple for k in back.to_dump()["v"])


def test_mixed_key_types_in_one_state_name_the_state():
    b = KeyedStateBackend("mixed", KeyGroupRange(0, MAX_P), MAX_P)
    for key in ["a", 1]:
        b.set_current_key(key)
        b.value_state("v").update(1)
    with pytest.raises(StateSerializationError, match=r"operator 'mixed', state 'v': keys"):
        b.snapshot(1).to_bytes()


@pytest.mark.parametrize(("values", "match"), [
    ([1, "a"], "cannot share one Arrow column"),
    ([{"a": 1}, {"b": 2}], "does not survive Arrow conversion"),  # Arrow would pad with nulls
    (["a", b"b"], "does not survive"),  # Arrow would turn the str into bytes
    ([datetime.datetime(2020, 1, 1), datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)], "survive"),
])
def test_mixed_values_in_one_state_name_the_state(values, match):
    b = KeyedStateBackend("mixed", KeyGroupRange(0, MAX_P), MAX_P)
    for key, value in zip(["a", "b"], values):
        b.set_current_key(key)
        b.value_state("v").update(value)  # each value alone is fine
    with pytest.raises(StateSerializationError, match=rf"operator 'mixed', state 'v': values.*{match}"):
        b.snapshot(1).to_bytes()


def test_ints_mixed_with_floats_become_floats():
    column = to_arrow_column([1, 2.5], "x")
    assert column.type == pa.float64() and column.to_pylist() == [1.0, 2.5]
    with pytest.raises(StateSerializationError, match="x"):
        to_arrow_column([2**60 + 1, 0.5], "x")  # but never with a loss of precision


def test_operator_state_round_trip():
    state = {
        "offsets": [{"split": 0, "offset": 10}, {"split": 1, "offset": 0}],
        "pending": [[{"id": 1, "v": "a"}], []],
        "empty": [],
        "nums": [1, None, 3],
        "tuples": [(1, 2)],
    }
    back = operator_state_from_bytes(operator_state_to_bytes(state))
    assert back == {**state, "tuples": [[1, 2]]}
    assert operator_state_from_bytes(operator_state_to_bytes({})) == {}


@pytest.mark.parametrize(("state", "match"), [
    ({"s": [1, "a"]}, "operator state 's'"),
    ({"s": [{1, 2}]}, "operator state 's'"),
    ({"s": "abc"}, "must be a list"),
    ({1: [1]}, "names must be str"),
])
def test_operator_state_errors(state, match):
    with pytest.raises(StateSerializationError, match=match):
        operator_state_to_bytes(state)


def batch(**columns) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_channel_state_round_trip_keeps_order_boundaries_and_schemas():
    buffers = {
        3: [batch(a=[1, 2]), batch(a=[3]), batch(b=["x"]), batch(a=[4])],
        0: [],
        1: [batch(a=[5]).slice(0, 0), batch(a=[6], c=[1.5])],
    }
    back = buffers_from_bytes(buffers_to_bytes(buffers))
    assert list(back) == [0, 1, 3]
    for channel, batches in buffers.items():
        assert len(back[channel]) == len(batches)
        for original, restored in zip(batches, back[channel]):
            assert restored.equals(original) and restored.schema.equals(original.schema)
    assert buffers_from_bytes(buffers_to_bytes({})) == {}


def test_channel_state_errors():
    with pytest.raises(StateSerializationError, match="channel 2"):
        buffers_to_bytes({2: [{"a": 1}]})  # type: ignore[list-item]
    with pytest.raises(StateSerializationError, match="channel ids"):
        buffers_to_bytes({"2": []})  # type: ignore[dict-item]


def test_corrupt_or_wrong_blobs_are_format_errors():
    keyed = filled_backend().snapshot(1).to_bytes()
    with pytest.raises(StateFormatError, match="checksum"):
        keyed_snapshot_from_bytes(keyed[:-1] + bytes([keyed[-1] ^ 1]))
    with pytest.raises(StateFormatError):
        keyed_snapshot_from_bytes(keyed[:40])
    with pytest.raises(StateFormatError, match="bad magic"):
        keyed_snapshot_from_bytes(b"PAR1" + keyed[4:])
    with pytest.raises(StateFormatError, match="expected a keyed state blob, found operator"):
        keyed_snapshot_from_bytes(operator_state_to_bytes({"a": [1]}))
    with pytest.raises(StateFormatError, match="expected a channel state blob, found keyed"):
        buffers_from_bytes(keyed)
    with pytest.raises(StateFormatError, match="expected bytes"):
        operator_state_from_bytes("nope")  # type: ignore[arg-type]
    with pytest.raises(StateFormatError, match="version"):
        keyed_snapshot_from_bytes(keyed[:4] + b"\x09" + keyed[5:])
    # a well-formed container whose stream is not Arrow
    body = struct.pack("<1Q", 3) + b"xyz"
    fake = struct.pack("<4sBBHII", b"BFST", 1, 2, 0, 1, zlib.crc32(body)) + body
    with pytest.raises(StateFormatError, match="cannot read operator state header"):
        operator_state_from_bytes(fake)


# --------------------------------------------------------------------------- property tests

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False), st.text(max_size=10), st.binary(max_size=10))
nested = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12,
)


leaf_types = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=True),
    "str": st.text(max_size=10),
    "bytes": st.binary(max_size=10),
    "bool": st.booleans(),
}


@st.composite
def homogeneous(draw):
    """A strategy for values of one shape: a leaf type, lists of a shape, or fixed-key dicts."""

    def shape(depth):
        options = ["leaf"] + (["list", "dict"] if depth < 3 else [])
        kind = draw(st.sampled_from(options))
        if kind == "leaf":
            return st.one_of(st.none(), leaf_types[draw(st.sampled_from(sorted(leaf_types)))])
        if kind == "list":
            return st.one_of(st.none(), st.lists(shape(depth + 1), max_size=4))
        fields = draw(st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=3, unique=True))
        return st.fixed_dictionaries({f: shape(depth + 1) for f in fields})

    return draw(st.lists(shape(0), min_size=1, max_size=6))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_homogeneous_values_round_trip_through_keyed_snapshots(data):
    values = data.draw(homogeneous(), label="values")
    b = KeyedStateBackend("rt", KeyGroupRange(0, MAX_P), MAX_P)
    for i, value in enumerate(values):
        b.set_current_key(i)
        b.value_state("v").update(value)
        b.list_state("l").add(value)
        b.map_state("m").put(str(i), value)
    back = keyed_snapshot_from_bytes(b.snapshot(1).to_bytes()).to_dump()
    assert values_equal(back, b.dump())


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(nested, max_size=5))
@example([{"a": 1}, {"b": 1}])
@example([1, 1.5])
@example(["a", b"a"])
@example([["", b""]])  # Arrow would decode the bytes as UTF-8 (and crash on b"\x80")
@example([["", b"\x80"]])
def test_any_values_round_trip_exactly_or_fail_loudly(values):
    try:
        state = {"s": values}
        back = operator_state_from_bytes(operator_state_to_bytes(state))
    except StateSerializationError as exc:
        assert "operator state 's'" in str(exc)
        return
    assert values_equal(back["s"], values)
    for original, restored in zip(values, back["s"]):  # only int -> float may change the type
        if type(original) is not type(restored):
            assert type(original) in (int, bool, tuple) or original is None, (original, restored)


_KEY_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                         st.text(max_size=3), st.binary(max_size=3))
_TUPLE_KEYS = st.recursive(_KEY_SCALARS, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=6)


def _row_wise_key_column(keys):
    """Tuple keys as structs the plain way: every key a dict, every value converted back and compared."""
    return to_arrow_column([_encode_key(k) for k in keys], "keys", decode=_decode_key, originals=keys)


@given(st.lists(_TUPLE_KEYS, min_size=1, max_size=6))
def test_tuple_key_columns_are_built_as_the_row_wise_conversion_builds_them(keys):
    """The field-by-field struct column equals the row-wise one, type and values, or fails with the
    same message."""
    try:
        expected, error = _row_wise_key_column(keys), None
    except StateSerializationError as exc:
        expected, error = None, str(exc)
    if error is not None:
        with pytest.raises(StateSerializationError) as info:
            _key_column(keys, "keys")
        assert str(info.value) == error
    else:
        actual = _key_column(keys, "keys")
        assert actual.type == expected.type
        assert actual.equals(expected)
