"""Two-input operators: the interval join operator driven by hand (Flink's `IntervalJoinOperatorTest`
style: elements and watermarks in, joined pairs and buffer state out), connected streams on the
simulator (co-map, co-flat-map, co-process, keyed co-process on already keyed streams), the job
graph's input indexes, and the errors naming the operator or option."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from api_fakes import make_ctx

from operators import (
    CoFlatMapFunction,
    CollectSink,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    OperatorError,
    OutputTag,
    ProcessJoinFunction,
    WatermarkStrategy,
)
from operators.interval_join import LEFT_BUFFER, RIGHT_BUFFER, IntervalJoinOperator
from operators.keyed import ColumnKeySelector
from operators.side_outputs import SideOutputs
from operators.timestamps import TIMESTAMP_FIELD
from runtime import JobFailedError, JobGraphError, StreamEnvironment
from runtime.records.messages import Watermark

KEY = ColumnKeySelector("k")
LATE = OutputTag("late")


class Ids(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        assert ctx.timestamp() == max(ctx.left_timestamp(), ctx.right_timestamp())
        yield {"l": left["id"], "r": right["id"]}


def join_op(lower: float, upper: float, **options) -> IntervalJoinOperator:
    op = IntervalJoinOperator(Ids(), KEY, KEY, lower, upper, name="join", **options)
    ctx = make_ctx()
    ctx.side_outputs = SideOutputs("join", frozenset({LATE.name}))
    op.open(ctx)
    return op


def rec(i: str, t: float, k: str = "a") -> dict:
    return {"k": k, "id": i, TIMESTAMP_FIELD: t}


def pairs(out: list[dict]) -> list[tuple[str, str, float]]:
    return [(r["l"], r["r"], r[TIMESTAMP_FIELD]) for r in out]


def buffered(op: IntervalJoinOperator, name: str, key: str = "a") -> list[float]:
    op._backend.set_current_key(key)
    return sorted(op._backend.map_state(name).keys())


def test_a_left_record_joins_the_right_records_within_the_bounds_inclusive():
    op = join_op(-2, 3)
    rights = [rec(f"r{t}", t) for t in (7, 8, 12, 13, 14)] + [rec("other-key", 10, k="b")]
    assert op.process_batch2(rights) == []
    assert pairs(op.process_batch1([rec("l", 10)])) == [("l", "r8", 10), ("l", "r12", 12), ("l", "r13", 13)]


def test_exclusive_bounds_leave_out_the_pairs_on_the_bounds():
    op = join_op(-2, 3, lower_exclusive=True, upper_exclusive=True)
    op.process_batch1([rec("l", 10)])
    out = op.process_batch2([rec(f"r{t}", t) for t in (7, 8, 9, 12, 13, 14)])
    assert pairs(out) == [("l", "r9", 10), ("l", "r12", 12)]  # the pair is emitted by the later record


def test_cleanup_timers_empty_the_buffers_once_no_partner_can_arrive():
    op = join_op(-2, 3)
    op.process_batch1([rec("l", 10)])  # partners up to 13
    op.process_batch2([rec("r", 8)])  # partners from left 8 - 3 = 5 up to 8 + 2 = 10
    op.process_watermark(Watermark(9))
    assert buffered(op, LEFT_BUFFER) == [10] and buffered(op, RIGHT_BUFFER) == [8]
    op.process_watermark(Watermark(10))
    assert buffered(op, RIGHT_BUFFER) == [] and buffered(op, LEFT_BUFFER) == [10]
    assert pairs(op.process_batch2([rec("r13", 13)])) == [("l", "r13", 13)]  # not late, its partner still there
    op.process_watermark(Watermark(13))
    assert buffered(op, LEFT_BUFFER) == []
    assert op.process_batch1([rec("late", 12)]) == []


def test_a_negative_upper_bound_cleans_up_at_the_record_time():
    op = join_op(-5, -1)
    op.process_batch1([rec("l", 10)])
    op.process_watermark(Watermark(10))
    assert buffered(op, LEFT_BUFFER) == []


def test_late_records_go_to_the_side_output_asked_for():
    op = join_op(0, 5, left_late=LATE)
    op.process_watermark(Watermark(20))
    assert op.process_batch1([rec("late", 19)]) == [] and op.process_batch2([rec("late-right", 3)]) == []
    (side,) = op.ctx.side_outputs.take()
    assert side == ("late", [rec("late", 19)])  # the right one is dropped: no tag for it
    assert buffered(op, LEFT_BUFFER) == [] and buffered(op, RIGHT_BUFFER) == []


def test_a_record_without_timestamp_is_an_error_naming_the_operator_and_record():
    op = join_op(0, 5)
    with pytest.raises(OperatorError, match=r"operator 'join' failed on record \{'k': 'a', 'id': 1\}.*timestamps"):
        op.process_batch1([{"k": "a", "id": 1}])


@pytest.mark.parametrize(("lower", "upper", "message"), [
    (5, 1, r"interval_join.between\(5, 1\): the lower bound exceeds the upper bound"),
    (math.nan, 1, "the lower bound must be a finite number"),
    (0, "10", "the upper bound must be a finite number, got str '10'"),
    (0, True, "the upper bound must be a finite number, got bool"),
])
def test_bad_bounds_are_rejected_naming_the_option(lower, upper, message):
    env = StreamEnvironment()
    a, b = env.from_collection([{"k": 1}]), env.from_collection([{"k": 1}])
    with pytest.raises(JobGraphError, match=message):
        a.key_by("k").interval_join(b.key_by("k")).between(lower, upper)


class Both(KeyedCoProcessFunction):
    def process_element1(self, record, ctx):
        yield record

    def process_element2(self, record, ctx):
        yield record


class OnlyFirst(KeyedCoProcessFunction):
    def process_element1(self, record, ctx):
        yield record


class TimerWithoutKey(CoProcessFunction):
    def process_element1(self, record, ctx):
        ctx.timer_service().register_event_time_timer(1)
        return ()

    def process_element2(self, record, ctx):
        return ()


def test_a_non_keyed_co_process_has_no_timers():
    env = StreamEnvironment()
    env.from_collection([{"k": 1}]).connect(env.from_collection([{"k": 2}])) \
        .process(TimerWithoutKey(), name="plain").sink_to(CollectSink("out"))
    with pytest.raises(JobFailedError, match="operator 'plain'.*timers need keyed inputs"):
        env.execute("timers", executor="sim", seed=1)


def test_api_errors_name_the_operator_and_option():
    env = StreamEnvironment()
    a, b = env.from_collection([{"k": 1}]), env.from_collection([{"k": 1}])
    with pytest.raises(JobGraphError, match=r"key_by\(key1, key2\): give a key for each input"):
        a.connect(b).key_by("k")
    with pytest.raises(JobGraphError, match=r"key_by\('x'\): unknown column 'x'"):
        a.connect(b).key_by("k", "x")
    with pytest.raises(JobGraphError, match="KeyedCoProcessFunction needs keyed inputs"):
        a.connect(b).process(Both())
    with pytest.raises(JobGraphError, match=r"pass an instance, Both\(\), not the class"):
        a.connect(b).key_by("k", "k").process(Both)
    with pytest.raises(JobGraphError, match="'co': OnlyFirst does not implement process_element2"):
        a.connect(b).key_by("k", "k").process(OnlyFirst(), name="co")
    with pytest.raises(JobGraphError, match="expected a CoProcessFunction instance, got function"):
        a.connect(b).process(lambda r, ctx: [r])
    with pytest.raises(JobGraphError, match="connect.*map: expected a CoMapFunction instance"):
        a.connect(b).map(lambda r: r)
    with pytest.raises(JobGraphError, match="connect: streams belong to different StreamEnvironments"):
        a.connect(StreamEnvironment().from_collection([{"k": 1}]))
    with pytest.raises(JobGraphError, match=r"interval_join: expected a KeyedStream \(stream.key_by\(key\)\)"):
        a.key_by("k").interval_join(b)
    with pytest.raises(JobGraphError, match="expected a ProcessJoinFunction instance"):
        a.key_by("k").interval_join(b.key_by("k")).between(0, 1).process(Both())
    with pytest.raises(JobGraphError, match="side_output_left_late_data: expected an OutputTag"):
        a.key_by("k").interval_join(b.key_by("k")).between(0, 1).side_output_left_late_data("late")


def test_the_graph_gives_each_input_of_a_two_input_operator_its_index():
    env = StreamEnvironment(parallelism=2)
    a, b = env.from_collection([{"k": 1}], name="a"), env.from_collection([{"k": 1}], name="b")
    a.connect(b).key_by("k", "k").process(Both(), name="co").sink_to(CollectSink("out"))
    a.union(b).map(lambda r: r, name="m").sink_to(CollectSink("union"))
    graph = env.get_job_graph("g")
    assert {(e.source, e.input_index) for e in graph.inputs_of("co")} == {("Source: a", 0), ("Source: b", 1)}
    assert graph.channel_inputs("co", 0) == [0, 0, 1, 1]
    assert {e.input_index for e in graph.inputs_of("union")} == {0}  # a union is one input


class Tag(CoMapFunction):
    def map1(self, record):
        return {"from": "a", "v": record["v"]}

    def map2(self, record):
        return {"from": "b", "v": record["v"]}


class Twice(CoFlatMapFunction):
    def flat_map1(self, record):
        return [record, record]

    def flat_map2(self, record):
        yield {"v": -record["v"]}


class Watermarked(CoProcessFunction):
    def process_element1(self, record, ctx):
        yield {"v": record["v"], "t": ctx.timestamp()}

    def process_element2(self, record, ctx):
        yield {"v": record["v"], "t": ctx.timestamp(), "watermark_known": ctx.current_watermark() <= ctx.timestamp()}


def test_co_map_co_flat_map_and_co_process_on_the_simulator():
    env = StreamEnvironment(parallelism=2, buffer_size=4)
    env.enable_checkpointing(interval=0.002)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, previous: r["v"])
    a = env.from_collection([{"v": i} for i in range(50)], watermark_strategy=strategy)
    b = env.from_collection([{"v": i} for i in range(100, 130)], watermark_strategy=strategy)
    a.connect(b).map(Tag()).sink_to(CollectSink("tagged"))
    a.connect(b).flat_map(Twice()).sink_to(CollectSink("twice"))
    a.connect(b).process(Watermarked()).sink_to(CollectSink("stamped"))
    result = env.execute("co", executor="sim", seed=2, invariants=True)
    assert Counter((r["from"], r["v"]) for r in result.output("tagged")) == Counter(
        [("a", i) for i in range(50)] + [("b", i) for i in range(100, 130)])
    assert sorted(r["v"] for r in result.output("twice")) == sorted(
        [-i for i in range(100, 130)] + [i for i in range(50) for _ in range(2)])
    stamped = result.output("stamped")
    assert all(r["t"] == r["v"] for r in stamped) and len(stamped) == 80
    assert all(r["watermark_known"] for r in stamped if "watermark_known" in r)


class SharedCount(KeyedCoProcessFunction):
    """Counts both inputs' records per key in one state: the state is shared across inputs."""

    def process_element1(self, record, ctx):
        return self._count(ctx)

    def process_element2(self, record, ctx):
        return self._count(ctx)

    def _count(self, ctx):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {"k": ctx.key, "count": count.value()}


def test_connected_keyed_streams_share_keyed_state_per_key():
    env = StreamEnvironment(parallelism=2, buffer_size=4)
    env.enable_checkpointing(interval=0.002)
    a = env.from_collection([{"k": i % 3} for i in range(30)]).key_by("k")
    b = env.from_collection([{"key": i % 3} for i in range(15)]).key_by(lambda r: r["key"])
    a.connect(b).process(SharedCount(), name="shared").sink_to(CollectSink("counts"))
    result = env.execute("shared", executor="sim", seed=5, invariants=True)
    final = {}
    for r in result.output("counts"):
        final[r["k"]] = max(final.get(r["k"], 0), r["count"])
    assert final == {0: 15, 1: 15, 2: 15}
