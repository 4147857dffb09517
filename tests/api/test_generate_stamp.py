"""`env.generate(..., stamp=...)`: a record's creation time is when it was read or when it was due."""

from __future__ import annotations

import pytest

from operators.sources import GeneratorSource
from runtime.core.graph import JobGraphError
from vocabulary.ports import ManualClock


@pytest.mark.parametrize("vectorised", [False, True])
def test_due_stamps_are_the_schedule_and_read_stamps_the_clock(vectorised: bool) -> None:
    import pyarrow as pa

    batch_fn = (lambda idx: pa.RecordBatch.from_pydict({"i": idx})) if vectorised else None
    stamps = {}
    for stamp in ("read", "due"):
        source = GeneratorSource(count=10, rate=100.0, splits=1, batch_fn=batch_fn, stamp=stamp)
        clock = ManualClock(0.0)
        reader = source.reader(source.splits()[0], clock)
        clock.advance(0.05)  # the task was busy: 6 records are due, the first since t=0
        first = reader.read(100)
        clock.advance(0.02)
        second = reader.read(100)
        rows = [r for part in (first, second)
                for r in (part.to_pylist() if isinstance(part, pa.RecordBatch) else part)]
        assert [r["i"] for r in rows] == list(range(8))
        stamps[stamp] = [r["created_at"] for r in rows]
    assert stamps["read"] == pytest.approx([0.05] * 6 + [0.07] * 2)
    assert stamps["due"] == pytest.approx([k / 100.0 for k in range(8)])


def test_due_stamps_continue_from_a_restored_position() -> None:
    source = GeneratorSource(count=10, rate=100.0, splits=1, stamp="due")
    clock = ManualClock(5.0)
    reader = source.reader(source.splits()[0], clock)
    reader.seek(4)  # restored: record 4 is due now, the pace continues from here
    clock.advance(0.015)
    assert [r["created_at"] for r in reader.read(100)] == pytest.approx([5.0, 5.01])


def test_bad_stamp_is_an_error_naming_it() -> None:
    from runtime import StreamEnvironment

    with pytest.raises(JobGraphError, match="stamp must be 'read' or 'due', got 'sent'"):
        StreamEnvironment().generate(count=3, rate=10.0, stamp="sent")
    with pytest.raises(JobGraphError, match="stamp='due' needs a rate"):
        StreamEnvironment().generate(count=3, stamp="due")
