"""Event time at the operator level: timers in a `KeyedProcessFunction`, side outputs, record
timestamps through the transformations, the timestamp/watermark operator — driven by hand with
watermarks and a fake processing-time service, as Flink's operator tests do."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from api_fakes import FakeTime, make_ctx

from operators import KeyedProcessFunction, OperatorError, OutputTag, TimeDomain
from operators.assign_timestamps import TimestampsAndWatermarksOperator
from operators.keyed import ColumnKeySelector, CountOperator, KeyedProcessOperator
from operators.side_outputs import SideOutputs
from operators.sinks import CollectSink
from operators.timestamps import TIMESTAMP_FIELD as TS
from operators.transforms import FilterOperator, FlatMapOperator, MapBatchesOperator, MapOperator
from operators.watermarks import WatermarkStrategy
from runtime.records.messages import Watermark, WatermarkStatus
from vocabulary.ports import ManualClock

ALERTS = OutputTag("alerts")


class Sessions(KeyedProcessFunction):
    """Registers an event-time timer 10 after each record, deletes it for v == 0; a processing-time
    timer for v == 9; emits on timers and sends big values to a side output."""

    def process_element(self, record, ctx):
        timers = ctx.timer_service()
        timers.register_event_time_timer(ctx.timestamp() + 10)
        if record["v"] == 0:
            timers.delete_event_time_timer(ctx.timestamp() + 10)
        if record["v"] == 9:
            timers.register_processing_time_timer(timers.current_processing_time() + 1)
        if record["v"] > 5:
            ctx.output(ALERTS, {"v": record["v"]})
        yield {"key": ctx.key, "seen": record["v"], "wm": timers.current_watermark()}

    def on_timer(self, timestamp, ctx):
        ctx.output(ALERTS, {"timer": timestamp})
        yield {"key": ctx.key, "timer": timestamp, "domain": ctx.time_domain().value, "ts": ctx.timestamp()}


def keyed(fn, side=frozenset({"alerts"})):
    clock = ManualClock(100.0)
    ctx = make_ctx(clock=clock)
    ctx.processing_time = FakeTime(clock)
    ctx.side_outputs = SideOutputs("op", side)
    op = KeyedProcessOperator(fn, ColumnKeySelector("k"), name="op")
    op.open(ctx)
    return op, ctx


def test_event_time_timers_fire_per_key_once_the_watermark_passes_them():
    op, ctx = keyed(Sessions())
    out = op.process_batch([{"k": "a", "v": 1, TS: 5}, {"k": "b", "v": 2, TS: 7}, {"k": "a", "v": 3, TS: 5}])
    assert [r[TS] for r in out] == [5, 7, 5] and all("wm" in r for r in out)
    assert op.process_watermark(Watermark(14)) == [Watermark(14)]  # nothing due yet
    fired, watermark = op.process_watermark(Watermark(17))
    assert watermark == Watermark(17)
    assert fired == [{"key": "a", "timer": 15, "domain": "event_time", "ts": 15, TS: 15},
                     {"key": "b", "timer": 17, "domain": "event_time", "ts": 17, TS: 17}]
    assert op.timer_service.current_watermark == 17 and len(op.timer_service.event) == 0
    assert ctx.side_outputs.take() == [("alerts", [{"timer": 15, TS: 15}, {"timer": 17, TS: 17}])]


def test_a_deleted_timer_never_fires():
    op, _ = keyed(Sessions())
    op.process_batch([{"k": "a", "v": 0, TS: 5}])
    assert op.process_watermark(Watermark(math.inf)) == [Watermark(math.inf)]


def test_processing_time_timers_fire_through_the_task_service_without_a_timestamp():
    op, ctx = keyed(Sessions())
    op.process_batch([{"k": "a", "v": 9, TS: 5}])
    assert [e[0] for e in ctx.processing_time.scheduled] == [101.0]
    [fired] = ctx.processing_time.fire(101.0)
    assert fired == [{"key": "a", "timer": 101.0, "domain": "processing_time", "ts": 101.0}]  # no TS: erased
    assert ctx.side_outputs.take() == [("alerts", [{"v": 9, TS: 5}, {"timer": 101.0}])]


def test_a_timer_registered_after_event_time_ended_fires_at_once():
    op, _ = keyed(Sessions())
    op.process_watermark(Watermark(math.inf))
    out = op.process_batch([{"k": "late", "v": 1, TS: 3}])
    assert [r.get("timer") for r in out] == [None, 13]


def test_side_outputs_only_of_the_last_operator_and_only_consumed_tags_leave():
    side = SideOutputs("last", frozenset({"alerts"}))
    side.emit("first", ALERTS, {"x": 1})
    side.emit("last", OutputTag("other"), {"x": 2})
    side.emit("last", ALERTS, {"x": 3})
    assert side.take() == [("alerts", [{"x": 3}])] and side.take() == []
    with pytest.raises(ValueError, match="non-empty string"):
        OutputTag("")


def test_bad_side_output_calls_and_failing_timers_name_the_operator():
    class Bad(KeyedProcessFunction):
        def process_element(self, record, ctx):
            ctx.output("alerts", record)

        def on_timer(self, timestamp, ctx):
            raise ValueError("boom")

    op, _ = keyed(Bad())
    with pytest.raises(OperatorError, match=r"'op' failed .*OutputTag"):
        op.process_batch([{"k": "a", TS: 1}])
    op.timer_service.backend.set_current_key("a")
    op.timer_service.register_event_time_timer(4)
    with pytest.raises(OperatorError, match=r"""'op' failed on record "<event_time timer 4 of key 'a'>".*boom"""):
        op.process_watermark(Watermark(5))
    with pytest.raises(TypeError, match="int or finite float"):
        op.timer_service.register_event_time_timer("soon")


def test_transformations_hide_the_timestamp_and_keep_it_on_their_output():
    seen = []
    records = [{"v": 1, TS: 10}, {"v": 2, TS: 20}]
    mapped = MapOperator(lambda r: seen.append(dict(r)) or {"w": r["v"]}).process_batch(records)
    assert seen == [{"v": 1}, {"v": 2}] and mapped == [{"w": 1, TS: 10}, {"w": 2, TS: 20}]
    assert FilterOperator(lambda r: TS not in r and r["v"] > 1).process_batch(records) == [records[1]]
    flat = FlatMapOperator(lambda r: [{"a": r["v"]}, {"b": r["v"]}]).process_batch(records[:1])
    assert flat == [{"a": 1, TS: 10}, {"b": 1, TS: 10}]
    batch = pa.RecordBatch.from_pylist(records)
    names = []
    same = MapBatchesOperator(lambda b: names.append(b.schema.names) or b.append_column("w", b.column("v"))) \
        .process_columns(batch)
    assert names == [["v"]] and same.column(TS).to_pylist() == [10, 20]
    fewer = MapBatchesOperator(lambda b: b.slice(0, 1)).process_columns(batch)
    assert TS not in fewer.schema.names  # another number of rows: no timestamps to follow
    counted = CountOperator(ColumnKeySelector("v"), "v")
    counted.open(make_ctx())
    assert counted.process_batch(records) == [{"v": 1, "count": 1, TS: 10}, {"v": 2, "count": 1, TS: 20}]
    assert counted.process_columns(batch).column(TS).to_pylist() == [10, 20]
    sink = CollectSink("out")
    sink.open(make_ctx())
    sink.process_batch(records)
    sink.process_columns(batch)
    assert sink._take_open() == [{"v": 1}, {"v": 2}, {"v": 1}, {"v": 2}]


def test_bounded_out_of_orderness_trails_by_the_bound_and_one_unit():
    from operators.watermarks import WatermarkOutput

    clock = ManualClock()
    generator = WatermarkStrategy.for_bounded_out_of_orderness(5).create_generator(clock)
    output = WatermarkOutput()
    generator.on_periodic_emit(output)
    assert output.watermark == -math.inf  # no record yet: no watermark
    for t in (10, 30, 20):
        generator.on_event(t, output)
    generator.on_periodic_emit(output)
    assert output.watermark == 24
    floats = WatermarkStrategy.for_monotonous_timestamps().create_generator(clock)
    floats.on_event(1.5, output)
    floats.on_periodic_emit(output)
    assert output.watermark == 24  # never backwards
    fresh = WatermarkOutput()
    floats.on_periodic_emit(fresh)
    assert fresh.watermark == math.nextafter(1.5, -math.inf)


def test_idleness_starts_at_the_first_quiet_check_and_ends_with_a_record():
    from operators.watermarks import WatermarkOutput

    clock = ManualClock()
    generator = WatermarkStrategy.for_monotonous_timestamps().with_idleness(1.0).create_generator(clock)
    output = WatermarkOutput()
    generator.on_event(5, output)
    for now in (0.0, 0.5, 1.0, 1.5):
        clock.set(now)
        generator.on_periodic_emit(output)
    assert output.idle is False  # quiet since the check at 0.5: not more than 1 s yet
    clock.set(1.6)
    generator.on_periodic_emit(output)
    assert output.idle is True
    generator.on_event(8, output)
    assert output.idle is False


@pytest.mark.parametrize(("assigner", "message"), [
    (lambda r, p: None, "returned NoneType None"),
    (lambda r, p: True, "returned bool True"),
    (lambda r, p: float("nan"), "returned float nan"),
    (None, "no timestamp assigner"),
])
def test_a_bad_timestamp_names_the_operator_and_the_record(assigner, message):
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    if assigner is not None:
        strategy = strategy.with_timestamp_assigner(assigner)
    with pytest.raises(OperatorError, match=rf"'stamp' failed on record \{{'t': 1\}}.*{message}"):
        strategy.assign([{"t": 1}], "stamp")


def test_assigners_see_the_previous_timestamp_and_columns_stay_vectorised():
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda r, previous: previous + r["d"])
    out, highest = strategy.assign([{"d": 1, TS: 10}, {"d": 5, TS: 10}], "op")
    assert out == [{"d": 1, TS: 11}, {"d": 5, TS: 15}] and highest == 15

    class Extract:
        def extract_timestamp(self, value, record_timestamp):
            return value["t"] * 2

    assert WatermarkStrategy.no_watermarks().with_timestamp_assigner(Extract()).assign([{"t": 4}], "op")[0] == \
        [{"t": 4, TS: 8}]
    batch = pa.RecordBatch.from_pydict({"t": [3, 9, 6]})
    stamped, highest = WatermarkStrategy.no_watermarks().with_timestamp_assigner("t").assign_batch(batch, "op")
    assert isinstance(stamped, pa.RecordBatch) and stamped.column(TS).to_pylist() == [3, 9, 6] and highest == 9
    with pytest.raises(ValueError, match="with_timestamp_assigner"):
        WatermarkStrategy.no_watermarks().with_timestamp_assigner(42)
    with pytest.raises(ValueError, match="bound must be"):
        WatermarkStrategy.for_bounded_out_of_orderness(-1)
    with pytest.raises(ValueError, match="timeout must be"):
        WatermarkStrategy.no_watermarks().with_idleness(0)


def test_the_timestamp_operator_emits_periodically_and_replaces_upstream_watermarks():
    clock = ManualClock()
    ctx = make_ctx(clock=clock, keyed=False)
    ctx.processing_time = FakeTime(clock)
    ctx.auto_watermark_interval = 0.2
    op = TimestampsAndWatermarksOperator(
        WatermarkStrategy.for_bounded_out_of_orderness(2).with_timestamp_assigner(lambda r, p: r["t"]).with_idleness(0.3))
    op.open(ctx)
    assert op.process_batch([{"t": 10}, {"t": 7}]) == [{"t": 10, TS: 10}, {"t": 7, TS: 7}]
    assert op.process_watermark(Watermark(50)) == [] and op.process_watermark_status(WatermarkStatus(True)) == []
    assert ctx.processing_time.fire(0.2) == [Watermark(7)]
    assert ctx.processing_time.fire(0.4) == []  # quiet since 0.4: not idle yet
    assert ctx.processing_time.fire(0.6) == []
    assert ctx.processing_time.fire(0.8) == [WatermarkStatus(True)]
    op.process_batch([{"t": 20}])
    assert ctx.processing_time.fire(1.0) == [WatermarkStatus(False), Watermark(17)]
    assert op.process_watermark(Watermark(math.inf)) == [Watermark(math.inf)]
    assert ctx.processing_time.fire(1.2) == [] and not ctx.processing_time.scheduled


def test_timer_state_exists_only_for_functions_with_timers():
    class Plain(KeyedProcessFunction):
        def process_element(self, record, ctx):
            yield record

    timers = {"_timer_state/event_user-timers", "_timer_state/processing_user-timers"}
    plain, ctx = keyed(Plain())
    plain.process_batch([{"k": "a", TS: 1}])
    plain.process_watermark(Watermark(5))
    assert not plain.needs_watermarks() and not timers & plain.declared_state().keyed
    assert not timers & set(ctx.keyed_backend.state_names)  # its snapshots hold no timer state
    timed, ctx = keyed(Sessions())
    assert timed.needs_watermarks() and timers <= timed.declared_state().keyed
    timed.process_batch([{"k": "a", "v": 1, TS: 1}])
    assert "_timer_state/event_user-timers" in ctx.keyed_backend.state_names
    assert TimeDomain.EVENT_TIME.value == "event_time"


def test_a_side_output_is_an_edge_of_its_own_and_never_chains():
    from operators import CollectSink
    from runtime import StreamEnvironment
    from runtime.core.graph import JobGraphError

    env = StreamEnvironment(parallelism=2)
    processed = env.from_collection([{"k": 1}], splits=2).key_by("k").process(Sessions(), name="sessions")
    processed.map(lambda r: r, name="main").sink_to(CollectSink("main"))
    processed.get_side_output(ALERTS).map(lambda r: r, name="alerts").sink_to(CollectSink("alerts"))
    graph = env.get_job_graph("side")
    edges = {(e.source, e.target): e for e in graph.edges}
    assert edges[("sessions", "main")].output_tag is None
    assert edges[("sessions", "alerts")].output_tag == "alerts"
    assert graph.vertex("sessions").operator_names == ["sessions"]  # the producer ends its chain
    assert graph.watermarks  # a function with on_timer needs them
    assert "side output 'alerts'" in graph.describe()
    with pytest.raises(JobGraphError, match="OutputTag"):
        processed.get_side_output("alerts")
    with pytest.raises(JobGraphError, match="call it on the stream an operator returned"):
        processed.rebalance().get_side_output(ALERTS)
    with pytest.raises(JobGraphError, match="WatermarkStrategy"):
        processed.assign_timestamps_and_watermarks("ts")
    with pytest.raises(JobGraphError, match="auto_watermark_interval"):
        env.set_auto_watermark_interval(0)
    plain = StreamEnvironment()
    plain.from_collection([{"k": 1}]).key_by("k").count().sink_to(CollectSink("c"))
    assert not plain.get_job_graph("plain").watermarks  # no event time: no watermark travels
