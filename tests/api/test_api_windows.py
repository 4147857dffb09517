"""Windows at the operator level, scripted as Flink's `WindowOperatorTest`: elements and
watermarks by hand, the output after each; assigners' arithmetic; triggers; merging sessions;
lateness and late data; window state through a snapshot and restore; the vectorised count/sum;
errors that name the call."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from api_fakes import FakeTime, make_ctx
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import (
    AggregateFunction,
    CollectSink,
    CountTrigger,
    EventTimeSessionWindows,
    GlobalWindows,
    OperatorError,
    OutputTag,
    ProcessWindowFunction,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from operators.keyed import ColumnKeySelector
from operators.side_outputs import SideOutputs
from operators.timestamps import TIMESTAMP_FIELD as TS
from operators.windows.operator import WindowOperator
from operators.windows.vectorised import WindowCountSumOperator
from runtime import StreamEnvironment
from runtime.core.graph import JobGraphError
from runtime.records.messages import Watermark
from state.key_groups import KeyGroupRange
from state.keyed import KeyedStateBackend
from state.serialization import keyed_snapshot_from_bytes, keyed_snapshot_to_bytes
from vocabulary.ports import ManualClock

LATE = OutputTag("late")


class Listed(ProcessWindowFunction):
    """Key, window and the values of the elements (or results) it got."""

    def process(self, key, context, elements):
        window = context.window()
        yield {"k": key, "start": window.start, "end": window.end, "vs": [e["v"] if isinstance(e, dict) else e
                                                                        for e in elements]}


class Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value["v"]

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


def window_op(assigner, kind="process", fn=None, window_function=None, trigger=None, lateness=0, late=None,
              clock=None):
    clock = clock or ManualClock(100.0)
    ctx = make_ctx(clock=clock)
    ctx.processing_time = FakeTime(clock)
    ctx.side_outputs = SideOutputs("w", frozenset({"late"}))
    op = WindowOperator(assigner, ColumnKeySelector("k"), kind, fn,
                        Listed() if window_function is None and kind == "process" else window_function,
                        trigger, lateness, late, name="w")
    op.open(ctx)
    return op, ctx


def rows(*pairs, key="a"):
    return [{"k": key, "v": v, TS: t} for v, t in pairs]


def fired(op, watermark):
    out = op.process_watermark(Watermark(watermark))
    assert out[-1] == Watermark(watermark)
    return [(r["k"], r["start"], r["end"], r["vs"], r[TS]) for batch in out[:-1] for r in batch]


def test_assigners_compute_flinks_windows():
    assert TumblingEventTimeWindows.of(10).assign_windows(17, None) == [TimeWindow(10, 20)]
    assert TumblingEventTimeWindows.of(10, 3).assign_windows(2, None) == [TimeWindow(-7, 3)]
    assert TumblingEventTimeWindows.of(10).assign_windows(-3, None) == [TimeWindow(-10, 0)]
    assert SlidingEventTimeWindows.of(10, 5).assign_windows(12, None) == [TimeWindow(10, 20), TimeWindow(5, 15)]
    assert SlidingEventTimeWindows.of(10, 3).assign_windows(9, None) == [
        TimeWindow(9, 19), TimeWindow(6, 16), TimeWindow(3, 13), TimeWindow(0, 10)]
    assert EventTimeSessionWindows.with_gap(5).assign_windows(7, None) == [TimeWindow(7, 12)]
    assert TumblingProcessingTimeWindows.of(2).assign_windows(None, lambda: 5.5) == [TimeWindow(4, 6)]
    assert TimeWindow(0, 10).max_timestamp() == 9


def test_tumbling_windows_fire_once_the_watermark_passes_their_end():
    op, _ = window_op(TumblingEventTimeWindows.of(10))
    assert op.process_batch(rows((1, 1), (2, 9), (3, 10), (4, 25))) == []
    assert fired(op, 8) == []
    assert fired(op, 9) == [("a", 0, 10, [1, 2], 9)]
    assert fired(op, 30) == [("a", 10, 20, [3], 19), ("a", 20, 30, [4], 29)]
    assert op._backend.dump() == {}  # every window cleaned up: no contents, no timers


def test_sliding_windows_hold_each_record_in_size_over_slide_windows():
    op, _ = window_op(SlidingEventTimeWindows.of(10, 5))
    op.process_batch(rows((1, 3), (2, 7)))
    assert fired(op, math.inf) == [("a", -5, 5, [1], 4), ("a", 0, 10, [1, 2], 9), ("a", 5, 15, [2], 14)]


def test_sessions_merge_and_the_merging_set_is_keyed_state():
    op, ctx = window_op(EventTimeSessionWindows.with_gap(3))
    op.process_batch(rows((1, 1), (2, 8), (3, 10)))
    assert dict(ctx.keyed_backend.entries("window-merging")) == {"a": {(1, 4): [1, 4], (8, 13): [8, 11]}}
    op.process_batch(rows((4, 4), (5, 6)))  # [4, 7) joins [1, 4); [6, 9) bridges it and [8, 13)
    [(key, state)] = ctx.keyed_backend.entries("window-merging")
    assert list(state) == [(1, 13)]
    assert fired(op, 11) == []
    [(key, start, end, values, timestamp)] = fired(op, 12)
    assert (key, start, end, sorted(values), timestamp) == ("a", 1, 13, [1, 2, 3, 4, 5], 12)
    assert ctx.keyed_backend.dump() == {}


def test_session_aggregates_merge_accumulators_not_elements():
    op, ctx = window_op(EventTimeSessionWindows.with_gap(3), "aggregate", Sum(), Listed())
    op.process_batch(rows((1, 1), (2, 3)) + rows((5, 1), key="b"))
    assert sorted(ctx.keyed_backend.entries("window-contents")) == [("a", {(1, 4): 3}), ("b", {(1, 4): 5})]
    assert sorted(fired(op, 10)) == [("a", 1, 6, [3], 5), ("b", 1, 4, [5], 3)]


def test_reduce_keeps_one_record_per_window():
    op, ctx = window_op(TumblingEventTimeWindows.of(10), "reduce", lambda a, b: {"k": a["k"], "v": a["v"] + b["v"]})
    op.process_batch(rows((1, 1), (2, 2), (3, 3)))
    assert ctx.keyed_backend.entries("window-contents") == [("a", {(0, 10): {"k": "a", "v": 6}})]
    [batch, _] = op.process_watermark(Watermark(9))
    assert batch == [{"k": "a", "v": 6, TS: 9}]


def test_late_records_go_to_the_side_output_and_lateness_fires_again():
    op, ctx = window_op(TumblingEventTimeWindows.of(10), lateness=5, late=LATE)
    op.process_batch(rows((1, 2)))
    assert fired(op, 9) == [("a", 0, 10, [1], 9)]
    assert op.process_batch(rows((2, 4))) == [{"k": "a", "start": 0, "end": 10, "vs": [1, 2], TS: 9}]
    assert fired(op, 14) == []  # the cleanup timer at 9 + 5
    assert op.process_batch(rows((3, 5))) == []  # too late for its window: to the side output
    assert ctx.side_outputs.take() == [("late", rows((3, 5)))]
    assert ctx.keyed_backend.dump() == {}


def test_late_records_without_a_tag_are_dropped_and_counted():
    op, _ = window_op(TumblingEventTimeWindows.of(10))
    fired(op, 20)
    assert op.process_batch(rows((1, 5))) == [] and op.num_late_records_dropped == 1


def test_count_trigger_fires_global_windows_every_n_records():
    op, ctx = window_op(GlobalWindows.create(), trigger=PurgingTrigger.of(CountTrigger.of(2)))
    out = op.process_batch(rows((1, 1), (2, 2), (3, 3)) + rows((9, 1), key="b") + rows((4, 4)))
    assert [(r["k"], r["vs"], r[TS]) for r in out] == [("a", [1, 2], None), ("a", [3, 4], None)]
    assert ctx.keyed_backend.entries("window-trigger/count") == [("b", {"global": 1})]


def test_processing_time_windows_fire_by_the_task_clock():
    clock = ManualClock(100.0)
    op, ctx = window_op(TumblingProcessingTimeWindows.of(2), clock=clock)
    op.process_batch([{"k": "a", "v": 1}])
    clock.set(101.5)
    op.process_batch([{"k": "a", "v": 2}])
    assert [e[0] for e in ctx.processing_time.scheduled] == [math.nextafter(102.0, 0)]  # the window's last instant
    [out] = ctx.processing_time.fire(102)
    assert [(r["start"], r["end"], r["vs"]) for r in out] == [(100, 102, [1, 2])]
    assert ctx.keyed_backend.dump() == {}
    op2, _ = window_op(SlidingProcessingTimeWindows.of(2, 1))
    assert not op2.needs_watermarks()


def test_a_processing_time_window_of_seconds_fires_at_its_end_once_not_a_second_early():
    clock = ManualClock(0.0)
    op, ctx = window_op(TumblingProcessingTimeWindows.of(0.5), clock=clock)  # the clock is in seconds
    assert ctx.processing_time.fire(0.1) == []
    op.process_batch([{"k": "a", "v": 1}])
    assert ctx.processing_time.fire(0.3) == []  # still inside [0, 0.5)
    op.process_batch([{"k": "a", "v": 2}])
    [out] = ctx.processing_time.fire(0.5)
    assert [(r["start"], r["end"], r["vs"]) for r in out] == [(0.0, 0.5, [1, 2])]  # one firing with both records
    sliding, ctx = window_op(SlidingProcessingTimeWindows.of(1.0, 0.5), clock=ManualClock(0.2))
    sliding.process_batch([{"k": "a", "v": 1}])
    assert ctx.processing_time.fire(0.4) == []
    assert [(r["start"], r["end"]) for batch in ctx.processing_time.fire(0.5) for r in batch] == [(-0.5, 0.5)]
    assert [(r["start"], r["end"]) for batch in ctx.processing_time.fire(1.0) for r in batch] == [(0.0, 1.0)]


def test_an_open_window_survives_a_snapshot_and_a_fired_one_stays_cleared():
    op, ctx = window_op(EventTimeSessionWindows.with_gap(3), "aggregate", Sum(), Listed(), lateness=2)
    op.process_batch(rows((1, 1), (2, 20)))
    fired(op, 5)
    assert fired(op, 6) == []  # [1, 4) fired at 3 and was cleaned up at 3 + 2
    blob = keyed_snapshot_to_bytes(ctx.keyed_backend.snapshot(1))
    restored = KeyedStateBackend.restore("vertex", KeyGroupRange.of(128), 128, [keyed_snapshot_from_bytes(blob)])
    again, ctx2 = window_op(EventTimeSessionWindows.with_gap(3), "aggregate", Sum(), Listed(), lateness=2)
    ctx2.keyed_backend = restored
    again.open(ctx2)
    assert dict(restored.entries("window-merging")) == {"a": {(20, 23): [20, 23]}}
    assert fired(again, math.inf) == [("a", 20, 23, [2], 22)]
    assert restored.dump() == {}


@pytest.mark.parametrize("lateness", [0, 7])
def test_vectorised_count_and_sum_leave_the_record_paths_state_and_output(lateness):
    """State (contents and timers: the trigger's and, with allowed lateness, the cleanup timer) and output."""
    batch = [{"k": f"k{i % 3}", "v": i, TS: i * 3} for i in range(40)]
    for field in (None, "v"):
        outs, states = [], []
        for columns in (False, True):
            ctx = make_ctx()
            op = WindowCountSumOperator(SlidingEventTimeWindows.of(20, 5), ColumnKeySelector("k"), "k", field,
                                        allowed_lateness=lateness)
            op.open(ctx)
            for part in (batch[:25], batch[25:]):
                out = op.process_columns(pa.RecordBatch.from_pylist(part)) if columns else op.process_batch(part)
                assert out == []
            states.append(ctx.keyed_backend.dump())
            outs.append(op.process_watermark(Watermark(math.inf))[0])
        assert states[0] == states[1]
        assert sorted(outs[0], key=repr) == sorted(outs[1], key=repr)  # equal-time windows: any key order
        value = field or "count"
        assert {"k": "k0", "window_start": 0, "window_end": 20, value: 3 if field is None else 0 + 3 + 6, TS: 19} \
            in outs[0]


def test_a_batch_with_a_late_row_takes_the_record_path():
    ctx = make_ctx()
    ctx.side_outputs = SideOutputs("w", frozenset({"late"}))
    op = WindowCountSumOperator(TumblingEventTimeWindows.of(10), ColumnKeySelector("k"), "k", None,
                                late_tag=LATE, name="w")
    op.open(ctx)
    op.process_watermark(Watermark(15))
    batch = pa.RecordBatch.from_pylist([{"k": "a", TS: 3}, {"k": "a", TS: 17}])
    assert op.process_columns(batch) == []
    assert ctx.side_outputs.take() == [("late", [{"k": "a", TS: 3}])]
    [[out], _] = op.process_watermark(Watermark(19))
    assert out == {"k": "a", "window_start": 10, "window_end": 20, "count": 1, TS: 19}


@pytest.mark.parametrize(("make", "message"), [
    (lambda: TumblingEventTimeWindows.of(0), "TumblingEventTimeWindows: size must be a positive"),
    (lambda: TumblingEventTimeWindows.of(10, 10), r"abs\(offset\) must be smaller than the size"),
    (lambda: SlidingEventTimeWindows.of(10, 0), "SlidingEventTimeWindows: slide must be a positive"),
    (lambda: SlidingEventTimeWindows.of(10, 20), r"slide \(20\) must not exceed size \(10\)"),
    (lambda: SlidingProcessingTimeWindows.of(10, 5, 7), r"abs\(offset\) must be smaller than the slide"),
    (lambda: EventTimeSessionWindows.with_gap(-1), "EventTimeSessionWindows: gap must be a positive"),
    (lambda: TumblingEventTimeWindows.of(math.inf), "size must be a positive finite number"),
    (lambda: CountTrigger.of(0), "CountTrigger: count must be an integer >= 1"),
])
def test_bad_assigner_and_trigger_parameters_name_the_class_and_parameter(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_window_calls_name_the_call():
    env = StreamEnvironment()
    keyed = env.from_collection([{"k": 1, "v": 1}]).key_by("k")
    with pytest.raises(JobGraphError, match="window: expected a WindowAssigner"):
        keyed.window(10)
    with pytest.raises(JobGraphError, match="not the class TumblingEventTimeWindows"):
        keyed.window(TumblingEventTimeWindows)
    windowed = keyed.window(EventTimeSessionWindows.with_gap(5))
    with pytest.raises(JobGraphError, match="allowed_lateness: expected a finite number >= 0"):
        windowed.allowed_lateness(-1)
    with pytest.raises(JobGraphError, match="side_output_late_data: expected an OutputTag"):
        windowed.side_output_late_data("late")

    class NoMerge(Sum):
        merge = AggregateFunction.merge

    with pytest.raises(JobGraphError, match="NoMerge must implement merge"):
        windowed.aggregate(NoMerge())
    with pytest.raises(JobGraphError, match="expected a ProcessWindowFunction"):
        windowed.process(lambda key, ctx, elements: [])
    with pytest.raises(JobGraphError, match="lateness applies to event time only"):
        keyed.window(TumblingProcessingTimeWindows.of(1)).allowed_lateness(5)


def test_a_record_without_a_timestamp_names_the_operator_and_the_fix():
    env = StreamEnvironment()
    env.from_collection([{"k": 1, "v": 1}]).key_by("k").window(TumblingEventTimeWindows.of(10)) \
        .reduce(lambda a, b: a, name="sums").sink_to(CollectSink("out"))
    with pytest.raises(Exception, match="operator 'sums'.*no event timestamp.*assign_timestamps_and_watermarks"):
        env.execute("no-ts", executor="sim")


def test_a_failing_window_function_names_the_operator_and_the_timer():
    class Boom(ProcessWindowFunction):
        def process(self, key, context, elements):
            raise ValueError("boom")

    op, _ = window_op(TumblingEventTimeWindows.of(10), window_function=Boom())
    op.process_batch(rows((1, 1)))
    with pytest.raises(OperatorError, match="operator 'w' failed on record .<event-time timer 9 of key 'a'>.*boom"):
        op.process_watermark(Watermark(9))


@settings(max_examples=150, deadline=None)
@given(times=st.lists(st.integers(0, 200), min_size=1, max_size=40), gap=st.integers(1, 30),
       watermarks=st.lists(st.integers(0, 250), max_size=5))
def test_sessions_match_a_reference_whatever_the_order_and_watermarks(times, gap, watermarks):
    """Each record is in exactly one fired session or late; each session spans its records with
    no gap wider than `gap` (a session fired before a record within its reach came stays fired,
    and the record starts another, as in Flink); without watermarks before the end, the sessions
    are those of a reference."""
    op, ctx = window_op(EventTimeSessionWindows.with_gap(gap), late=LATE)
    results: list = []
    steps = [("r", t, i) for i, t in enumerate(times)]
    for n, watermark in enumerate(sorted(watermarks)):  # watermarks at spread positions, rising
        steps.insert(min(len(steps), (n + 1) * len(steps) // (len(watermarks) + 1)), ("w", watermark, None))
    current = -math.inf
    for kind, value, index in steps:
        if kind == "w":
            current = max(current, value)
            results += [r for batch in op.process_watermark(Watermark(current))[:-1] for r in batch]
        else:
            results += op.process_batch([{"k": "a", "v": index, TS: value}])
    results += [r for batch in op.process_watermark(Watermark(math.inf))[:-1] for r in batch]
    late = [r["v"] for _, records in ctx.side_outputs.take() for r in records]
    fired = [v for r in results for v in r["vs"]]
    assert sorted(fired + late) == list(range(len(times)))  # every record once
    spans = []
    for r in results:
        member_times = sorted(times[i] for i in r["vs"])
        assert (r["start"], r["end"]) == (member_times[0], member_times[-1] + gap)
        assert all(b - a <= gap for a, b in zip(member_times, member_times[1:], strict=False))
        spans.append((r["start"], r["end"]))
    spans.sort()
    if not watermarks:
        expected, group = [], [sorted(times)[0]]
        for t in sorted(times)[1:]:
            if t <= group[-1] + gap:
                group.append(t)
            else:
                expected.append((group[0], group[-1] + gap))
                group = [t]
        expected.append((group[0], group[-1] + gap))
        assert spans == expected
    assert ctx.keyed_backend.dump() == {}
