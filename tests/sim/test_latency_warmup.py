"""A latency warm-up (`StreamEnvironment.set_latency_warmup`): a sink task leaves out of its
latency histogram the records stamped less than `seconds` after the earliest stamp it saw, so a
slow start (actors coming up while a due-stamped schedule already runs) does not read as steady
latency; everything else (the count of stamped records, the span, throughput) still covers them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from runtime.core.graph import JobGraphError
from vocabulary.fault_plan import TaskStall

RATE = 2000.0
RECORDS = 2000  # one second of input
APPS = pa.array([f"app{a}" for a in range(5)])


def job(*, vectorised: bool, warmup: float | None) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=100, buffer_timeout=0.002)
    env.enable_checkpointing(interval=0.05)
    if warmup is not None:
        env.set_latency_warmup(warmup)
    if vectorised:
        stream = env.generate(count=RECORDS, rate=RATE, stamp="due",
                              batch_fn=lambda idx: {"app": APPS.take(pa.array(idx % 5))})
        stream.key_by("app").count(name="count").sink_to(CollectSink("out"))
    else:
        stream = env.generate(count=RECORDS, rate=RATE, stamp="due", fn=lambda i: {"app": f"app{i % 5}"})
        stream.map(lambda r: r, name="same").key_by("app").count(name="count").sink_to(CollectSink("out"))
    return env


#: the count tasks hang for the first 0.3 s: what the schedule made due meanwhile waits
SLOW_START = FaultPlan.of(TaskStall(task="count[0]", at=0.0, duration=0.3),
                          TaskStall(task="count[1]", at=0.0, duration=0.3))


@pytest.mark.slow
@pytest.mark.parametrize("vectorised", [False, True], ids=["records", "vectorised"])
def test_the_warm_up_leaves_out_a_slow_start_and_nothing_after_it(vectorised: bool) -> None:
    cold = job(vectorised=vectorised, warmup=None).execute("cold", executor="sim", seed=1, faults=SLOW_START)
    warm = job(vectorised=vectorised, warmup=0.5).execute("warm", executor="sim", seed=1, faults=SLOW_START)
    # without a warm-up the records due during the stall waited for it
    assert cold.metrics.latencies.max >= 0.25
    assert len(cold.metrics.latencies) == RECORDS
    # with it: the records due from 0.5 s after the first one on, and only they, are measured
    assert len(warm.metrics.latencies) == pytest.approx(RECORDS * 0.5, abs=4)
    assert warm.metrics.latencies.max < 0.05, warm.metrics.latencies.max
    assert warm.metrics.latency_warmup_records == RECORDS - len(warm.metrics.latencies)
    # the span and the throughput still cover every stamped record
    assert warm.metrics.first_created_at == cold.metrics.first_created_at
    assert warm.metrics.end_to_end_throughput == pytest.approx(cold.metrics.end_to_end_throughput)


@pytest.mark.slow
def test_a_warm_up_of_zero_measures_everything() -> None:
    result = job(vectorised=False, warmup=0.0).execute("zero", executor="sim", seed=1)
    assert len(result.metrics.latencies) == RECORDS and result.metrics.latency_warmup_records == 0


@pytest.mark.parametrize("bad", [-0.1, float("nan"), "1", True, float("inf")])
def test_a_bad_warm_up_is_refused_naming_the_option(bad) -> None:
    with pytest.raises(JobGraphError, match="latency_warmup"):
        StreamEnvironment().set_latency_warmup(bad)
