"""File merging (Flink's FLIP-306): many small state pieces, few physical files.

Theory of operation
-------------------
Without merging, every piece of state a snapshot writes (a key group's base or delta, operator
state, channel state, the manifest) is a file of its own, and a distributed file system pays one
create/close RPC and one name-node entry per piece. `pack_segments` lays the pieces of one task's
snapshot end to end into physical files of at most `max_file_size` bytes (a piece larger than
that gets a file of its own) and records each piece as a *segment*: (file, offset, length,
checksum). The storage layer reads a segment back by its offset and length and verifies its own
checksum, so one corrupt segment does not condemn its neighbours.

Concurrency rule (seed §2.1): a physical file belongs to exactly one task and one checkpoint —
`physical_file_name` puts both in the name — so two concurrent checkpoints never write the same
file. Files are immutable once written; reuse of a file across successive checkpoints would need
an append the `BlobStore` does not offer, so each checkpoint starts new files.

Pure: builds bytes and checksums; the writer (`checkpoint.io.snapshot_writer`) does the I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MAX_FILE_SIZE = 64 << 20


@dataclass(frozen=True, slots=True)
class Segment:
    """Where one piece lives inside its physical file."""

    name: str
    offset: int
    length: int
    checksum: str


@dataclass(frozen=True)
class PhysicalFile:
    """One planned physical file: its name, bytes and the segments inside it."""

    name: str
    data: bytes
    segments: tuple[Segment, ...]


def checksum(data: bytes) -> str:
    """SHA-256 hex, the algorithm `checkpoint.storage.layout` verifies by default."""
    return hashlib.sha256(data).hexdigest()


def physical_file_name(task: str, checkpoint_id: int, index: int) -> str:
    """A name no other task or checkpoint uses (the concurrency rule)."""
    safe = task.replace("/", "_").replace(" ", "_")
    return f"{safe}/chk-{checkpoint_id}-{index}.merged"


def pack_segments(task: str, checkpoint_id: int, pieces: Sequence[tuple[str, bytes]],
                  max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> list[PhysicalFile]:
    """Lay `pieces` ((name, bytes), in order) into physical files of at most `max_file_size`.

    Raises:
        ValueError: `max_file_size` < 1, or two pieces share a name.
    """
    if not isinstance(max_file_size, int) or max_file_size < 1:
        raise ValueError(f"max_file_size must be an integer >= 1, got {max_file_size!r}")
    names = [name for name, _ in pieces]
    if len(set(names)) != len(names):
        raise ValueError(f"task {task} checkpoint {checkpoint_id}: duplicate segment names")
    files: list[PhysicalFile] = []
    chunks: list[bytes] = []
    segments: list[Segment] = []
    offset = 0

    def close() -> None:
        nonlocal chunks, segments, offset
        if chunks:
            files.append(PhysicalFile(physical_file_name(task, checkpoint_id, len(files)),
                                      b"".join(chunks), tuple(segments)))
        chunks, segments, offset = [], [], 0

    for name, data in pieces:
        if offset and offset + len(data) > max_file_size:
            close()
        segments.append(Segment(name, offset, len(data), checksum(data)))
        chunks.append(data)
        offset += len(data)
    close()
    return files
