"""Partitioners: which output channel of an edge each record goes to.

Theory of operation
-------------------
An edge of the job graph carries a `PartitionerSpec`: a small, picklable description (shipped to
Ray actors with the graph). Every sending task calls `spec.create(subtask)` once to get its own
`Partitioner` instance, because some partitioners keep per-sender state (round-robin position).

`Partitioner.partition(records, num_channels)` is on the per-buffer hot path: it splits one
batch of records into one list per downstream channel, keeping the input order within each
channel. `partition_columns(batch, num_channels)` does the same for an Arrow batch without
building dicts (vectorised: the key column is dictionary-encoded, each distinct key hashed once);
the channel of every record is the same either way. `num_channels` is the number of channels of this edge at the sender: 1 for a forward
edge, the downstream parallelism otherwise; channel `i` leads to downstream subtask `i`.

* `Forward`: everything to the single channel (same subtask index downstream).
* `Rebalance`: round-robin, continuing across batches; sender `s` starts at channel `s`, so
  parallel senders do not all hit channel 0 first. Deterministic.
* `KeyGroupHash`: key -> key group (`state.key_groups.key_group_for`, a stable hash) -> the
  subtask owning that key group (`subtask_for_key_group`). The keyed operator downstream computes
  the same key with the same selector, so its keyed state backend always owns the record's key.
* `Broadcast`: every record to every channel.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from operators.base import OperatorError, Record
from operators.columns import encode_keys, first_record_with_key
from state.key_groups import key_group_for, subtask_for_key_group

#: bound on each per-sender key -> channel cache of `KeyGroupHash` (cleared when full)
KEY_CACHE_MAX = 65536


class Partitioner(abc.ABC):
    """A per-sender partitioner instance."""

    @abc.abstractmethod
    def partition(self, records: list[Record], num_channels: int) -> list[list[Record]]:
        """Split `records` into `num_channels` lists (one per channel), order kept per channel."""

    def partition_columns(self, batch: pa.RecordBatch, num_channels: int) -> list[pa.RecordBatch] | list[list[Record]]:
        """`partition` for an Arrow batch: one batch (or record list) per channel. The default
        goes through dicts; partitioners override it with a vectorised split."""
        return self.partition(batch.to_pylist(), num_channels)


def _split(batch: pa.RecordBatch, channel_of_row: np.ndarray, num_channels: int) -> list[pa.RecordBatch]:
    """Rows of `batch` per channel (`channel_of_row[i]` is row i's), order kept."""
    if num_channels == 1:
        return [batch]
    order = np.argsort(channel_of_row, kind="stable")
    bounds = np.searchsorted(channel_of_row[order], np.arange(num_channels + 1))
    empty = batch.slice(0, 0)
    return [batch.take(pa.array(order[lo:hi])) if hi > lo else empty for lo, hi in zip(bounds[:-1], bounds[1:])]


class PartitionerSpec(abc.ABC):
    """The picklable description of how an edge partitions; creates per-sender instances."""

    #: short name used in graph descriptions ("forward", "rebalance", "hash", "broadcast")
    kind: str = "?"

    @abc.abstractmethod
    def create(self, subtask: int = 0) -> Partitioner:
        """A fresh partitioner for sending subtask `subtask`."""

    @property
    def is_forward(self) -> bool:
        """Forward edges connect subtask i to subtask i only (one channel)."""
        return False

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash(self.kind)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# ---------------------------------------------------------------------------------- forward


class _ForwardPartitioner(Partitioner):
    def partition(self, records: list[Record], num_channels: int) -> list[list[Record]]:
        if num_channels != 1:
            raise ValueError(f"a forward edge has exactly one channel per sender, got {num_channels}")
        return [records]

    def partition_columns(self, batch: pa.RecordBatch, num_channels: int) -> list[pa.RecordBatch]:
        return self.partition(batch, num_channels)  # type: ignore[arg-type,return-value]


class Forward(PartitionerSpec):
    """Subtask i sends to subtask i of the next operator (equal parallelism required)."""

    kind = "forward"

    def create(self, subtask: int = 0) -> Partitioner:
        return _ForwardPartitioner()

    @property
    def is_forward(self) -> bool:
        return True


# ---------------------------------------------------------------------------------- rebalance


class _RebalancePartitioner(Partitioner):
    __slots__ = ("_next",)

    def __init__(self, start: int) -> None:
        self._next = start

    def partition(self, records: list[Record], num_channels: int) -> list[list[Record]]:
        if num_channels < 1:
            raise ValueError(f"num_channels must be >= 1, got {num_channels}")
        first = self._next % num_channels
        self._next = (first + len(records)) % num_channels
        if num_channels == 1:
            return [records]
        # record j goes to channel (first + j) % n, so channel c takes every n-th from (c - first) % n
        return [records[(channel - first) % num_channels :: num_channels] for channel in range(num_channels)]

    def partition_columns(self, batch: pa.RecordBatch, num_channels: int) -> list[pa.RecordBatch]:
        if num_channels < 1:
            raise ValueError(f"num_channels must be >= 1, got {num_channels}")
        first = self._next % num_channels
        self._next = (first + batch.num_rows) % num_channels
        return _split(batch, (np.arange(batch.num_rows) + first) % num_channels, num_channels)


class Rebalance(PartitionerSpec):
    """Round-robin over all downstream subtasks, continuing across batches."""

    kind = "rebalance"

    def create(self, subtask: int = 0) -> Partitioner:
        return _RebalancePartitioner(subtask)


# ---------------------------------------------------------------------------------- key group hash


class _KeyGroupHashPartitioner(Partitioner):
    def __init__(self, spec: KeyGroupHash) -> None:
        self.selector = spec.key_selector
        self.column: str | None = getattr(spec.key_selector, "column", None)
        self.max_parallelism = spec.max_parallelism
        self.operator = spec.operator
        #: num_channels -> {key: channel}. Keys equal in Python share a key group
        #: (`state.key_groups` guarantees it for 1 == 1.0 == True), so dict equality is safe here.
        self._caches: dict[int, tuple[dict[Any, int], list[int]]] = {}

    def _cache(self, num_channels: int) -> tuple[dict[Any, int], list[int]]:
        if not 1 <= num_channels <= self.max_parallelism:
            raise ValueError(
                f"{self.operator}: {num_channels} channels, expected 1..max_parallelism={self.max_parallelism}"
            )
        table = [subtask_for_key_group(self.max_parallelism, num_channels, kg) for kg in range(self.max_parallelism)]
        entry = self._caches[num_channels] = ({}, table)
        return entry

    def _channel(self, key: Any, cache: dict[Any, int], table: list[int]) -> int:
        if len(cache) >= KEY_CACHE_MAX:
            cache.clear()
        channel = cache[key] = table[key_group_for(key, self.max_parallelism)]
        return channel

    def partition(self, records: list[Record], num_channels: int) -> list[list[Record]]:
        cache, table = self._caches.get(num_channels) or self._cache(num_channels)
        out: list[list[Record]] = [[] for _ in range(num_channels)]
        appends = [part.append for part in out]
        get, miss = cache.get, self._channel
        column, selector = self.column, self.selector
        record: Any = None
        try:
            if column is not None:
                for record in records:
                    key = record[column]
                    channel = get(key)
                    if channel is None:
                        channel = miss(key, cache, table)
                    appends[channel](record)
            else:
                for record in records:
                    key = selector(record)
                    channel = get(key)
                    if channel is None:
                        channel = miss(key, cache, table)
                    appends[channel](record)
        except Exception as exc:
            raise OperatorError(self.operator, record, self._describe(record, exc)) from exc
        return out

    def partition_columns(self, batch: pa.RecordBatch, num_channels: int) -> list[Any]:
        column = self.column
        if column is None or column not in batch.schema.names:
            # a key function needs records; a missing column gets the records path's error
            return self.partition(batch.to_pylist(), num_channels)
        cache, table = self._caches.get(num_channels) or self._cache(num_channels)
        encoded = encode_keys(batch.column(column))
        if encoded is None:
            return self.partition(batch.to_pylist(), num_channels)
        keys, indices = encoded
        channels = np.empty(len(keys), dtype=np.int64)
        get, miss = cache.get, self._channel
        key: Any = None
        try:
            for i, key in enumerate(keys):
                channel = get(key)
                channels[i] = miss(key, cache, table) if channel is None else channel
        except Exception as exc:
            record = first_record_with_key(batch, column, key)
            raise OperatorError(self.operator, record, self._describe(record, exc)) from exc
        return _split(batch, channels[indices], num_channels)

    def _describe(self, record: Any, exc: Exception) -> Exception:
        """The most telling error for a failed record: the selector's or the key hash's own
        message (a missing column, an unsupported key type) rather than a bare KeyError/TypeError."""
        try:
            key_group_for(self.selector(record), self.max_parallelism)
        except Exception as described:
            return described
        return exc


class KeyGroupHash(PartitionerSpec):
    """Hash partitioning by key group (Flink's `KeyGroupStreamPartitioner`).

    Args:
        key_selector: record -> key (a `ColumnKeySelector` for `key_by("col")` takes a fast path).
        max_parallelism: the number of key groups.
        operator: how errors name this edge, e.g. `"key_by('app') -> count"`.
    """

    kind = "hash"

    def __init__(self, key_selector: Callable[[Record], Any], max_parallelism: int, operator: str = "key_by") -> None:
        if max_parallelism < 1:
            raise ValueError(f"max_parallelism must be >= 1, got {max_parallelism}")
        self.key_selector = key_selector
        self.max_parallelism = max_parallelism
        self.operator = operator

    def create(self, subtask: int = 0) -> Partitioner:
        return _KeyGroupHashPartitioner(self)

    def __repr__(self) -> str:
        return f"KeyGroupHash({self.key_selector!r}, max_parallelism={self.max_parallelism})"


# ---------------------------------------------------------------------------------- broadcast


class _BroadcastPartitioner(Partitioner):
    def partition(self, records: list[Record], num_channels: int) -> list[list[Record]]:
        return [records] + [records[:] for _ in range(num_channels - 1)]

    def partition_columns(self, batch: pa.RecordBatch, num_channels: int) -> list[pa.RecordBatch]:
        return [batch] * num_channels  # batches are immutable: sharing is safe


class Broadcast(PartitionerSpec):
    """Every record to every downstream subtask."""

    kind = "broadcast"

    def create(self, subtask: int = 0) -> Partitioner:
        return _BroadcastPartitioner()
