"""Event time that mixes ints and floats in one stream (3, 5.0, 7.5): a window is one value,
`[start, end)`, whichever numeric type the records that name it carry. An assigner with integer
sizes makes integer windows (`5.0` and `5` open the same session `[5, 10)`, `3` and `7.5` fall in
the same tumbling `[0, 10)`), which fire at `end - 1` as in integer time; a fraction is a bound
only where a record's time puts it (a session from 7.5). So one window gives one result at one
instant — on the record path, the vectorised count/sum (an Arrow column turns every int of a
batch that holds a float into a float), and after a restore (a snapshot's Arrow columns do the
same to window keys and timers). A record whose every window is late goes to the late output,
a fraction past an integer window's last instant included, never silently nowhere."""

from __future__ import annotations

import math
from collections import defaultdict

import pyarrow as pa
import pytest
from api_fakes import make_ctx
from test_api_windows import LATE, fired, rows, window_op

from operators import (
    CollectSink,
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from operators.keyed import ColumnKeySelector
from operators.timestamps import TIMESTAMP_FIELD as TS
from operators.windows.vectorised import WindowCountSumOperator
from runtime import FaultPlan, StreamEnvironment, TaskCrash
from runtime.records.messages import Watermark
from state.key_groups import KeyGroupRange
from state.keyed import KeyedStateBackend
from state.serialization import keyed_snapshot_from_bytes, keyed_snapshot_to_bytes


def typed(windows):
    return [(w.start, type(w.start).__name__, w.end, type(w.end).__name__) for w in windows]


def test_integer_sized_windows_are_integer_windows_whatever_the_records_timestamp_type():
    tumbling, sliding = TumblingEventTimeWindows.of(10), SlidingEventTimeWindows.of(10, 5)
    for t in (3, 3.0, 7.5):
        assert typed(tumbling.assign_windows(t, None)) == [(0, "int", 10, "int")]
    assert typed(sliding.assign_windows(7.5, None)) == typed(sliding.assign_windows(7, None)) == \
        [(5, "int", 15, "int"), (0, "int", 10, "int")]
    sessions = EventTimeSessionWindows.with_gap(5)
    assert typed(sessions.assign_windows(5.0, None)) == typed(sessions.assign_windows(5, None)) == \
        [(5, "int", 10, "int")]
    assert typed(sessions.assign_windows(7.5, None)) == [(7.5, "float", 12.5, "float")]
    assert typed(EventTimeSessionWindows.with_gap(0.5).assign_windows(5, None)) == [(5.0, "float", 5.5, "float")]
    assert typed([sessions.window_of((5.0, 10.0)), TumblingEventTimeWindows.of(0.5).window_of((1, 2))]) == \
        [(5, "int", 10, "int"), (1.0, "float", 2.0, "float")]


@pytest.mark.parametrize("times", [(5, 5.0), (5.0, 5)], ids=["int-first", "float-first"])
def test_a_session_of_5_and_5_0_is_one_window_firing_at_its_last_integer_instant(times):
    op, ctx = window_op(EventTimeSessionWindows.with_gap(5), late=LATE)
    op.process_batch(rows((1, times[0]), (2, times[1])))
    assert fired(op, 8) == []
    out = fired(op, 9)
    assert out == [("a", 5, 10, [1, 2], 9)]
    assert [type(v) for v in out[0][1:3] + out[0][4:]] == [int, int, int]
    assert fired(op, math.inf) == [] and op._backend.dump() == {}


def test_a_session_grown_by_a_fraction_ends_at_the_fraction():
    op, _ = window_op(EventTimeSessionWindows.with_gap(5), late=LATE)
    op.process_batch(rows((1, 5), (2, 7.5), (3, 5.0)))
    assert fired(op, 12) == []
    assert fired(op, 12.5) == [("a", 5, 12.5, [1, 2, 3], math.nextafter(12.5, -math.inf))]


def _counts(batches, watermarks):
    ctx = make_ctx()
    op = WindowCountSumOperator(TumblingEventTimeWindows.of(10), ColumnKeySelector("k"), "k", None)
    op.open(ctx)
    out = []
    for batch in batches:
        assert op.process_columns(pa.RecordBatch.from_pylist([{"k": "a", TS: t} for t in batch])) == []
    for watermark in watermarks:
        out.append([(r["window_start"], r["window_end"], r["count"], r[TS])
                    for b in op.process_watermark(Watermark(watermark))[:-1] for r in b])
    return out, ctx


@pytest.mark.parametrize("batches", [[[3, 7.5]], [[3, 4], [3, 7.5]], [[3, 7.5], [4]]],
                         ids=["float-column", "int-then-float", "float-then-int"])
def test_the_vectorised_count_gives_one_integer_window_whatever_the_batches_column_type(batches):
    out, ctx = _counts(batches, [8, 9, math.inf])
    count = sum(len(b) for b in batches)
    assert out == [[], [(0, 10, count, 9)], []]
    assert all(type(v) is int for v in out[1][0])
    assert ctx.keyed_backend.dump() == {}


def _restored(op, ctx, assigner):
    blob = keyed_snapshot_to_bytes(ctx.keyed_backend.snapshot(1))
    backend = KeyedStateBackend.restore("vertex", KeyGroupRange.of(128), 128, [keyed_snapshot_from_bytes(blob)])
    again, ctx2 = window_op(assigner, late=LATE)
    ctx2.keyed_backend = backend
    again.open(ctx2)
    return again


def test_an_integer_session_restored_beside_fractional_ones_still_fires_once_at_its_instant():
    """The snapshot's key and timer columns hold floats once one window is fractional."""
    sessions = EventTimeSessionWindows.with_gap(5)
    op, ctx = window_op(sessions, late=LATE)
    op.process_batch(rows((1, 3), (2, 17.5), (3, 30)))
    again = _restored(op, ctx, sessions)
    assert fired(again, 6) == []
    assert fired(again, 7) == [("a", 3, 8, [1], 7)]
    assert fired(again, math.inf) == [("a", 17.5, 22.5, [2], math.nextafter(22.5, -math.inf)), ("a", 30, 35, [3], 34)]
    assert again._backend.dump() == {}


def test_a_fraction_after_its_integer_windows_last_instant_is_late_data_not_lost():
    op, ctx = window_op(TumblingEventTimeWindows.of(10), late=LATE)
    op.process_batch(rows((1, 3)))
    assert fired(op, 9) == [("a", 0, 10, [1], 9)]
    assert op.process_batch(rows((2, 9.5), (3, 10))) == []  # 9.5: its window [0, 10) fired at 9
    assert [(tag, [r["v"] for r in records]) for tag, records in ctx.side_outputs.take()] == [("late", [2])]
    dropping, _ = window_op(TumblingEventTimeWindows.of(10))
    dropping.process_batch(rows((1, 3)))
    fired(dropping, 9)
    dropping.process_batch(rows((2, 9.5)))
    assert dropping.num_late_records_dropped == 1


# ------------------------------------------------------------------ end to end, on the simulator

def _mixed_rows(n=400):
    """`t` about `10 * i`, out of order by up to 25; every third a float (a fraction, or an integral
    float), so buffers and snapshots mix both."""
    out = []
    for i in range(n):
        t = 10 * i + (i * 37) % 26
        t = t + 0.5 if i % 3 == 1 else float(t) if i % 3 == 2 else t
        out.append({"id": i, "k": f"k{i % 4}", "v": i % 7, "t": t})
    return out


def _reference(records, tumble, size, slide, gap):
    counts, sums, by_key = defaultdict(int), defaultdict(int), defaultdict(list)
    for r in records:
        t = r["t"]
        start = int(t // tumble * tumble)
        counts[(r["k"], start, start + tumble)] += 1
        last = int(t // slide * slide)
        for s in range(last, int(math.floor(t)) - size, -slide):
            if s <= t < s + size:
                sums[(r["k"], s, s + size)] += r["v"]
        by_key[r["k"]].append(t)
    sessions = []
    for key, times in by_key.items():
        times.sort()
        first = last = times[0]
        n = 1
        for t in times[1:]:
            if t <= last + gap:
                last, n = t, n + 1
            else:
                sessions.append((key, first, last + gap, n))
                first = last = t
                n = 1
        sessions.append((key, first, last + gap, n))
    return dict(counts), dict(sums), sorted(sessions)


class SessionCount(ProcessWindowFunction):
    def process(self, key, context, elements):
        window = context.window()
        yield {"k": key, "start": window.start, "end": window.end, "n": len(list(elements))}


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_job_over_mixed_int_and_float_timestamps_commits_each_window_once_through_a_crash(mode):
    """Tumbling counts (vectorised), sliding sums and sessions over a stream whose timestamps mix
    ints, integral floats and fractions, checkpoints restored after crashes: every window once,
    with the plain-Python reference's bounds (ints where the value is integral) and values."""
    records = _mixed_rows()
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002, mode=mode, tolerable_failures=1000)
    env.set_auto_watermark_interval(0.001)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(30).with_timestamp_assigner("t")
    keyed = env.from_collection(records, splits=3, watermark_strategy=strategy).key_by("k")
    keyed.window(TumblingEventTimeWindows.of(100)).count(name="counts").sink_to(CollectSink("counts"))
    keyed.window(SlidingEventTimeWindows.of(100, 50)).sum("v", name="sums").sink_to(CollectSink("sums"))
    keyed.window(EventTimeSessionWindows.with_gap(45)).process(SessionCount(), name="sessions") \
        .sink_to(CollectSink("sessions"))
    plan = FaultPlan.of(TaskCrash(task="sessions[0]", after_records=150), TaskCrash(task="counts[1]", at_fraction=0.5))
    result = env.execute("mixed", executor="sim", seed=3, faults=plan)
    assert result.restarts == 2, result.failures
    counts, sums, sessions = _reference(records, 100, 100, 50, 45)
    assert any(n > 1 for *_, n in sessions) and any(n == 1 for *_, n in sessions)  # sessions merge, some
    got_counts = [(r["k"], r["window_start"], r["window_end"], r["count"]) for r in result.output("counts")]
    got_sums = [(r["k"], r["window_start"], r["window_end"], r["v"]) for r in result.output("sums")]
    got_sessions = sorted((r["k"], r["start"], r["end"], r["n"]) for r in result.output("sessions"))
    assert {g[:3]: g[3] for g in got_counts} == counts and len(got_counts) == len(counts)
    assert {g[:3]: g[3] for g in got_sums} == sums and len(got_sums) == len(sums)
    assert got_sessions == sessions
    for start, end in [g[1:3] for g in got_counts + got_sums + got_sessions]:
        for bound in (start, end):
            assert type(bound) is (int if float(bound).is_integer() else float), (start, end)
