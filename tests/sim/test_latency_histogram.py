"""End-to-end latencies are kept in a bounded histogram: percentiles within 1 % of
the exact ones, exact count/min/max, mergeable across tasks, and a job's memory does not grow with
the number of records it measures."""

from __future__ import annotations

import pickle
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from operators import CollectSink, KeyedProcessFunction
from runtime import CheckpointingMode, StreamEnvironment
from vocabulary.histogram import HIGHEST, LOWEST, RELATIVE_ERROR, LatencyHistogram

durations = st.one_of(st.floats(min_value=LOWEST * 1.001, max_value=1e6), st.just(0.0))


def exact_percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(round(q / 100.0 * (len(ordered) - 1)))]


def histogram_of(values: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    h.record_many(values)
    return h


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(values=st.lists(durations, min_size=1, max_size=300), q=st.floats(min_value=0, max_value=100))
@example(values=[0.001, 0.002, 0.003], q=50.0)
@example(values=[1.0] * 5 + [1000.0], q=99.0)
def test_percentiles_are_within_the_stated_relative_error(values: list[float], q: float) -> None:
    h = histogram_of(values)
    exact = exact_percentile(values, q)
    estimate = h.percentile(q)
    assert estimate is not None
    if exact <= LOWEST:
        assert min(values) <= estimate <= LOWEST  # bucket 0: reported as 0, clamped to the min
    else:
        assert abs(estimate - exact) <= RELATIVE_ERROR * exact * (1 + 1e-9), (q, exact, estimate)
    assert (len(h), h.min, h.max) == (len(values), min(values), max(values))
    assert h.mean == pytest.approx(sum(values) / len(values), rel=1e-9, abs=1e-12)
    assert h.percentile(0) == min(values) and h.percentile(100) == max(values)


@pytest.mark.slow
def test_percentile_error_bound_on_a_large_random_sample_through_the_vectorised_path() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.lognormal(-6, 2, 50_000), rng.uniform(1e-6, 10, 50_000)])
    h = LatencyHistogram()
    for chunk in np.array_split(values, 37):  # buffers of ~2,700 values, and one pass of 100,000
        h.record_array(chunk)
    h.record_array(values)
    doubled = np.concatenate([values, values]).tolist()
    for q in (0, 1, 25, 50, 90, 99, 99.9, 99.99, 100):
        exact = exact_percentile(doubled, q)
        assert abs(h.percentile(q) - exact) <= RELATIVE_ERROR * exact, q


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(parts=st.lists(st.lists(durations, max_size=60), min_size=1, max_size=6))
def test_merging_per_task_histograms_equals_one_histogram_of_every_value(parts: list[list[float]]) -> None:
    merged = LatencyHistogram()
    for part in parts:
        merged.merge(histogram_of(part))
    everything = [v for part in parts for v in part]
    whole = histogram_of(everything)
    assert merged == whole
    assert len(merged) == len(everything)
    for q in (0, 50, 99, 100):
        assert merged.percentile(q) == whole.percentile(q)


def test_every_recording_path_gives_the_same_histogram() -> None:
    values = np.random.default_rng(3).exponential(0.01, 10_000)
    by_array, by_list, one_by_one, small_arrays = (LatencyHistogram() for _ in range(4))
    by_array.record_array(values)
    by_list.record_many(values.tolist())
    for v in values.tolist():
        one_by_one.record(v)
    for chunk in np.array_split(values, 1000):
        small_arrays.record_array(chunk)
    assert by_array == by_list == one_by_one == small_arrays
    assert by_array.counts.sum() == 10_000


def test_an_empty_histogram() -> None:
    h = LatencyHistogram()
    assert len(h) == 0 and not h
    assert h.percentile(50) is None and h.min is None and h.max is None and h.mean is None
    h.merge(LatencyHistogram())
    assert len(h) == 0 and h == LatencyHistogram()
    h.record(0.5)
    h.merge(LatencyHistogram())
    assert (len(h), h.percentile(50)) == (1, 0.5)


def test_out_of_range_values_are_counted_and_clamped_to_the_exact_extremes() -> None:
    h = histogram_of([-1e-6, 0.0, 1e-12, HIGHEST * 10])
    assert (len(h), h.min, h.max) == (4, -1e-6, HIGHEST * 10)
    assert h.percentile(50) == 0.0  # bucket 0, not the bucket of a real latency
    with pytest.raises(ValueError, match="percentile must be a number in \\[0, 100\\]"):
        h.percentile(101)


def test_the_histogram_is_bounded_and_survives_pickling_with_values_still_buffered() -> None:
    small, big = LatencyHistogram(), LatencyHistogram()
    small.record_many([0.001, 0.002, 0.003])  # still in the buffer, not bucketed yet
    big.record_array(np.random.default_rng(1).uniform(0, 1, 1_000_000))
    assert len(pickle.dumps(big)) < 64_000  # no 8 bytes per value
    copy = pickle.loads(pickle.dumps(small))
    assert copy == small and len(copy) == 3 and copy.percentile(50) == small.percentile(50)



def test_merging_a_read_only_histogram_with_values_still_buffered() -> None:
    """Ray hands a task actor's histogram back with read-only numpy arrays (zero-copy from the
    object store): merging it must not write to it (it raised "output array is read-only" at the
    end of every Ray job whose sink measured latencies)."""
    other = LatencyHistogram()
    other.record_array(np.full(5_000, 0.01))  # bucketed
    other.record_many([0.002, 0.003])  # still buffered
    other._counts.setflags(write=False)
    merged = LatencyHistogram()
    merged.merge(other)
    assert len(merged) == 5_002 and len(other) == 5_002
    assert merged.min == 0.002 and abs(merged.percentile(50) - 0.01) <= 0.01 * 0.01


APPS = pa.array([f"app{i}" for i in range(50)])


def _measured_job(records: int) -> StreamEnvironment:
    """Every record reaches the sink task (latency measured there), which keeps none of them."""
    env = StreamEnvironment(parallelism=2, buffer_size=10_000)
    env.enable_checkpointing(interval=0.01, mode=CheckpointingMode.EXACTLY_ONCE)
    (env.generate(count=records, batch_fn=lambda idx: {"app": APPS.take(pa.array(idx % 50))})
        .key_by("app").map_batches(lambda b: b.slice(0, 0)).sink_to(CollectSink("out")))
    return env


def _traced_run(records: int) -> tuple[int, int]:
    env = _measured_job(records)
    tracemalloc.start()
    try:
        result = env.execute("latency-memory", executor="sim", seed=1)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.metrics.latencies) == records and result.output("out") == []
    return retained, peak


@pytest.mark.slow
def test_a_jobs_memory_does_not_grow_with_the_records_it_measures() -> None:
    _traced_run(100_000)  # warm-up: imports and caches
    small_retained, small_peak = _traced_run(100_000)
    big_retained, big_peak = _traced_run(1_000_000)
    # 8 bytes per record (the old array of latencies) would be +7.2 MB
    assert big_retained - small_retained < 1_000_000, (small_retained, big_retained)
    assert big_peak - small_peak < 1_000_000, (small_peak, big_peak)


class _StampArrival(KeyedProcessFunction):
    def process_element(self, record, ctx):
        yield {"app": ctx.key, "created_at": record["created_at"], "done_at": ctx.now()}


def test_on_the_records_path_the_histogram_holds_each_records_latency() -> None:
    """Dicts reaching the sink task: the latency of each record is measured where it arrives,
    which is when its keyed function runs (one step: the virtual clock stands still in it)."""
    env = StreamEnvironment(parallelism=2, buffer_size=100)
    env.enable_checkpointing(interval=0.01, mode=CheckpointingMode.EXACTLY_ONCE)
    (env.generate(count=3_000, fn=lambda i: {"app": f"app{i % 7}"}, rate=20_000.0)
        .key_by("app").process(_StampArrival()).sink_to(CollectSink("out")))
    result = env.execute("latency-records", executor="sim", seed=3)
    exact = sorted(r["done_at"] - r["created_at"] for r in result.output("out"))
    histogram = result.metrics.latencies
    assert len(histogram) == len(exact) == 3_000
    assert histogram.min == exact[0] and histogram.max == exact[-1] and exact[-1] > 0
    for q in (1, 50, 90, 99):
        assert abs(histogram.percentile(q) - exact_percentile(exact, q)) <= RELATIVE_ERROR * exact_percentile(exact, q)
    assert result.metrics.first_created_at == min(r["created_at"] for r in result.output("out"))
