"""Event-time windows over float timestamps and float sizes (seconds): a record at `t` belongs to
the windows `[start, end)` with `start <= t < end`, a window fires once the watermark reached the
last float below its end, and nothing is lost or late that a plain-Python reference counts in a
window; the vectorised count/sum agrees with the record path."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pyarrow as pa
import pytest
from api_fakes import make_ctx
from test_api_windows import LATE, fired, rows, window_op

from operators import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
)
from operators.keyed import ColumnKeySelector
from operators.timestamps import TIMESTAMP_FIELD as TS
from operators.watermarks import bounded_watermark
from operators.windows.vectorised import WindowCountSumOperator
from runtime.records.messages import Watermark

JUST_BELOW_HALF = math.nextafter(0.5, -math.inf)


def test_a_float_window_ends_at_the_last_float_below_its_end():
    assert TimeWindow(0.0, 0.5).max_timestamp() == JUST_BELOW_HALF
    assert TimeWindow(0, 10).max_timestamp() == 9  # integer time keeps Flink's end - 1


def test_a_half_second_tumbling_window_holds_every_record_before_its_end_and_fires_at_it():
    op, ctx = window_op(TumblingEventTimeWindows.of(0.5), late=LATE)
    assert op.process_batch(rows((1, 0.1), (2, 0.3), (3, 0.49), (4, 0.6))) == []
    assert fired(op, 0.45) == []
    assert fired(op, JUST_BELOW_HALF) == [("a", 0.0, 0.5, [1, 2, 3], JUST_BELOW_HALF)]
    assert op.process_batch(rows((5, 0.999))) == []
    assert fired(op, math.inf) == [("a", 0.5, 1.0, [4, 5], math.nextafter(1.0, -math.inf))]
    assert ctx.side_outputs.take() == []


def test_float_allowed_lateness_fires_again_then_sends_to_the_side_output():
    op, ctx = window_op(TumblingEventTimeWindows.of(0.5), lateness=0.25, late=LATE)
    op.process_batch(rows((1, 0.1)))
    assert [r[3] for r in fired(op, 0.6)] == [[1]]
    assert [r["vs"] for r in op.process_batch(rows((2, 0.2)))] == [[1, 2]]  # within lateness: fires again
    fired(op, 0.76)
    assert op.process_batch(rows((3, 0.3))) == []
    assert [(tag, [r["v"] for r in records]) for tag, records in ctx.side_outputs.take()] == [("late", [3])]
    assert op._backend.dump() == {}


def _float_windows(assigner, t):
    """Reference: the windows holding `t`, by the definition `start <= t < end` over the windows
    the assigner's grid can make (`offset + m * slide`, found by a plain search)."""
    slide = getattr(assigner, "slide", assigner.size)
    out = []
    for m in range(int(t // slide) - int(assigner.size // slide) - 3, int(t // slide) + 3):
        start = assigner.offset + m * slide
        end = assigner.offset + (m + 1) * slide if slide == assigner.size else start + assigner.size
        if start <= t < end:
            out.append((start, end))
    return out


def _sessions(times, gap):
    groups = []
    for t in sorted(times):
        if groups and t <= groups[-1][-1] + gap:
            groups[-1].append(t)
        else:
            groups.append([t])
    return [(g[0], g[-1] + gap) for g in groups]


def _stream(seed, n=300):
    """Float timestamps rising with jitter below the delay, over a few keys."""
    rng = random.Random(seed)
    records, t = [], 0.0
    for i in range(n):
        t += rng.uniform(0.0, 0.07)
        records.append({"k": f"k{rng.randrange(3)}", "v": i, TS: round(max(0.0, t - rng.uniform(0, 0.2)), 3)})
    return records


ASSIGNERS = [TumblingEventTimeWindows.of(0.5), TumblingEventTimeWindows.of(0.1, 0.03),
             SlidingEventTimeWindows.of(0.5, 0.1), SlidingEventTimeWindows.of(0.3, 0.3),
             SlidingEventTimeWindows.of(1.5, 0.25, 0.1)]


def _run(op, records, delay=0.25):
    """Feed `records` in batches of 7, each followed by the bounded watermark; then end of input."""
    out, top = [], -math.inf
    for i in range(0, len(records), 7):
        batch = records[i:i + 7]
        out += op.process_batch(batch)
        top = max(top, *(r[TS] for r in batch))
        out += [r for b in op.process_watermark(Watermark(bounded_watermark(top, delay)))[:-1] for r in b]
    return out + [r for b in op.process_watermark(Watermark(math.inf))[:-1] for r in b]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("assigner", ASSIGNERS, ids=repr)
def test_float_time_windows_match_a_plain_python_reference(assigner, seed):
    records = _stream(seed)
    expected = defaultdict(list)
    for r in records:
        for window in _float_windows(assigner, r[TS]):
            expected[(r["k"], *window)].append(r["v"])
    op, ctx = window_op(assigner, late=LATE)
    got = {(r["k"], r["start"], r["end"]): r["vs"] for r in _run(op, records)}
    assert ctx.side_outputs.take() == []
    assert got == dict(expected)
    for (_, start, end), values in got.items():  # each window holds exactly its records
        assert all(start <= records[v][TS] < end for v in values)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("gap", [0.05, 0.125])
def test_float_session_windows_match_a_plain_python_reference(gap, seed):
    records = _stream(seed)
    op, ctx = window_op(EventTimeSessionWindows.with_gap(gap), late=LATE)
    got = sorted((r["k"], r["start"], r["end"], len(r["vs"])) for r in _run(op, records))
    expected = []
    for key in {r["k"] for r in records}:
        times = [r[TS] for r in records if r["k"] == key]
        for start, end in _sessions(times, gap):
            expected.append((key, start, end, sum(start <= t < end for t in times)))
    assert ctx.side_outputs.take() == []
    assert got == sorted(expected)


@pytest.mark.parametrize("assigner", ASSIGNERS, ids=repr)
@pytest.mark.parametrize("field", [None, "v"])
def test_the_vectorised_float_window_count_and_sum_match_the_reference(assigner, field):
    records = [{**r, "v": float(r["v"])} for r in _stream(5, 200)]
    expected = defaultdict(float)
    for r in records:
        for window in _float_windows(assigner, r[TS]):
            expected[(r["k"], *window)] += 1 if field is None else r["v"]
    ctx = make_ctx()
    op = WindowCountSumOperator(assigner, ColumnKeySelector("k"), "k", field)
    op.open(ctx)
    out, top = [], -math.inf
    for i in range(0, len(records), 20):
        part = records[i:i + 20]
        out += op.process_columns(pa.RecordBatch.from_pylist(part))
        top = max(top, *(r[TS] for r in part))
        out += [r for b in op.process_watermark(Watermark(bounded_watermark(top, 0.25)))[:-1] for r in b]
    out += [r for b in op.process_watermark(Watermark(math.inf))[:-1] for r in b]
    value = field or "count"
    got = {(r["k"], r["window_start"], r["window_end"]): r[value] for r in out}
    assert got == pytest.approx(dict(expected))
    assert all(r[TS] == math.nextafter(r["window_end"], -math.inf) for r in out)


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_job_over_float_seconds_commits_every_record_in_its_windows_through_a_crash(mode):
    """End to end on the simulator: timestamps in seconds, a watermark 0.25 s behind, half-second
    tumbling counts (vectorised over Arrow batches) and sliding sums, a crash in each."""
    from operators import CollectSink, WatermarkStrategy
    from runtime import FaultPlan, StreamEnvironment, TaskCrash

    records = [{"k": r["k"], "v": float(r["v"]), "t": r[TS]} for r in _stream(7, 600)]
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002, mode=mode, tolerable_failures=1000)
    env.set_auto_watermark_interval(0.001)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0.25).with_timestamp_assigner(lambda r, _: r["t"])
    keyed = env.from_collection(records, splits=3, watermark_strategy=strategy).key_by("k")
    tumbling, sliding = TumblingEventTimeWindows.of(0.5), SlidingEventTimeWindows.of(0.5, 0.1)
    keyed.window(tumbling).count(name="counts").sink_to(CollectSink("counts"))
    keyed.window(sliding).sum("v", name="sums").sink_to(CollectSink("sums"))
    plan = FaultPlan.of(TaskCrash(task="counts[0]", after_records=100), TaskCrash(task="sums[1]", at_fraction=0.5))
    result = env.execute("seconds", executor="sim", seed=2, faults=plan)
    assert result.restarts == 2, result.failures
    for sink, assigner, value in (("counts", tumbling, "count"), ("sums", sliding, "v")):
        expected = defaultdict(float)
        for r in records:
            for window in _float_windows(assigner, r["t"]):
                expected[(r["k"], *window)] += 1 if value == "count" else r["v"]
        got = [(r["k"], r["window_start"], r["window_end"], r[value]) for r in result.output(sink)]
        assert len(got) == len(expected), sink  # each window once
        assert {g[:3]: g[3] for g in got} == pytest.approx(dict(expected)), sink
