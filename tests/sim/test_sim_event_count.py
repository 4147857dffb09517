"""The simulator's work grows with the job, not faster: a task woken by its timers while busy is
run once when it is free, however many timers woke it.

A rate-limited source that emits periodic watermarks is woken by a timer every watermark interval
(and a window operator by each window's timer); each wake while the task was busy used to leave
one more run event behind, chasing the task's busy time for the rest of the job, so a two-second
windowed job hit the simulator's 20,000,000-event cap.
"""

from __future__ import annotations

import pytest

from operators import CollectSink, GeneratorSource, TumblingEventTimeWindows, WatermarkStrategy
from runtime import StreamEnvironment

RATE = 50_000.0


def run(count: int, mode: str | None):
    env = StreamEnvironment(parallelism=2, buffer_size=256, credits=4, buffer_timeout=0.005)
    if mode is not None:
        env.enable_checkpointing(interval=0.1, mode=mode)
    env.set_auto_watermark_interval(0.01)
    # 50 records per millisecond of event time, 5 ms out of order
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(lambda r, previous: r["i"] // 50)
    source = GeneratorSource(count=count, rate=RATE, fn=lambda i: {"i": i, "key": i % 16}, splits=2)
    env.from_source(source).assign_timestamps_and_watermarks(strategy) \
        .key_by("key").window(TumblingEventTimeWindows.of(100)) \
        .reduce(lambda a, b: b if b["i"] > a["i"] else a, name="latest") \
        .sink_to(CollectSink("latest"))
    return env.execute("events", executor="sim", seed=1)


@pytest.mark.slow
def test_events_grow_linearly_with_the_records_of_a_rate_limited_windowed_job() -> None:
    for mode in (None, "aligned"):
        small, large = run(4_000, mode), run(12_000, mode)
        # every window fires once per key: nothing lost on the way
        assert len(large.output("latest")) == 16 * 3  # 240 ms of event time: three 100 ms windows
        per_record = [small.metrics.events / 4_000, large.metrics.events / 12_000]
        # a few events per record (buffers, watermarks, timers), the same for a longer job; a run
        # event left behind by each wake made it grow with the job's length (9 -> 24 per record)
        assert max(per_record) < 6, (mode, per_record)
        assert per_record[1] < 1.3 * per_record[0], (mode, per_record)
