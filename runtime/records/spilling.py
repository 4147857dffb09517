"""Spilling held buffers out of memory: the `Spiller` protocol, `MemorySpiller`, `FileSpiller`.

Theory of operation
-------------------
While a barrier aligner blocks a channel, the input gate holds what arrives on it. Past a memory
bound the gate hands runs of held buffers to a `Spiller` (Flink's `BufferSpiller`) and keeps only
the opaque handle; when the channel is released it reads the run back, in order, and discards it.

A spill is written as Arrow IPC streams, one stream per run of consecutive buffers that share a
schema (buffers of one channel may differ in schema), concatenated into one blob; the
`SpillHandle` records each stream's offset and length. `MemorySpiller` keeps the blob in memory
(serialised, so it no longer pins the original batches' Python objects); `FileSpiller` writes it
to one file per spill. This module is the only place the input gate's data touches a disk.

Not thread-safe: a spiller belongs to one gate.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from runtime.records.messages import Buffer

__all__ = ["FileSpiller", "MemorySpiller", "SpillError", "SpillHandle", "Spiller"]


class SpillError(OSError):
    """Spilled data could not be written or read back; names the file."""


@dataclass(frozen=True, slots=True)
class SpillHandle:
    """Where one spill lives: `key` within its spiller, and one (offset, length, count) per
    IPC stream (a run of same-schema buffers) inside the spilled blob."""

    key: int
    num_buffers: int
    size_bytes: int
    segments: tuple[tuple[int, int, int], ...]


class Spiller(Protocol):
    """Moves lists of buffers out of memory and back, preserving their order."""

    def spill(self, buffers: Sequence[Buffer]) -> SpillHandle:
        """Store `buffers`; return the handle that reads them back."""
        ...

    def read(self, handle: SpillHandle) -> list[Buffer]:
        """The buffers stored under `handle`, in order (the handle stays valid until discarded)."""
        ...

    def discard(self, handle: SpillHandle) -> None:
        """Free what `handle` holds; discarding twice is harmless."""
        ...


def _same_schema(a: pa.Schema, b: pa.Schema) -> bool:
    return a.equals(b, check_metadata=True)


def _schema_runs(buffers: Sequence[Buffer]) -> Iterator[list[pa.RecordBatch]]:
    run: list[pa.RecordBatch] = []
    for buffer in buffers:
        batch = buffer.batch
        if run and not _same_schema(run[0].schema, batch.schema):
            yield run
            run = []
        run.append(batch)
    if run:
        yield run


def _write_streams(sink: pa.NativeFile, buffers: Sequence[Buffer]) -> tuple[tuple[int, int, int], ...]:
    segments = []
    for run in _schema_runs(buffers):
        start = sink.tell()
        with pa.ipc.new_stream(sink, run[0].schema) as writer:
            for batch in run:
                writer.write_batch(batch)
        segments.append((start, sink.tell() - start, len(run)))
    return tuple(segments)


def _read_streams(blob: pa.Buffer, handle: SpillHandle) -> list[Buffer]:
    out: list[Buffer] = []
    for offset, length, count in handle.segments:
        batches = list(pa.ipc.open_stream(blob.slice(offset, length)))
        if len(batches) != count:
            raise SpillError(f"spill {handle.key}: expected {count} batches in a segment, read {len(batches)}")
        out.extend(Buffer.of(b) for b in batches)
    return out


class MemorySpiller:
    """Keeps spilled buffers as Arrow IPC bytes in memory (the default spiller)."""

    def __init__(self) -> None:
        self._blobs: dict[int, pa.Buffer] = {}
        self._keys = itertools.count()

    def spill(self, buffers: Sequence[Buffer]) -> SpillHandle:
        sink = pa.BufferOutputStream()
        segments = _write_streams(sink, buffers)
        key = next(self._keys)
        self._blobs[key] = sink.getvalue()
        return SpillHandle(key, len(buffers), sum(b.size_bytes for b in buffers), segments)

    def read(self, handle: SpillHandle) -> list[Buffer]:
        blob = self._blobs.get(handle.key)
        if blob is None:
            raise ValueError(f"MemorySpiller: spill {handle.key} is unknown or was discarded")
        return _read_streams(blob, handle)

    def discard(self, handle: SpillHandle) -> None:
        self._blobs.pop(handle.key, None)

    def close(self) -> None:
        self._blobs.clear()

    @property
    def bytes_stored(self) -> int:
        return sum(b.size for b in self._blobs.values())

    def __len__(self) -> int:
        """Number of live (not discarded) spills."""
        return len(self._blobs)

    def __repr__(self) -> str:
        return f"MemorySpiller(spills={len(self._blobs)}, bytes={self.bytes_stored})"


class FileSpiller:
    """Writes each spill to its own Arrow IPC file (`spill-*.arrows`) under `directory`.

    Args:
        directory: created if missing; several spillers may share it (file names are unique).

    Raises:
        SpillError: a spill file cannot be written or read; the message names the file.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise SpillError(f"FileSpiller: cannot create spill directory {self.directory!r}: {exc}") from exc
        self._paths: dict[int, str] = {}
        self._keys = itertools.count()

    def spill(self, buffers: Sequence[Buffer]) -> SpillHandle:
        try:
            fd, path = tempfile.mkstemp(prefix="spill-", suffix=".arrows", dir=self.directory)
            os.close(fd)
            with pa.OSFile(path, "wb") as sink:
                segments = _write_streams(sink, buffers)
        except (OSError, pa.ArrowException) as exc:
            raise SpillError(f"FileSpiller: cannot write spill file in {self.directory!r}: {exc}") from exc
        key = next(self._keys)
        self._paths[key] = path
        return SpillHandle(key, len(buffers), sum(b.size_bytes for b in buffers), segments)

    def read(self, handle: SpillHandle) -> list[Buffer]:
        path = self._paths.get(handle.key)
        if path is None:
            raise ValueError(f"FileSpiller: spill {handle.key} is unknown or was discarded")
        try:
            with pa.OSFile(path, "rb") as source:
                blob = source.read_buffer()
            return _read_streams(blob, handle)
        except (OSError, pa.ArrowException) as exc:
            raise SpillError(f"FileSpiller: cannot read spill file {path!r}: {exc}") from exc

    def discard(self, handle: SpillHandle) -> None:
        path = self._paths.pop(handle.key, None)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    def close(self) -> None:
        for key in sorted(self._paths):
            self.discard(SpillHandle(key, 0, 0, ()))

    def __len__(self) -> int:
        """Number of live (not discarded) spill files."""
        return len(self._paths)

    def __repr__(self) -> str:
        return f"FileSpiller({self.directory!r}, spills={len(self._paths)})"
