"""Spillers: Arrow IPC round trips, in memory and in files."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from runtime.records.messages import Buffer
from runtime.records.spilling import FileSpiller, MemorySpiller, SpillError

from .helpers import labels, make_buffer


def mixed_buffers() -> list[Buffer]:
    with_metadata = pa.RecordBatch.from_pylist(
        [{"label": 3}], schema=pa.schema([("label", pa.int64())], metadata={b"k": b"v"})
    )
    return [
        make_buffer(1),
        make_buffer(2, rows=4),
        Buffer.of(with_metadata),
        Buffer.from_records([{"label": 4, "text": "x", "f": 1.5}]),
        Buffer.from_records([], schema=pa.schema([("label", pa.int64())])),
        make_buffer(5),
    ]


@pytest.fixture(params=["memory", "file"])
def spiller(request, tmp_path):
    return MemorySpiller() if request.param == "memory" else FileSpiller(tmp_path / "spills")


def test_round_trip_keeps_order_schemas_and_metadata(spiller) -> None:
    buffers = mixed_buffers()
    handle = spiller.spill(buffers)
    assert handle.num_buffers == 6 and handle.size_bytes == sum(b.size_bytes for b in buffers)
    assert [count for _, _, count in handle.segments] == [2, 1, 1, 1, 1]
    back = spiller.read(handle)
    assert back == buffers
    assert [b.batch.schema.metadata for b in back] == [b.batch.schema.metadata for b in buffers]
    assert back[2].batch.schema.metadata == {b"k": b"v"}
    assert spiller.read(handle) == buffers  # readable until discarded
    assert len(spiller) == 1


def test_spills_are_independent_and_discard_is_idempotent(spiller) -> None:
    first = spiller.spill([make_buffer(1)])
    second = spiller.spill([make_buffer(2), make_buffer(3)])
    spiller.discard(first)
    spiller.discard(first)
    assert labels(spiller.read(second)) == [2, 3]
    with pytest.raises(ValueError, match="unknown or was discarded"):
        spiller.read(first)
    assert len(spiller) == 1
    spiller.close()
    assert len(spiller) == 0


def test_empty_spill(spiller) -> None:
    handle = spiller.spill([])
    assert handle.segments == () and spiller.read(handle) == []


def test_file_spiller_writes_one_file_per_spill_and_removes_it(tmp_path) -> None:
    spiller = FileSpiller(tmp_path / "a" / "b")
    handles = [spiller.spill([make_buffer(i)]) for i in range(3)]
    files = sorted(os.listdir(tmp_path / "a" / "b"))
    assert len(files) == 3 and all(f.startswith("spill-") and f.endswith(".arrows") for f in files)
    spiller.discard(handles[1])
    assert len(os.listdir(tmp_path / "a" / "b")) == 2
    assert "FileSpiller(" in repr(spiller) and "spills=2" in repr(spiller)
    spiller.close()
    assert os.listdir(tmp_path / "a" / "b") == []


def test_file_spiller_names_the_file_it_cannot_read(tmp_path) -> None:
    spiller = FileSpiller(tmp_path)
    handle = spiller.spill([make_buffer(1)])
    (path,) = tmp_path.iterdir()
    path.write_bytes(b"garbage")
    with pytest.raises(SpillError, match=f"cannot read spill file '{path}'"):
        spiller.read(handle)


def test_file_spiller_names_the_directory_it_cannot_use(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SpillError, match="cannot create spill directory"):
        FileSpiller(blocker / "sub")
    spiller = FileSpiller(tmp_path / "gone")
    os.rmdir(tmp_path / "gone")
    with pytest.raises(SpillError, match="cannot write spill file in"):
        spiller.spill([make_buffer(1)])


def test_memory_spiller_repr_and_size() -> None:
    spiller = MemorySpiller()
    spiller.spill([make_buffer(1)])
    assert spiller.bytes_stored > 0 and "MemorySpiller(spills=1" in repr(spiller)
