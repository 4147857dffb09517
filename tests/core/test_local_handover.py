"""Buffers handed over in one process (a Ray worker's in-process channel, the simulator's network):
the producer's records go over as its list, with no Arrow round trip, and arrive equal and in
order; Arrow is built only where something needs it, and then it is the same batch a hop between
processes carries — unaligned channel state persists the same bytes and restores the same records."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.core.task import Task
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CheckpointBarrier,
    CheckpointOptions,
    channel_state_batch,
    channel_state_item,
)
from state.serialization import buffers_from_bytes, buffers_to_bytes
from tests.core.test_task_direct import TO_APP, Ports, run
from vocabulary.handles import TaskId
from vocabulary.ports import ManualClock, ManualTimers

#: every record has the same fields, but for the last ones (a field missing, one more field)
ROWS = [{"i": i, "name": f"n{i}", "score": i / 2} for i in range(37)] + \
    [{"i": 37, "name": "short"}, {"i": 38, "name": "long", "score": 1.5, "extra": [1, 2]}]


def pipeline(rows: list[dict[str, Any]], *, unaligned: bool = False, fn: Any = None) -> tuple[Task, Task, Ports]:
    """Subtask 0 of the source and of "to-app" (`fn`, default an identity map) of source -> to-app
    -> sink, unchained, buffers of 8 records."""
    env = StreamEnvironment(parallelism=1, buffer_size=8)
    env.disable_chaining()
    env.enable_checkpointing(interval=1.0, unaligned=unaligned)
    env.from_collection(rows).map(fn or (lambda r: r), name=TO_APP).sink_to(CollectSink("out"))
    graph = env.get_job_graph("handover")
    clock = ManualClock()
    (source_vertex,) = graph.source_vertices
    source = Task(TaskId(source_vertex.name, 0), graph, source_vertex, clock=clock, timers=ManualTimers(clock),
                  ports=Ports(), committer=CollectCommitter())
    ports = Ports()
    to_app = Task(TaskId(TO_APP, 0), graph, graph.vertex(TO_APP), clock=clock, timers=ManualTimers(clock),
                  ports=ports, committer=CollectCommitter())
    return source, to_app, ports


def source_buffers(source: Task) -> list[Buffer]:
    """Every buffer the source sends, in order (credits handed back as they go)."""
    buffers: list[Buffer] = []
    while True:
        run(source)
        source.flush()
        drained = source.drain_sendable()
        for out_channel, payload in drained:
            if isinstance(payload, Buffer):
                buffers.append(payload)
                source.add_credit(out_channel)
        if not drained and not source.has_work():
            return buffers


def emitted(task: Task) -> list[dict[str, Any]]:
    task.flush()
    return [r for _, p in task.drain_sendable() if isinstance(p, Buffer) for r in p.to_records()]


def test_records_handed_over_in_one_process_arrive_equal_in_order_and_never_become_arrow() -> None:
    source, to_app, _ = pipeline(ROWS)
    buffers = source_buffers(source)
    # the last buffer's records do not share one set of fields: it is built as Arrow at once
    assert [b.has_batch for b in buffers] == [False] * 4 + [True], "the producer built Arrow batches"
    for buffer in buffers:
        to_app.push(BufferOrEvent(0, buffer))
        run(to_app)
    out = emitted(to_app)
    # the last buffer's records arrive as its batch gives them (None in a field a record lacks), as
    # over a hop between processes
    assert out == ROWS[:32] + [{**r, "extra": None} for r in ROWS[32:37]] + [
        {"i": 37, "name": "short", "score": None, "extra": None}, {"i": 38, "name": "long", "score": 1.5, "extra": [1, 2]}]
    assert [b.has_batch for b in buffers] == [False] * 4 + [True]
    # the very dicts the source emitted reached the (identity) map: no round trip through Arrow
    sent = [r for b in buffers[:4] for r in b.to_records()]
    assert all(a is b for a, b in zip(out[:32], sent, strict=True))


def test_a_buffer_of_records_carries_the_same_batch_and_records_over_a_hop_between_processes() -> None:
    source, _, _ = pipeline(ROWS)
    for buffer in source_buffers(source):
        hopped = pickle.loads(pickle.dumps(buffer))
        assert hopped.has_batch
        assert hopped.to_records() == buffer.to_records()
        assert hopped.num_records == buffer.num_records and hopped.size_bytes == buffer.size_bytes
        assert hopped.batch.equals(buffer.batch) and hopped.batch.schema.equals(buffer.batch.schema)


def test_in_flight_records_of_an_in_process_channel_persist_as_the_same_bytes_and_restore_the_same_records() -> None:
    """An unaligned barrier overtakes buffers handed over in-process and still queued in the gate:
    their channel state file is byte for byte the one of the same buffers after a hop between
    processes, and reads back as the same records."""
    source, to_app, ports = pipeline(ROWS, unaligned=True)
    buffers = source_buffers(source)
    for buffer in buffers:
        to_app.push(BufferOrEvent(0, buffer))
    to_app.push(BufferOrEvent(0, CheckpointBarrier(1, 0.0, CheckpointOptions(unaligned=True))))
    run(to_app)
    (snapshot,) = ports.snapshots
    in_flight = snapshot.input_channel_state[0]
    assert [b.num_records for b in in_flight] == [b.num_records for b in buffers]
    local = snapshot.to_files()["input_channels"]
    # the same source's buffers as a hop carries them: pickled as they leave the sender
    hopped = [pickle.loads(pickle.dumps(b)) for b in source_buffers(pipeline(ROWS)[0])]
    assert local == buffers_to_bytes({0: [channel_state_batch(b) for b in hopped]})
    restored = [channel_state_item(batch) for batch in buffers_from_bytes(local)[0]]
    assert [r for b in restored for r in b.to_records()] == \
        [r for b in hopped for r in b.to_records()] == emitted(to_app)


def test_a_buffer_of_records_builds_its_batch_once_and_only_when_asked() -> None:
    buffer = Buffer.from_records([{"a": 1}, {"a": 2}], checked=True, fields=("a",))
    assert not buffer.has_batch and len(buffer) == 2 and buffer.to_records() == [{"a": 1}, {"a": 2}]
    assert not buffer.has_batch
    assert buffer.size_bytes == buffer.batch.nbytes and buffer.batch is buffer.batch
    # records not vouched for as sharing one set of fields are built at once, as before a hop
    assert Buffer.from_records([{"a": 1}, {"a": 2}], checked=True).has_batch


def test_a_buffer_joining_emitted_lists_of_other_fields_gives_its_records_as_a_batch_would() -> None:
    """Each list has one set of fields; a buffer holding both is not uniform: its records come
    back with None in the fields they lack, as after a hop between processes."""
    source, _, _ = pipeline(ROWS)
    writer = source.writer
    writer.emit([{"a": 1}, {"a": 2}])
    writer.emit([{"a": 3}])
    writer.flush()
    writer.emit([{"a": 4}])
    writer.emit([{"b": "x"}])
    writer.flush()
    alike, mixed = [p for _, p in writer.drain_sendable()]
    assert alike.to_records() == [{"a": 1}, {"a": 2}, {"a": 3}] and not alike.has_batch
    assert mixed.has_batch
    assert mixed.to_records() == [{"a": 4, "b": None}, {"a": None, "b": "x"}] == \
        pickle.loads(pickle.dumps(mixed)).to_records()


def bump_in_place(record: dict[str, Any]) -> dict[str, Any]:
    record["i"] += 1000
    return record


def test_channel_state_holds_the_records_as_they_were_in_flight_though_a_function_then_changes_them() -> None:
    """The in-flight buffers an unaligned barrier overtook are processed after it by a function
    that changes each record's dict in place: the snapshot, written after that, persists the
    records as they were when they became channel state (else a restore would replay changed
    records through the function again)."""
    source, to_app, ports = pipeline(ROWS[:32], unaligned=True, fn=bump_in_place)
    for buffer in source_buffers(source):
        to_app.push(BufferOrEvent(0, buffer))
    to_app.push(BufferOrEvent(0, CheckpointBarrier(1, 0.0, CheckpointOptions(unaligned=True))))
    run(to_app)
    assert [r["i"] for r in emitted(to_app)] == [i + 1000 for i in range(32)]  # changed after the barrier
    (snapshot,) = ports.snapshots
    persisted = buffers_from_bytes(snapshot.to_files()["input_channels"])[0]
    assert [r["i"] for batch in persisted for r in batch.to_pylist()] == list(range(32))


def _hop(buffer: Buffer) -> Buffer:
    """`buffer` pickled as a Ray call pickles its arguments: protocol 5, large buffers out of band."""
    out_of_band: list[pickle.PickleBuffer] = []
    data = pickle.dumps(buffer, protocol=5, buffer_callback=out_of_band.append)
    return pickle.loads(data, buffers=out_of_band)


def test_a_hop_carries_a_buffer_as_one_arrow_ipc_stream() -> None:
    """Pickling walks a batch object by object (~260 µs for 140 NexMark events of 21 columns, with
    Ray's pickler); one Arrow IPC stream is written and read in one call each (~15 µs)."""
    buffer = Buffer.from_records(ROWS[:37], checked=True)
    rebuild, (stream,) = buffer.__reduce__()
    assert isinstance(stream, pa.Buffer)
    assert pa.ipc.open_stream(stream).read_all().to_batches() == [buffer.batch]
    assert rebuild(stream) == buffer


BATCHES = {
    "nested lists and structs": pa.RecordBatch.from_pylist(
        [{"tags": ["a", "b"], "point": {"x": 1.5, "y": None}}, {"tags": [], "point": None}]),
    "dictionary encoded": pa.RecordBatch.from_arrays([pa.array(["a", "b", "a"]).dictionary_encode()], names=["d"]),
    "no rows": pa.RecordBatch.from_pylist([], schema=pa.schema([("a", pa.int64()), ("s", pa.string())])),
    "a slice": pa.RecordBatch.from_pydict({"a": list(range(10)), "s": [str(i) for i in range(10)]}).slice(3, 4),
    "schema metadata": pa.RecordBatch.from_pydict({"a": [1]}).replace_schema_metadata({"origin": "test"}),
    "timestamps with a zone, nulls only, large strings": pa.RecordBatch.from_arrays(
        [pa.array([0, None], pa.timestamp("ms", tz="UTC")), pa.nulls(2), pa.array(["x", "y"], pa.large_string())],
        names=["t", "n", "l"]),
    # Arrow's own pickling of a batch without columns drops its rows (pyarrow 26: 3 -> 0)
    "no columns, three rows": pa.RecordBatch.from_pydict({"a": [1, 2, 3]}).select([]),
}


@pytest.mark.parametrize("name", BATCHES)
def test_a_hop_gives_back_the_batch_its_schema_rows_and_size(name: str) -> None:
    batch = BATCHES[name]
    hopped = _hop(Buffer.of(batch))
    assert hopped.num_records == batch.num_rows
    assert hopped.batch.equals(batch) and hopped.batch.schema.equals(batch.schema, check_metadata=True)
    assert hopped.size_bytes == Buffer.of(batch).size_bytes


def test_a_buffer_names_its_records_and_bytes_before_and_after_a_hop() -> None:
    buffer = Buffer.from_records([{"a": 1}, {"a": 2}], checked=True, fields=("a",))
    assert repr(buffer) == repr(_hop(buffer)) == f"Buffer(records=2, bytes={buffer.size_bytes})"
