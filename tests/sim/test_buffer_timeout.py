"""The buffer timeout (Flink's): an output buffer leaves when full OR when its oldest record has
waited `buffer_timeout` — a record at a low rate never waits for a full buffer, per-record and
vectorised sources alike, and a backpressured channel keeps filling its buffer rather than
cutting small ones it could not send (issue 24)."""

from __future__ import annotations

import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.core.messages import Buffer
from runtime.core.record_writer import RecordWriter

BUFFER_TIMEOUT = 0.005


def _low_rate_job(job: str, *, records: int, rate: float) -> StreamEnvironment:
    # buffers of 10,000 records: at 200 rec/s a full buffer would take 50 s to fill
    env = StreamEnvironment(parallelism=2, buffer_size=10_000, credits=4, buffer_timeout=BUFFER_TIMEOUT)
    env.enable_checkpointing(interval=0.1)
    if job == "vectorised":
        import pyarrow as pa

        stream = env.generate(count=records, rate=rate, batch_fn=lambda idx: {"k": pa.array(idx % 5)})
        stream = stream.map_batches(lambda b: b.select(["k", "created_at"]), name="pick")
    else:
        stream = env.generate(count=records, rate=rate, fn=lambda i: {"k": i % 5})
        stream = stream.map(lambda r: {"k": r["k"], "created_at": r["created_at"]}, name="pick")
    stream.key_by("k").count(name="count").sink_to(CollectSink("out"))
    return env


@pytest.mark.parametrize("job", ["per-record", "vectorised"])
def test_a_low_rate_record_waits_at_most_the_buffer_timeout(job: str) -> None:
    records = 200
    result = _low_rate_job(job, records=records, rate=200.0).execute("low-rate", executor="sim", seed=7)
    assert len(result.output("out")) == records
    latencies = result.metrics
    assert len(latencies.latencies) == records
    # source -> count: at most one buffer timeout at the sender, plus network and step costs
    worst = latencies.latency_percentile(100)
    assert worst < BUFFER_TIMEOUT + 0.005, f"{job}: a record waited {worst * 1e3:.1f} ms, {result.replay}"


def _writer(buffer_size: int = 4, credits: int = 1) -> RecordWriter:
    env = StreamEnvironment(parallelism=1, buffer_size=buffer_size, credits=credits)
    env.from_collection([{"k": 1}]).key_by("k").count(name="count").sink_to(CollectSink("out"))
    graph = env.get_job_graph()
    source = graph.vertices[0]
    return RecordWriter(graph, source, 0, "records")


def _sent_sizes(writer: RecordWriter) -> list[int]:
    return [p.num_records for _, p in writer.drain_sendable() if isinstance(p, Buffer)]


def test_timed_flush_cuts_a_partial_buffer_when_a_credit_is_free() -> None:
    writer = _writer(buffer_size=4, credits=1)
    writer.emit([{"k": 1}])
    writer.flush_timed()
    assert _sent_sizes(writer) == [1]


def test_a_channel_without_credit_keeps_filling_its_buffer_until_the_next_credit() -> None:
    writer = _writer(buffer_size=4, credits=1)
    writer.emit([{"k": 1}])
    writer.flush_timed()
    assert _sent_sizes(writer) == [1]  # the only credit is used
    writer.emit([{"k": 2}])
    writer.flush_timed()  # no credit: the buffer is not cut into a small one that cannot leave
    writer.emit([{"k": 3}, {"k": 4}])
    assert not writer.channels[0].queue
    assert writer.pending_output()
    writer.add_credit(0)  # its timeout expired before: cut and sendable at once
    assert _sent_sizes(writer) == [3]
    assert not writer.pending_output()


def test_a_channel_without_credit_cuts_when_full_and_events_flush_everything() -> None:
    writer = _writer(buffer_size=2, credits=1)
    writer.emit([{"k": 0}, {"k": 0}])
    assert _sent_sizes(writer) == [2]  # the only credit is used
    writer.emit([{"k": 1}])
    writer.flush_timed()
    writer.emit([{"k": 2}, {"k": 3}])  # full: cut as always, the rest keeps filling
    assert [len(p) for p in writer.channels[0].queue] == [2]
    writer.end_of_partition()  # an event: whatever is buffered goes before it
    assert [type(p).__name__ for p in writer.channels[0].queue] == ["Buffer", "Buffer", "EndOfPartition"]
    assert not writer.pending_output()
