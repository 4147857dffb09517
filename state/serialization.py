"""State to bytes and back, in Arrow IPC only (never pickle).

Blob layout
-----------
Every blob this module writes is a small container of Arrow IPC *streams* (different states have
different schemas, and one IPC stream carries one schema)::

    magic "BFST" | version u8 | blob kind u8 | reserved u16 | stream count u32 | crc32 u32
    | stream lengths u64 * count | streams...

The CRC covers everything after it, so truncation and bit flips surface as a clear
`StateFormatError` instead of an Arrow parse error (the storage layer checksums files too; this
catches a blob handed to the wrong decoder or cut short in memory). The kind byte stops keyed state
from being decoded as channel state.

Keyed state (kind 1): stream 0 is a header table `(state, kind)` whose schema metadata records the
operator, checkpoint id, max parallelism and key-group range; then one stream per state:

- value state: `(key_group int32, key, value)`
- list state:  `(key_group int32, key, value list<...>)`
- map state:   `(key_group int32, key, map_key, map_value)`, one row per map entry

Tuple keys (composite `key_by`) are stored as structs with fields `f0, f1, ...` and decoded back to
tuples (a state key is never a dict, so every struct in a key column was a tuple).

Operator state (kind 2): a header `(name)` then one single-column stream per name.
Channel state (kind 3): a header `(channel, stream, num_batches)` then one stream per run of
consecutive same-schema batches of one channel, so batch boundaries and order are kept exactly.

Lossless or loud: Arrow infers one type per column and sometimes converts silently (a `str` among
`bytes` becomes bytes, dicts with different keys are padded with nulls, timezones are dropped). So
unless the inferred type cannot convert anything (ints, bools, nulls, lists of those, and
top-level strings),
the column is read back and compared with the input; any difference is a
`StateSerializationError` naming the state and the value. Ints mixed with floats become floats
(equal in Python, and what Arrow's type unification means); tuples come back as lists.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from state.errors import StateFormatError, StateSerializationError
from state.key_groups import KeyGroupRange, canonical_key
from state.values import UnrepresentableValue, copy_value, describe_value, reject_sets, values_equal

_MAGIC = b"BFST"
_VERSION = 1
_HEADER = struct.Struct("<4sBBHII")


class BlobKind(enum.IntEnum):
    KEYED = 1
    OPERATOR = 2
    CHANNEL = 3


class StateKind(enum.Enum):
    """The kinds of keyed state (Flink's `ValueState`, `ListState`, `MapState`)."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"


@dataclass(frozen=True, slots=True)
class KeyedStateSnapshot:
    """An immutable copy of one keyed backend's state at a checkpoint.

    `groups[state][key_group][key]` is the value (value state), a tuple of elements (list state)
    or a dict (map state). Nothing here is mutated after creation, and the backend never mutates
    what it shares with a snapshot. `changed_key_groups` are the key groups written since the
    previous snapshot of the same backend (all of them after a restore), for incremental backends.
    """

    operator_name: str
    checkpoint_id: int
    max_parallelism: int
    key_group_range: KeyGroupRange
    kinds: Mapping[str, StateKind]
    groups: Mapping[str, Mapping[int, Mapping[Any, Any]]]
    changed_key_groups: frozenset[int] = field(default_factory=frozenset)

    def to_bytes(self) -> bytes:
        """Arrow IPC encoding; see the module header.

        Raises:
            StateSerializationError: a state's keys or values do not fit one Arrow column.
        """
        return keyed_snapshot_to_bytes(self)

    def entries(self, state_name: str) -> Iterator[tuple[int, Any, Any]]:
        """`(key_group, key, value)` of one state, by key group then insertion order."""
        groups = self.groups[state_name]
        for key_group in sorted(groups):
            for key, value in groups[key_group].items():
                yield key_group, key, value

    def to_dump(self) -> dict[str, dict[Any, Any]]:
        """Same shape as `KeyedStateBackend.dump()`: non-empty states, list values as lists."""
        out: dict[str, dict[Any, Any]] = {}
        for name, kind in self.kinds.items():
            flat = {key: _thaw(kind, value) for _, key, value in self.entries(name)}
            if flat:
                out[name] = flat
        return out

    @property
    def num_entries(self) -> int:
        return sum(len(g) for groups in self.groups.values() for g in groups.values())


def _thaw(kind: StateKind, value: Any) -> Any:
    if kind is StateKind.LIST:
        return [copy_value(v) for v in value]
    return copy_value(value) if kind is StateKind.VALUE else {k: copy_value(v) for k, v in value.items()}


# --------------------------------------------------------------------------- container


def _pack(kind: BlobKind, streams: Sequence[bytes]) -> bytes:
    lengths = struct.pack(f"<{len(streams)}Q", *(len(s) for s in streams))
    body = b"".join([lengths, *streams])
    return _HEADER.pack(_MAGIC, _VERSION, int(kind), 0, len(streams), zlib.crc32(body)) + body


def _unpack(blob: bytes, kind: BlobKind) -> list[bytes]:
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise StateFormatError(f"expected bytes for {kind.name.lower()} state, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < _HEADER.size or blob[:4] != _MAGIC:
        raise StateFormatError("not a barrierflow state blob (bad magic or too short)")
    _, version, found, _, count, crc = _HEADER.unpack_from(blob)
    if version != _VERSION:
        raise StateFormatError(f"unsupported state blob version {version} (this build reads {_VERSION})")
    if found != kind:
        name = BlobKind(found).name.lower() if found in BlobKind._value2member_map_ else str(found)
        raise StateFormatError(f"expected a {kind.name.lower()} state blob, found {name} state")
    body = memoryview(blob)[_HEADER.size:]
    if zlib.crc32(body) != crc:
        raise StateFormatError("state blob checksum mismatch: the data is corrupt or truncated")
    table_end = 8 * count
    if len(body) < table_end:
        raise StateFormatError("state blob truncated in its stream table")
    lengths = struct.unpack_from(f"<{count}Q", body)
    if table_end + sum(lengths) != len(body):
        raise StateFormatError("state blob stream lengths do not add up to its size")
    streams, offset = [], table_end
    for length in lengths:
        streams.append(bytes(body[offset:offset + length]))
        offset += length
    return streams


#: the IPC stream format (Arrow's default, given: by default every writer reads two environment
#: variables asking for legacy formats, a cost a checkpoint pays per state)
IPC_OPTIONS = pa.ipc.IpcWriteOptions()


def write_stream(table: pa.Table) -> bytes:
    """`table` as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _read_stream(data: bytes, what: str) -> pa.Table:
    try:
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise StateFormatError(f"cannot read {what}: {exc}") from None


def _read_batches(data: bytes, what: str) -> list[pa.RecordBatch]:
    try:
        return list(pa.ipc.open_stream(pa.py_buffer(data)))
    except (pa.ArrowException, OSError) as exc:
        raise StateFormatError(f"cannot read {what}: {exc}") from None


def _meta(schema: pa.Schema, key: str, what: str) -> str:
    meta = schema.metadata or {}
    raw = meta.get(key.encode())
    if raw is None:
        raise StateFormatError(f"{what}: missing schema metadata {key!r}")
    return raw.decode()


# --------------------------------------------------------------------------- columns


def _is_lossless(t: pa.DataType, nested: bool = False) -> bool:
    """Whether inferring this type can never have converted a Python value silently.

    A top-level `string` column means every value was a str (one `bytes` makes it binary), but
    inside lists Arrow follows the first element and decodes later bytes as UTF-8.
    """
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _is_lossless(t.value_type, nested=True)
    return (t == pa.int64() or t == pa.uint64() or t == pa.bool_() or t == pa.null()
            or (t == pa.string() and not nested))


def to_arrow_column(values: Sequence[Any], what: str, decode: Callable[[Any], Any] | None = None,
                    originals: Sequence[Any] | None = None) -> pa.Array:
    """Build one Arrow column from Python values, losslessly or not at all.

    Args:
        values: the column's values.
        what: names the column in errors (operator, state, column).
        decode: applied to `to_pylist()` items before comparing (tuple keys stored as structs).
        originals: what decoded items must equal (default: `values`).

    Raises:
        StateSerializationError: Arrow cannot unify the values, or the column would not read back
            equal to `values`.
    """
    try:
        array = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise StateSerializationError(
            f"{what}: values cannot share one Arrow column (mixed types?): {exc}") from None
    if not _is_lossless(array.type):
        try:
            back = array.to_pylist()
        except (pa.ArrowException, ValueError) as exc:  # e.g. bytes that were taken for UTF-8
            raise StateSerializationError(
                f"{what}: values do not survive Arrow conversion to {array.type} (mixed types?): "
                f"{exc}") from None
        if decode is not None:
            back = [decode(v) for v in back]
        for original, restored in zip(values if originals is None else originals, back):
            if not values_equal(original, restored):
                raise StateSerializationError(
                    f"{what}: value {describe_value(original)} does not survive Arrow conversion to "
                    f"{array.type} (it would read back as {describe_value(restored)}); keep one type "
                    "(and one set of dict keys) per state")
    return array


def _encode_key(key: Any) -> Any:
    if type(key) is tuple:
        return {f"f{i}": _encode_key(k) for i, k in enumerate(key)}
    return key


def _decode_key(key: Any) -> Any:
    if type(key) is dict:
        return tuple(_decode_key(k) for k in key.values())
    return key


def _key_column(keys: list[Any], what: str) -> pa.Array:
    if any(type(k) is tuple for k in keys):
        try:
            array = _struct_column(keys, what)
        except StateSerializationError:
            array = None  # the row-wise conversion below names the offending value
        if array is not None:
            return array
        return to_arrow_column([_encode_key(k) for k in keys], what, decode=_decode_key, originals=keys)
    return to_arrow_column(keys, what)


def _struct_column(keys: list[Any], what: str) -> pa.Array | None:
    """The struct column of `keys` when every key is a tuple of one width (window and timer keys),
    built field by field: each field's column is checked losslessly on its own (an int or str
    field needs no round trip), so the result equals the row-wise conversion of `_encode_key`'s
    dicts without converting every key back. None: keys of mixed shapes (the row-wise path)."""
    width = len(keys[0]) if keys and type(keys[0]) is tuple else 0
    if width == 0 or any(type(k) is not tuple or len(k) != width for k in keys):
        return None
    fields = []
    for i in range(width):
        column = [k[i] for k in keys]
        if any(type(v) is tuple for v in column):
            field = _struct_column(column, what)
            if field is None:
                return None
        else:
            field = to_arrow_column(column, what)
        fields.append(field)
    return pa.StructArray.from_arrays(fields, names=[f"f{i}" for i in range(width)])


def _column_keys(column: pa.ChunkedArray) -> list[Any]:
    """The keys of a key column, every NaN as the one NaN key (`state.key_groups.canonical_key`)."""
    keys = column.to_pylist()
    kind = column.type
    if pa.types.is_struct(kind):
        return [canonical_key(_decode_key(k)) for k in keys]
    if pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return keys  # no NaN in there
    return [canonical_key(k) for k in keys]


# --------------------------------------------------------------------------- keyed state

_FORMAT_KEYED = "barrierflow.keyed/1"


def _state_table(snapshot: KeyedStateSnapshot, name: str, kind: StateKind) -> pa.Table:
    where = f"operator {snapshot.operator_name!r}, state {name!r}"
    key_groups: list[int] = []
    keys: list[Any] = []
    values: list[Any] = []
    map_keys: list[Any] = []
    for key_group, key, value in snapshot.entries(name):
        if kind is StateKind.MAP:
            for map_key, map_value in value.items():
                key_groups.append(key_group)
                keys.append(key)
                map_keys.append(map_key)
                values.append(map_value)
        else:
            key_groups.append(key_group)
            keys.append(key)
            values.append(list(value) if kind is StateKind.LIST else value)
    columns = [pa.array(key_groups, pa.int32()), _key_column(keys, f"{where}: keys")]
    names = ["key_group", "key"]
    if kind is StateKind.MAP:
        columns += [_key_column(map_keys, f"{where}: map keys"),
                    to_arrow_column(values, f"{where}: map values")]
        names += ["map_key", "map_value"]
    else:
        columns.append(to_arrow_column(values, f"{where}: values"))
        names.append("value")
    metadata = {"barrierflow.state": name, "barrierflow.kind": kind.value,
                "barrierflow.operator": snapshot.operator_name}
    return pa.Table.from_arrays(columns, names=names, metadata=metadata)


def keyed_snapshot_to_bytes(snapshot: KeyedStateSnapshot) -> bytes:
    """Encode a keyed snapshot (see the module header). Same as `snapshot.to_bytes()`.

    Raises:
        StateSerializationError: a state's keys or values do not fit one Arrow column; names the
            operator and state.
    """
    names = list(snapshot.kinds)
    header = pa.Table.from_arrays(
        [pa.array(names, pa.string()), pa.array([snapshot.kinds[n].value for n in names], pa.string())],
        names=["state", "kind"],
        metadata={
            "barrierflow.format": _FORMAT_KEYED,
            "barrierflow.operator": snapshot.operator_name,
            "barrierflow.checkpoint_id": str(snapshot.checkpoint_id),
            "barrierflow.max_parallelism": str(snapshot.max_parallelism),
            "barrierflow.key_group_start": str(snapshot.key_group_range.start),
            "barrierflow.key_group_end": str(snapshot.key_group_range.end),
        },
    )
    streams = [write_stream(header)]
    streams += [write_stream(_state_table(snapshot, n, snapshot.kinds[n])) for n in names]
    return _pack(BlobKind.KEYED, streams)


@dataclass(frozen=True, slots=True)
class KeyedSnapshotHeader:
    """What a keyed snapshot blob says about itself, read without decoding any state."""

    operator_name: str
    checkpoint_id: int
    max_parallelism: int
    key_group_range: KeyGroupRange
    kinds: Mapping[str, StateKind]


def keyed_snapshot_header(blob: bytes) -> KeyedSnapshotHeader:
    """The header of what `KeyedStateSnapshot.to_bytes()` wrote: operator, state names and kinds.

    Raises:
        StateFormatError: not a keyed-state blob, or corrupt.
    """
    return _keyed_header(_unpack(blob, BlobKind.KEYED))


def _keyed_header(streams: list[bytes]) -> KeyedSnapshotHeader:
    if not streams:
        raise StateFormatError("keyed state blob has no header stream")
    header = _read_stream(streams[0], "keyed state header")
    what = "keyed state header"
    if _meta(header.schema, "barrierflow.format", what) != _FORMAT_KEYED:
        raise StateFormatError(f"{what}: unknown format {_meta(header.schema, 'barrierflow.format', what)!r}")
    try:
        operator = _meta(header.schema, "barrierflow.operator", what)
        checkpoint_id = int(_meta(header.schema, "barrierflow.checkpoint_id", what))
        max_parallelism = int(_meta(header.schema, "barrierflow.max_parallelism", what))
        key_group_range = KeyGroupRange(int(_meta(header.schema, "barrierflow.key_group_start", what)),
                                        int(_meta(header.schema, "barrierflow.key_group_end", what)))
        names = header.column("state").to_pylist()
        kinds = {n: StateKind(k) for n, k in zip(names, header.column("kind").to_pylist())}
    except (ValueError, KeyError, TypeError) as exc:
        raise StateFormatError(f"{what}: {exc}") from None
    if len(streams) != len(names) + 1 or len(kinds) != len(names):
        raise StateFormatError(f"keyed state of operator {operator!r}: {len(names)} states in the "
                               f"header but {len(streams) - 1} state streams")
    return KeyedSnapshotHeader(operator, checkpoint_id, max_parallelism, key_group_range, kinds)


def keyed_snapshot_from_bytes(blob: bytes) -> KeyedStateSnapshot:
    """Decode what `KeyedStateSnapshot.to_bytes()` wrote.

    Raises:
        StateFormatError: not a keyed-state blob, corrupt, or internally inconsistent.
    """
    streams = _unpack(blob, BlobKind.KEYED)
    header = _keyed_header(streams)
    operator, kinds, key_group_range = header.operator_name, header.kinds, header.key_group_range
    groups = {}
    for name, data in zip(kinds, streams[1:]):
        groups[name] = _decode_state(data, operator, name, kinds[name], key_group_range)
    return KeyedStateSnapshot(operator, header.checkpoint_id, header.max_parallelism, key_group_range, kinds,
                              groups, frozenset(kg for g in groups.values() for kg in g))


def _decode_state(data: bytes, operator: str, name: str, kind: StateKind,
                  key_group_range: KeyGroupRange) -> dict[int, dict[Any, Any]]:
    what = f"operator {operator!r}, state {name!r}"
    table = _read_stream(data, what)
    if _meta(table.schema, "barrierflow.state", what) != name or \
            _meta(table.schema, "barrierflow.kind", what) != kind.value:
        raise StateFormatError(f"{what}: stream does not match the header")
    try:
        key_groups = table.column("key_group").to_pylist()
        keys = _column_keys(table.column("key"))
        if kind is StateKind.MAP:
            map_keys = _column_keys(table.column("map_key"))
            values = table.column("map_value").to_pylist()
        else:
            values = table.column("value").to_pylist()
    except KeyError as exc:
        raise StateFormatError(f"{what}: missing column {exc}") from None
    groups: dict[int, dict[Any, Any]] = {}
    for i, (key_group, key) in enumerate(zip(key_groups, keys)):
        if key_group not in key_group_range:
            raise StateFormatError(f"{what}: key group {key_group} outside the snapshot's range "
                                   f"{key_group_range}")
        group = groups.setdefault(key_group, {})
        if kind is StateKind.VALUE:
            group[key] = values[i]
        elif kind is StateKind.LIST:
            group[key] = tuple(values[i] or ())
        else:
            group.setdefault(key, {})[map_keys[i]] = values[i]
    return groups


# --------------------------------------------------------------------------- operator state


def operator_state_to_bytes(state: Mapping[str, Sequence[Any]]) -> bytes:
    """Encode operator (non-keyed) state: named lists of Arrow-representable values.

    Raises:
        StateSerializationError: a name is not a str, or a list's values do not fit one Arrow column
            (names the state).
    """
    names = list(state)
    for name in names:
        if not isinstance(name, str):
            raise StateSerializationError(f"operator state names must be str, got {name!r}")
        if isinstance(state[name], str | bytes | Mapping) or not isinstance(state[name], Sequence):
            raise StateSerializationError(
                f"operator state {name!r} must be a list of values, got {describe_value(state[name])}")
    streams = [write_stream(pa.table({"name": pa.array(names, pa.string())}))]
    for name in names:
        for value in state[name]:
            try:
                reject_sets(value)
            except UnrepresentableValue as exc:
                raise StateSerializationError(f"operator state {name!r}: {exc.reason}") from None
        column = to_arrow_column(list(state[name]), f"operator state {name!r}")
        streams.append(write_stream(pa.Table.from_arrays([column], names=["value"],
                                                          metadata={"barrierflow.state": name})))
    return _pack(BlobKind.OPERATOR, streams)


def operator_state_from_bytes(blob: bytes) -> dict[str, list[Any]]:
    """Decode what `operator_state_to_bytes` wrote (tuples come back as lists).

    Raises:
        StateFormatError: not an operator-state blob, or corrupt.
    """
    streams = _unpack(blob, BlobKind.OPERATOR)
    if not streams:
        raise StateFormatError("operator state blob has no header stream")
    names = _read_stream(streams[0], "operator state header").column("name").to_pylist()
    if len(streams) != len(names) + 1:
        raise StateFormatError(f"operator state: {len(names)} names but {len(streams) - 1} streams")
    out: dict[str, list[Any]] = {}
    for name, data in zip(names, streams[1:]):
        table = _read_stream(data, f"operator state {name!r}")
        if _meta(table.schema, "barrierflow.state", f"operator state {name!r}") != name:
            raise StateFormatError(f"operator state {name!r}: stream does not match the header")
        out[name] = table.column("value").to_pylist()
    return out


# --------------------------------------------------------------------------- channel state


def buffers_to_bytes(buffers: Mapping[int, Sequence[pa.RecordBatch]]) -> bytes:
    """Encode channel state: per channel, its in-flight batches in order (schemas may differ).

    Raises:
        StateSerializationError: a channel is not an int or an item is not a `pa.RecordBatch`.
    """
    index_channel: list[int] = []
    index_stream: list[int] = []
    index_count: list[int] = []
    streams: list[bytes] = []
    for channel in sorted(buffers):
        if isinstance(channel, bool) or not isinstance(channel, int):
            raise StateSerializationError(f"channel state: channel ids must be ints, got {channel!r}")
        batches = list(buffers[channel])
        for batch in batches:
            if not isinstance(batch, pa.RecordBatch):
                raise StateSerializationError(
                    f"channel state: channel {channel} holds {describe_value(batch)}, not a RecordBatch")
        if not batches:
            index_channel.append(channel)
            index_stream.append(-1)
            index_count.append(0)
        start = 0
        while start < len(batches):
            stop = start + 1
            schema = batches[start].schema
            while stop < len(batches) and batches[stop].schema.equals(schema, check_metadata=True):
                stop += 1
            index_channel.append(channel)
            index_stream.append(len(streams) + 1)
            index_count.append(stop - start)
            streams.append(_batches_stream(batches[start:stop]))
            start = stop
    index = pa.table({"channel": pa.array(index_channel, pa.int32()),
                      "stream": pa.array(index_stream, pa.int32()),
                      "num_batches": pa.array(index_count, pa.int32())})
    return _pack(BlobKind.CHANNEL, [write_stream(index), *streams])


def _batches_stream(batches: Sequence[pa.RecordBatch]) -> bytes:
    # written batch by batch (not as a table) so batch boundaries, empty batches included, survive
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def buffers_from_bytes(blob: bytes) -> dict[int, list[pa.RecordBatch]]:
    """Decode what `buffers_to_bytes` wrote: channel -> batches, in channel order.

    Raises:
        StateFormatError: not a channel-state blob, or corrupt.
    """
    streams = _unpack(blob, BlobKind.CHANNEL)
    if not streams:
        raise StateFormatError("channel state blob has no index stream")
    index = _read_stream(streams[0], "channel state index")
    out: dict[int, list[pa.RecordBatch]] = {}
    for channel, stream, count in zip(index.column("channel").to_pylist(),
                                      index.column("stream").to_pylist(),
                                      index.column("num_batches").to_pylist()):
        batches = out.setdefault(channel, [])
        if stream < 0:
            continue
        if not 1 <= stream < len(streams):
            raise StateFormatError(f"channel state index points at missing stream {stream}")
        run = _read_batches(streams[stream], f"channel state of channel {channel}")
        if len(run) != count:
            raise StateFormatError(f"channel state of channel {channel}: expected {count} batches, "
                                   f"found {len(run)}")
        batches.extend(run)
    return out
