"""`python -m benchmarks.fidelity` on the simulator (`--measure sim`, tiny runs): its flags, the
JSON's shape, and the comparison arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import fidelity, fidelity_saved
from benchmarks import fidelity_nexmark as fn
from runtime.calibration.profile import CostProfile


@pytest.mark.slow
def test_sim_self_check_writes_every_cell_and_the_two_scores(tmp_path) -> None:
    path = tmp_path / "f.json"
    assert fidelity.main(["--measure", "sim", "--quick", "--scenario", "uniform", "--query", "--modes", "aligned", "unaligned",
                          "--duration", "0.3", "--max-rate-records", "3000", "--out", str(tmp_path / "out"),
                          "--json", str(path)]) == 0
    payload = json.loads(path.read_text())
    assert len(payload["cells"]) == 2 * len(fidelity.METRICS)
    cell = payload["cells"][0]
    assert set(cell) >= {"scenario", "mode", "metric", "measured", "predicted", "relative_error", "within_25pct"}
    assert payload["profiles"]["uniform"]["format"] == "barrierflow-profile/1"
    # the simulator predicting itself through a fitted profile: close on every cell
    assert payload["within_25pct_fraction"] == 1.0
    assert payload["order_agreement"] == 1.0
    assert (tmp_path / "out" / "fidelity.md").exists()
    # fitted again from the tallies the calibration kept: the same profile, the same predictions
    again = tmp_path / "again.json"
    assert fidelity.main(["--predict-from", str(path), "--refit", "--out", str(tmp_path / "again"),
                          "--json", str(again)]) == 0
    refitted = json.loads(again.read_text())
    assert refitted["refitted"] is True
    assert [c["predicted"] for c in refitted["cells"]] == [c["predicted"] for c in payload["cells"]]
    assert refitted["profiles"]["uniform"]["steps"] == payload["profiles"]["uniform"]["steps"]


def test_relative_error_and_within() -> None:
    assert abs(fidelity.relative_error(100.0, 120.0) - 0.2) < 1e-12
    assert fidelity.relative_error(0.0, 0.0) == 0.0 and fidelity.relative_error(0.0, 5.0) is None
    assert fidelity.within("latency_p50", 10.0, 12.4) and not fidelity.within("latency_p50", 10.0, 12.6)
    assert fidelity.within("alignment_time_p50", 0.0, 0.4)  # both under 1 ms
    assert fidelity.within("latency_p50", None, 3.0) is None


def test_order_agreement_ignores_ties_and_catches_swaps() -> None:
    measured = {"aligned": 100.0, "unaligned": 10.0, "none": 95.0}
    assert fidelity.order_agrees(measured, {"aligned": 80.0, "unaligned": 12.0, "none": 90.0})  # 100 vs 95: a tie
    assert not fidelity.order_agrees(measured, {"aligned": 8.0, "unaligned": 12.0, "none": 90.0})
    assert fidelity.order_agrees({"a": 1.0, "b": 1.05}, {"a": 2.0, "b": 1.0}) is None  # nothing to judge


def test_the_separated_order_judges_only_pairs_whose_repeats_do_not_interleave() -> None:
    # fidelity_ray10, uniform throughput: aligned 181-238k, unaligned 219-247k (medians 215k, 239k):
    # Ray ranked them the other way in fidelity_ray7; none (276-348k) is above both in every repeat
    measured = {"none": 346.8, "aligned": 214.5, "unaligned": 239.2}
    runs = {"none": [276.4, 348.0, 346.8], "aligned": [180.5, 214.5, 238.1], "unaligned": [218.8, 239.2, 246.9]}
    predicted = {"none": 280.4, "aligned": 268.6, "unaligned": 233.6}
    assert fidelity.order_agrees(measured, predicted) is False
    assert fidelity.order_agrees(measured, predicted, runs) is True
    assert fidelity.order_agrees(measured, {"none": 200.0, "aligned": 268.6, "unaligned": 233.6}, runs) is False
    payload = fidelity.compare({("u", m): [{"throughput": v} for v in runs[m]] for m in runs},
                               {("u", m): [{"throughput": v}] for m, v in predicted.items()})
    assert (payload["order_agreement"], payload["order_agreement_separated"]) == (0.0, 1.0)


@pytest.mark.slow
def test_sim_self_check_of_a_nexmark_query_gives_its_cells(tmp_path) -> None:
    path = tmp_path / "f.json"
    assert fidelity.main(["--measure", "sim", "--quick", "--scenario", "--query", "q8", "--modes", "aligned",
                          "unaligned", "--duration", "0.6", "--max-rate-records", "2000", "--out", str(tmp_path),
                          "--json", str(path)]) == 0
    payload = json.loads(path.read_text())
    cells = {(c["scenario"], c["mode"], c["metric"]): c for c in payload["cells"]}
    assert set(cells) == {("nexmark-q8", m, metric) for m in ("aligned", "unaligned") for metric in fidelity.METRICS}
    assert payload["nexmark_profile"]["seconds"] == 0.6 and payload["nexmark_profile"]["events"] == 2000
    assert payload["profiles"]["nexmark-q8"]["format"] == "barrierflow-profile/1"
    for mode in ("aligned", "unaligned"):
        for metric in ("throughput", "checkpoint_duration_p50"):
            cell = cells[("nexmark-q8", mode, metric)]
            assert cell["measured"] > 0 and cell["predicted"] > 0, cell
            assert cell["relative_error"] == pytest.approx(cell["predicted"] / cell["measured"] - 1)
    # aligned checkpoints persist no channel state; unaligned ones do (q8's window join has queued input)
    assert cells[("nexmark-q8", "aligned", "persisted_bytes_p50")]["measured"] == 0
    assert cells[("nexmark-q8", "unaligned", "persisted_bytes_p50")]["measured"] > 0


def test_a_prediction_adds_the_coordinators_finalize_time_to_every_checkpoint_duration() -> None:
    row = {"checkpoint_duration_p50": 8.0, "checkpoint_duration_p99": 9.5, "checkpoint_duration_max": None,
           "alignment_time_p50": 1.0, "throughput": 10.0}
    out = fn.with_finalize(row, 0.002)
    assert out == {**row, "checkpoint_duration_p50": 10.0, "checkpoint_duration_p99": 11.5}
    assert row["checkpoint_duration_p50"] == 8.0  # the row itself is left alone


def test_nexmark_cells_compare_each_metric_and_judge_only_the_measured_ones() -> None:
    # q5 on Ray: a latency run of a few seconds commits no 10 s sliding window, so no latency
    measured = {("nexmark-q5", "aligned"): [
        {"throughput": 40_000.0, "latency_p50": None, "checkpoint_duration_p50": 20.0, "checkpoint_duration_p99": 60.0,
         "alignment_time_p50": 4.0, "persisted_bytes_p50": 0.0},
        {"throughput": 50_000.0, "latency_p50": None, "checkpoint_duration_p50": 30.0, "checkpoint_duration_p99": 90.0,
         "alignment_time_p50": 6.0, "persisted_bytes_p50": 0.0}]}
    predicted = {("nexmark-q5", "aligned"): [{
        "throughput": 36_000.0, "latency_p50": None, "checkpoint_duration_p50": 40.0, "checkpoint_duration_p99": 80.0,
        "alignment_time_p50": 0.5, "persisted_bytes_p50": 512.0}]}
    payload = fidelity.compare(measured, predicted)
    cells = {c["metric"]: c for c in payload["cells"]}
    assert list(cells) == list(fidelity.METRICS)
    assert cells["throughput"]["measured"] == 45_000.0 and cells["throughput"]["measured_spread"] == (40_000.0, 50_000.0)
    assert cells["throughput"]["relative_error"] == pytest.approx(-0.2) and cells["throughput"]["within_25pct"]
    assert cells["checkpoint_duration_p50"]["relative_error"] == pytest.approx(0.6)
    assert not cells["checkpoint_duration_p50"]["within_25pct"]
    assert cells["checkpoint_duration_p99"]["within_25pct"]  # 80 vs 75: +7 %
    assert not cells["alignment_time_p50"]["within_25pct"]  # 0.5 vs 5 ms: -90 %
    assert cells["persisted_bytes_p50"]["within_25pct"]  # 0 measured, 512 predicted: both under 1 KB
    assert cells["latency_p50"]["within_25pct"] is None and cells["latency_p99"]["within_25pct"] is None
    # judged: throughput, both durations, alignment, persisted bytes; within: three of five
    assert payload["within_25pct_fraction"] == pytest.approx(3 / 5)


SAVED = Path(__file__).parent / "fixtures" / "fidelity_sim.json"  # a `--measure sim` self-check's JSON


@pytest.mark.slow  # every cell of a saved run simulated again
def test_predict_from_a_saved_run_makes_the_same_predictions_and_keeps_its_measurements(tmp_path) -> None:
    # the simulator is deterministic: the saved profiles at the saved sizes predict what they did
    path = tmp_path / "again.json"
    assert fidelity.main(["--predict-from", str(SAVED), "--out", str(tmp_path), "--json", str(path)]) == 0
    saved, again = json.loads(SAVED.read_text()), json.loads(path.read_text())
    assert again["predicted_from"] == str(SAVED)
    key = ("scenario", "mode", "metric", "measured", "measured_runs", "predicted", "within_25pct")
    assert [{k: c[k] for k in key} for c in again["cells"]] == [{k: c[k] for k in key} for c in saved["cells"]]
    assert {c["scenario"] for c in again["cells"]} == {"uniform", "nexmark-q5"}
    for score in ("within_25pct_fraction", "order_agreement", "order_agreement_separated"):
        assert again[score] == saved[score], score
    # the same profiles (a field newer than the saved file reads as its default)
    assert {k: CostProfile.from_json(p) for k, p in again["profiles"].items()} == \
        {k: CostProfile.from_json(p) for k, p in saved["profiles"].items()}
    assert "predicted again from" in (tmp_path / "fidelity.md").read_text()


def test_a_saved_run_gives_one_measured_row_per_repeat(tmp_path) -> None:
    doc = json.loads(SAVED.read_text())
    for cell in doc["cells"]:
        if cell["scenario"] == "uniform" and cell["mode"] == "aligned" and cell["metric"] == "throughput":
            cell["measured_runs"] = [1.0, 3.0, 2.0]
    path = tmp_path / "repeats.json"
    path.write_text(json.dumps(doc))
    saved = fidelity_saved.load(path)
    assert saved.modes == {"uniform": ["aligned", "unaligned"], "nexmark-q5": ["aligned", "unaligned"]}
    rows = saved.measured[("uniform", "aligned")]
    assert [r["throughput"] for r in rows] == [1.0, 3.0, 2.0]
    assert fidelity.compare({k: v for k, v in saved.measured.items() if k[0] == "uniform"},
                            {("uniform", m): [{"throughput": 2.0}] for m in ("aligned", "unaligned")}
                            )["cells"][0]["measured"] == 2.0  # the median of the repeats
    assert (saved.query("nexmark-q5"), saved.query("uniform")) == ("q5", None)
    assert saved.nexmark_bench.events == doc["nexmark_profile"]["events"]


def test_predict_from_names_the_file_and_what_it_lacks(tmp_path, capsys) -> None:
    doc = json.loads(SAVED.read_text())
    del doc["profiles"]["uniform"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as exit_:
        fidelity.main(["--predict-from", str(path), "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert str(path) in err and "'uniform' has no profile" in err
    path.write_text("not json")
    with pytest.raises(fidelity_saved.SavedRunError, match="broken.json: not JSON"):
        fidelity_saved.load(path)


def test_a_nexmark_cell_is_measured_on_ray_as_its_calibration_runs_it(monkeypatch) -> None:
    """The simulator models a worker actor per subtask: Ray's measured rows must deploy the job so
    too, or the prediction is compared with another deployment (a worker per pipeline shares one
    GIL among its subtasks)."""
    from runtime import StreamEnvironment
    from runtime.workloads.nexmark.config import NexmarkConfig
    from runtime.workloads.nexmark.queries import QUERIES

    class Deployed(Exception):
        pass

    deployments = []

    def execute(self, name, executor="sim", **options):
        deployments.append((executor, options.get("slots_per_worker")))
        raise Deployed

    monkeypatch.setattr(StreamEnvironment, "execute", execute)
    bench = fn.bench_profile("ray", True)
    with pytest.raises(Deployed):
        fn.measure_query("ray", "q5", "aligned", bench, NexmarkConfig(), 100)
    with pytest.raises(Deployed):
        fn._run("ray", QUERIES["q5"], "unaligned", bench, NexmarkConfig(), 100, 1000.0, 0.0, trace=True)
    assert deployments == [("ray", 1), ("ray", 1)]


def test_refit_needs_a_saved_run_whose_profiles_kept_their_tallies(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        fidelity.main(["--refit", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "--refit needs --predict-from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # the fixture's profiles keep no tallies
        fidelity.main(["--predict-from", str(SAVED), "--refit", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and str(SAVED) in err and "keeps no per-task step tallies" in err


def test_each_round_on_ray_calibrates_again_and_the_cells_compare_the_median_prediction(monkeypatch) -> None:
    """A wall-clock calibration is a sample: each round calibrates, predicts with its profile and
    measures, in that order; a cell compares the median of the rounds' predictions."""

    events: list[str] = []
    guesses = iter([30.0, 10.0, 20.0])  # the three rounds' predicted throughput
    measures = iter([21.0, 19.0, 20.0])

    def calibrate(measure, scenario, bench):
        events.append("calibrate")
        return CostProfile(cores=len(events)), {"seconds": 1.0, "load_average": 0.5}

    def predict(measure, scenario, query, modes, profile, bench, nexmark_bench):
        events.append(f"predict with cores={profile.cores}")
        return {(scenario, "aligned"): {"throughput": next(guesses)}}

    def measure(combo, bench):
        events.append("measure")
        return type("Outcome", (), {"row": {"throughput": next(measures)}})()

    monkeypatch.setattr(fidelity, "calibrate_scenario", calibrate)
    monkeypatch.setattr(fidelity, "predict_modes", predict)
    monkeypatch.setattr(fidelity.cm, "run_combination", measure)
    payload = fidelity.run("ray", ["uniform"], ["aligned"], True, 3, bench=fidelity.cm.PROFILES[("ray", True)])
    assert events == ["calibrate", "predict with cores=1", "measure", "calibrate", "predict with cores=4", "measure",
                      "calibrate", "predict with cores=7", "measure"]
    cell = next(c for c in payload["cells"] if c["metric"] == "throughput")
    assert (cell["predicted"], cell["predicted_runs"], cell["measured"]) == (20.0, [30.0, 10.0, 20.0], 20.0)
    assert [p["cores"] for p in payload["round_profiles"]["uniform"]] == [1, 4, 7]
    assert payload["profiles"]["uniform"]["cores"] == 1


@pytest.mark.slow  # every cell of a saved run simulated again
def test_a_saved_run_with_a_profile_per_round_is_predicted_again_with_each(tmp_path) -> None:
    doc = json.loads(SAVED.read_text())
    doc["round_profiles"] = {name: [p, p] for name, p in doc["profiles"].items()}
    path = tmp_path / "rounds.json"
    path.write_text(json.dumps(doc))
    assert len(fidelity_saved.load(path).round_profiles["uniform"]) == 2
    again = fidelity.predict_from(str(path))
    before = {(c["scenario"], c["mode"], c["metric"]): c["predicted"] for c in doc["cells"]}
    for cell in again["cells"]:  # the same profile twice: the same prediction twice
        assert cell["predicted_runs"] == [cell["predicted"]] * 2
        assert cell["predicted"] == before[(cell["scenario"], cell["mode"], cell["metric"])]
    assert len(again["round_profiles"]["nexmark-q5"]) == 2
