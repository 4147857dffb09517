"""`SourceReaders`: a source task's split readers, their offsets and their split watermarks.

A source task reads the splits assigned to it (`operators.sources.assign_splits`) one after the
other, each through its `SplitReader`, whose position is the split's checkpointed offset. With a
watermark strategy the task's `SourceWatermarks` (`runtime/core/source_watermarks.py`) stamps what
each split reads and learns when a split finished; a split's watermark is checkpointed beside
its offset (`offsets`) and restored with it (`restore`). Pure: time from the injected clock.
"""

from __future__ import annotations

from typing import Any

from operators.base import Clock
from operators.columns import Batch
from operators.sources import Source, assign_splits
from runtime.core.source_watermarks import SourceWatermarks
from runtime.records.messages import Watermark, WatermarkStatus

__all__ = ["SourceReaders"]


class SourceReaders:
    """The split readers of subtask `subtask` of `parallelism` reading `source`."""

    def __init__(self, source: Source, parallelism: int, subtask: int, clock: Clock) -> None:
        self.readers = [source.reader(split, clock) for split in assign_splits(source.splits(), parallelism, subtask)]
        self._index = 0
        #: the split watermarks (None: the source has no watermark strategy)
        self.watermarks: SourceWatermarks | None = None

    @property
    def split_ids(self) -> list[str]:
        return [reader.split.split_id for reader in self.readers]

    def restore(self, offsets: list[dict[str, Any]]) -> dict[str, Any]:
        """Seek every split to its checkpointed position; returns split id -> its checkpointed
        watermark (None: none)."""
        positions = {entry["split"]: entry["position"] for entry in offsets}
        for reader in self.readers:
            reader.seek(positions.get(reader.split.split_id, 0))
        while self._index < len(self.readers) and self.readers[self._index].finished():
            self._index += 1
        return {entry["split"]: entry.get("watermark") for entry in offsets}

    def watch(self, watermarks: SourceWatermarks | None) -> None:
        """Stamp and watermark what is read with `watermarks` (splits already read count as finished)."""
        self.watermarks = watermarks
        if watermarks is not None:
            for reader in self.readers:
                if reader.finished():
                    watermarks.split_finished(reader.split.split_id)

    def read(self, max_records: int) -> tuple[Batch, list[Watermark | WatermarkStatus], int] | None:
        """The next records (stamped), the watermark events to emit before them and how many were
        read; None when nothing is due now or every split was read (`exhausted`)."""
        while self._index < len(self.readers):
            reader = self.readers[self._index]
            data = reader.read(max_records)
            if data:
                read = len(data) if isinstance(data, list) else data.num_rows
                events: list[Watermark | WatermarkStatus] = []
                if self.watermarks is not None:
                    data, events = self.watermarks.on_read(reader.split.split_id, data)
                if reader.finished():
                    self._next()
                return data, events, read
            if not reader.finished():
                return None  # rate-limited: nothing due yet
            self._next()
        return None

    def _next(self) -> None:
        if self.watermarks is not None:
            self.watermarks.split_finished(self.readers[self._index].split.split_id)
        self._index += 1

    @property
    def reading(self) -> str | None:
        """The split being read now (None: all were read)."""
        return self.readers[self._index].split.split_id if self._index < len(self.readers) else None

    @property
    def exhausted(self) -> bool:
        return self._index >= len(self.readers)

    def lag(self) -> float | None:
        """How long overdue the next record of the split being read is (`SplitReader.lag`;
        None: read as fast as it can, or every split was read)."""
        if self._index < len(self.readers):
            return self.readers[self._index].lag()
        return None

    def next_ready_time(self) -> float | None:
        """For a rate-limited split with nothing due now: when to read again."""
        if self._index < len(self.readers):
            return self.readers[self._index].next_ready_time()
        return None

    def offsets(self) -> list[dict[str, Any]]:
        """Every split's offset (and watermark, with a strategy), for the source's operator state."""
        offsets: list[dict[str, Any]] = [{"split": r.split.split_id, "position": r.position} for r in self.readers]
        if self.watermarks is not None:
            watermarks = self.watermarks.snapshot()
            for entry in offsets:
                entry["watermark"] = watermarks[entry["split"]]
        return offsets
