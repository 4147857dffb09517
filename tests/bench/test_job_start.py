"""benchmarks.job_start: the summary of made-up runs, then a quick real run on Ray, where a job
that runs on the actors an earlier job left starts in a fraction of a fresh job's time."""

from __future__ import annotations

import json

import pytest

from benchmarks.job_start import main, summary


def _run(round_: int, mode: str, walls: list[float]) -> dict:
    return {"round": round_, "mode": mode, "jobs": [{"wall_s": w, "cpu_s": 2 * w} for w in walls]}


def test_the_summary_gives_the_first_job_and_the_later_jobs_median_over_the_rounds() -> None:
    rows = summary([_run(0, "nothing kept", [3.0, 3.2, 3.4]), _run(0, "actors kept", [3.1, 0.5, 0.7]),
                    _run(1, "nothing kept", [3.6, 3.0, 3.0]), _run(1, "actors kept", [3.3, 0.9, 0.5])])
    fresh, kept = rows
    assert fresh["mode"] == "nothing kept" and fresh["rounds"] == 2
    assert fresh["first wall_s"] == pytest.approx(3.3) and fresh["first wall_s range"] == "3.00-3.60"
    assert fresh["later wall_s"] == pytest.approx((3.3 + 3.0) / 2)  # each round's median, then theirs
    assert kept["later wall_s"] == pytest.approx((0.6 + 0.7) / 2) and kept["later cpu_s range"] == "1.20-1.40"


@pytest.mark.ray
def test_a_quick_run_writes_the_table_json_and_plot(no_idle_workers, tmp_path) -> None:
    assert main(["--quick", "--records", "500", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "job_start.json").read_text())
    assert {r["mode"] for r in payload["runs"]} == {"nothing kept", "actors kept"}
    assert all(len(r["jobs"]) == 2 for r in payload["runs"])
    assert (tmp_path / "job_start.png").stat().st_size > 0 and "later wall_s" in (tmp_path / "job_start.md").read_text()
    fresh, kept = payload["rows"]
    # a measured property, not a timing bound: the kept job skips five process starts (~5 core-s)
    assert kept["later cpu_s"] < fresh["later cpu_s"] / 2, payload["rows"]
