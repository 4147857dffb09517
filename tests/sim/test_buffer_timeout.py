"""The buffer timeout (Flink's): an output buffer leaves when full OR when its oldest record has
waited `buffer_timeout` — a record at a low rate never waits for a full buffer, per-record and
vectorised sources alike."""

from __future__ import annotations

import pytest

from operators import CollectSink
from runtime import StreamEnvironment

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
