"""`python -m benchmarks.fidelity` on the simulator (`--measure sim`, tiny runs): its flags, the
JSON's shape, and the comparison arithmetic."""

from __future__ import annotations

import json

from benchmarks import fidelity


def test_sim_self_check_writes_every_cell_and_the_two_scores(tmp_path) -> None:
    path = tmp_path / "f.json"
    assert fidelity.main(["--measure", "sim", "--quick", "--scenario", "uniform", "--modes", "aligned", "unaligned",
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
