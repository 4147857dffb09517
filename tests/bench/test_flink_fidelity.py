"""`benchmarks.flink_fidelity`: the simulator's channels hold what a Flink profile measured, and
the recorded Flink documents are predicted within the target (no JVM: saved REST documents)."""

from __future__ import annotations

import json
import pathlib
import statistics

import pytest

from benchmarks import checkpoint_modes as cm
from benchmarks import flink_fidelity
from benchmarks.modes_outcome import Combination
from runtime.calibration.predict import predict
from runtime.calibration.profile import CostProfile
from runtime.sim.costs import StepCost

FIXTURES = pathlib.Path(__file__).parents[1] / "calibration" / "fixtures"
SLOW = 2e-4  # count[1]'s seconds per record: 5k records/s, a tenth of the sources' rate


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", [1500.0, 3000.0])
def test_a_backpressured_channel_holds_the_profiles_records(in_flight: float) -> None:
    # `predict` sizes the buffers so that each of the slow subtask's two input channels holds
    # `in_flight` records ahead of an aligned barrier: it aligns after working through both
    profile = CostProfile(steps={"default": StepCost(0.0, 2e-6), "count[1]": StepCost(0.0, SLOW)},
                          latency_min=0.0, latency_max=0.002, in_flight_records=in_flight)
    combo = Combination("sim", "backpressure", "aligned", 2)
    bench = cm.PROFILES[("sim", True)]
    env = cm.make_env(combo, bench)
    cm.build_job(env, combo, bench, rate=50_000, count=150_000)
    result = predict(env, "channels", profile)
    durations = [c.duration for c in result.completed_checkpoints if c.trigger_time >= 0.6]
    assert len(durations) >= 5
    assert statistics.median(durations) == pytest.approx(2 * in_flight * SLOW, rel=0.15)


def recorded(mode: str) -> dict:
    return json.loads((FIXTURES / f"flink_java_backpressure_{mode}.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("mode", flink_fidelity.MODES)
def test_recorded_runs_are_predicted_within_30_percent(mode: str) -> None:
    # the fixtures are live documents of the Java job (one slow key subtask); the prediction's
    # inputs are the profile's (per-record cost, queues, phases), never a checkpoint duration
    run = flink_fidelity.predict_run(mode, recorded(mode))
    assert run["checkpoints"] >= 3
    assert abs(run["error"]) <= 0.3, run


def test_a_document_without_queue_metrics_is_refused_by_name() -> None:
    doc = recorded("aligned")
    for vertex in doc["vertices"]:
        for sub in vertex["subtasks"]:
            sub.pop("outputQueueSize")
    with pytest.raises(ValueError, match="aligned run: no backpressured source with queue metrics"):
        flink_fidelity.predict_run("aligned", doc)
