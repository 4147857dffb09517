"""benchmarks.transport_cost: the summary of made-up runs, then a quick real run on Ray."""

from __future__ import annotations

import json

import pytest

from benchmarks.transport_cost import main, summary


def _run(round_: int, transport: str, cpu: float) -> dict:
    return {"round": round_, "transport": transport, "payload": "small", "paced": "flat out", "cpu_us": cpu,
            "sender_cpu_us": cpu / 2, "receiver_cpu_us": cpu / 2, "wall_us": cpu, "load_1m": 1.0}


def test_the_summary_gives_medians_with_their_range_and_the_ratio_to_the_socket() -> None:
    rows = summary([_run(0, "ray", 800), _run(0, "socket", 40), _run(1, "ray", 1000), _run(1, "socket", 60),
                    _run(2, "ray", 900), _run(2, "socket", 50)])
    by = {r["transport"]: r for r in rows}
    assert by["ray"]["cpu_us"] == 900 and by["ray"]["cpu_us range"] == "800-1000" and by["ray"]["rounds"] == 3
    assert by["ray"]["cpu vs socket"] == pytest.approx(18.0) and by["socket"]["cpu vs socket"] == 1


@pytest.mark.ray
def test_a_quick_run_delivers_every_call_both_ways_and_writes_the_table_json_and_plot(tmp_path) -> None:
    assert main(["--quick", "--calls", "100", "--rate", "500", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "transport_cost.json").read_text())
    runs = payload["runs"]  # (each run raised had the receiver not got every call and record)
    assert {(r["transport"], r["payload"], r["paced"]) for r in runs} == {
        (t, p, paced) for t in ("ray", "socket") for p in ("credits", "small", "full") for paced in ("flat out", "500/s")}
    assert (tmp_path / "transport_cost.png").stat().st_size > 0
    assert "cpu vs socket" in (tmp_path / "transport_cost.md").read_text()
