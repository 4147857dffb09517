"""`benchmarks.figures`: the rules that make the plots teach (pure data, no drawing)."""

from __future__ import annotations

from benchmarks.figures import coinciding, figures, stragglers


def _cdf(scale: float) -> list[list[float]]:
    return [[scale * q / 10, q / 10] for q in range(11)]


def test_coinciding_series_are_grouped_and_said_to_coincide() -> None:
    curves = {"none": _cdf(10.0), "aligned": _cdf(10.05), "unaligned": _cdf(20.0)}
    assert coinciding(curves) == [["none", "aligned"]]
    payload = {"rows": [], "series": {f"sim/uniform/{m}": {"latency_cdf": c} for m, c in curves.items()}}
    (figure,) = figures(payload)
    names = [s["name"] for s in figure["panels"][0]["series"]]
    assert names == ["none (= aligned)", "aligned (= none)", "unaligned"]
    assert "Lines that coincide: none = aligned." in figure["caption"]
    assert figure["panels"][0]["x"]["min"] == 0.0  # latencies start at 0


def test_stragglers_are_above_max_of_p95_and_one_and_a_half_medians() -> None:
    assert stragglers([10, 10, 10, 10, 40]) == {4}
    assert stragglers([10, 10, 10, 10, 14]) == set()  # slowest, but under 1.5 x median
    assert stragglers([5.0]) == set()


def _phases(e2e: list[float]) -> dict:
    return {"checkpoint_id": 3, "trigger_time": 0.0, "duration": max(e2e), "unaligned": False, "subtasks": [
        {"task": f"t[{i}]", "start_delay": e - 2, "alignment_duration": 1.0, "sync_duration": 0.0,
         "async_duration": 1.0, "processed_data": 0, "persisted_data": 0, "end_to_end_duration": e,
         "checkpointed_size": 1, "aligned_blocking": True} for i, e in enumerate(e2e)]}


def test_gantt_panels_share_x_and_outline_the_straggler() -> None:
    series = {"sim/backpressure/aligned": {"phases": _phases([4, 4, 4, 40])},
              "sim/backpressure/unaligned": {"phases": _phases([4, 4, 4, 5])}}
    (gantt,) = [f for f in figures({"rows": [], "series": series}) if f["id"].endswith("phases")]
    aligned, unaligned = gantt["panels"]
    assert aligned["x"] == unaligned["x"]  # compared panels share the axis
    outlines = [b for b in aligned["bars"] if b["outline"]]
    assert [b["row"] for b in outlines] == [3] and not any(b["outline"] for b in unaligned["bars"])
    phases = [b for b in aligned["bars"] if b["row"] == 0 and not b["outline"]]
    assert [round(b["x0"], 6) for b in phases] == [0, 2, 3, 3] and phases[-1]["x1"] == 4
