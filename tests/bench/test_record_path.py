"""`benchmarks.record_path` drives the page-view UDF job's tasks in one process: every record
reaches the sink once, counted right, and the figures it reports are per side."""

from __future__ import annotations

import json

import pytest

from benchmarks import record_path


@pytest.mark.parametrize("local", [False, True], ids=["network", "local"])
def test_every_record_reaches_the_sink_once_with_its_count(local: bool) -> None:
    pipe = record_path._Pipe(3_000, local)
    source_cpu, count_cpu = pipe.run()
    output = pipe.committer.committed["pv"]
    assert len(output) == 3_000 and source_cpu > 0 and count_cpu > 0
    per_app: dict[str, list[int]] = {}
    for record in output:
        per_app.setdefault(record["app"], []).append(record["count"])
    # each app's counts are 1..n, once each, and the apps' n add up to the input
    assert all(sorted(counts) == list(range(1, len(counts) + 1)) for counts in per_app.values())
    assert sum(len(c) for c in per_app.values()) == 3_000 and len(per_app) == 50


def test_quick_run_writes_the_table_and_medians(tmp_path) -> None:
    assert record_path.main(["--quick", "--records", "2000", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "record_path.json").read_text())
    assert len(payload["runs"]) == 1 and payload["runs"][0]["records"] == 2000
    assert set(payload["median"]) == {"source_rps", "count_rps", "total_rps", "us_per_record"}
    assert (tmp_path / "record_path.md").exists()
