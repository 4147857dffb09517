"""A watermark never goes backwards on an output channel, restored channel state included: after a
restore the task's valve and timestamp assigners start again from -inf behind the watermarks its
output channel state holds (swarm seed 1726 sent 262143 after a restored 393215)."""

from __future__ import annotations

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.core.record_writer import RecordWriter
from runtime.records.messages import Buffer, Watermark, WatermarkStatus


def writer() -> RecordWriter:
    env = StreamEnvironment(parallelism=2)
    env.disable_chaining()
    env.from_collection([{"i": 1}]).map(lambda r: r, name="relay").rebalance().sink_to(CollectSink("out"))
    graph = env.get_job_graph("job")
    return RecordWriter(graph, graph.vertex("relay"), 0, "relay")


def test_a_watermark_at_or_below_the_restored_one_is_not_sent_on_that_channel() -> None:
    out = writer()
    restored = [Buffer.from_records([{"i": 7}]), Watermark(393215.0)]
    out.channels[0].restore(restored)
    out.emit_event(Watermark(262143.0))  # the restarted valve's first watermark: lower
    out.emit_event(Watermark(393215.0))  # equal: nothing new
    out.emit_event(WatermarkStatus(idle=True))  # statuses always pass
    out.emit_event(Watermark(500000.0))
    assert list(out.channels[0].queue) == [*restored, WatermarkStatus(idle=True), Watermark(500000.0)]
    # a channel without restored state sends every watermark that moves forward
    assert list(out.channels[1].queue) == [Watermark(262143.0), Watermark(393215.0), WatermarkStatus(idle=True),
                                           Watermark(500000.0)]
