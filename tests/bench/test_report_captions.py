"""report.html and its figures say what their own numbers say: captions computed from each
plot's data, target explanations from the target's figures, rows measured on a contended machine
marked in the table, the plots and the targets, and no alignment drawn on a source."""

from __future__ import annotations

import re

import pytest

from benchmarks import checkpoint_modes as cm
from benchmarks import modes_table
from benchmarks.captions import quantile
from benchmarks.figures import OUTPUT_WAIT, figures
from benchmarks.html_report import render
from benchmarks.modes_outcome import Combination
from benchmarks.targets import targets

TINY = cm.replace_profile("sim", True, rate=20_000, duration=0.25, warmup=0.0, max_rate_records=4_000,
                          backpressure_rate=100_000)


@pytest.fixture(scope="module")
def payload() -> dict:
    combos = [("slow-channel", "aligned"), ("slow-channel", "unaligned"), ("backpressure", "aligned"),
              ("backpressure", "aligned-timeout"), ("backpressure", "unaligned")]
    outcomes = [cm.run_combination(Combination("sim", s, m, 2), TINY) for s, m in combos]
    return cm.payload_of(outcomes, {"executor": "sim", "quick": True})


def _ms(value: float) -> str:
    return f"{value:,.1f} ms"


@pytest.mark.slow
def test_every_caption_is_read_off_its_own_plot(payload) -> None:
    for figure in figures(payload):
        caption, panels = figure["caption"], figure["panels"]
        kind = figure["id"].rsplit("-", 1)[1]
        if kind == "latency":
            for series in panels[0]["series"]:
                mode = series["name"].split(" ")[0]
                p50, p99 = quantile(series["points"], 0.5), quantile(series["points"], 0.99)
                assert f"{mode} {_ms(p50)} / {_ms(p99)}" in caption, (mode, caption)
        elif kind == "durations":
            for series in (s for s in panels[0]["series"] if s["kind"] == "line"):
                ys = sorted(p[1] for p in series["points"])
                median = (ys[len(ys) // 2] + ys[(len(ys) - 1) // 2]) / 2
                assert f"{series['name']} {_ms(median)} / {_ms(ys[-1])} ({len(ys)})" in caption, caption
        elif kind == "timeline":
            for panel in panels:
                mode = panel["title"].split(":")[0]
                completed = panel["vlines"][0]["x"]
                assert re.search(rf"{re.escape(mode)}: [^;]*completed at {re.escape(_ms(completed))}", caption), caption
        elif kind == "phases":
            for panel in panels:
                mode = panel["title"].split(":")[0]
                ends = {}
                for bar in panel["bars"]:
                    if not bar["outline"]:
                        ends[panel["rows"][bar["row"]]] = max(ends.get(panel["rows"][bar["row"]], 0.0), bar["x1"])
                slowest = max(ends, key=lambda t: ends[t])
                assert f"{mode}: {slowest} took longest" in caption, caption
        assert "nothing queues" not in caption and "Saturated" not in caption


def _latency_payload(slow_share: float) -> dict:
    """uniform on Ray: aligned's records mostly 20 ms, `slow_share` of them 2-10 s."""
    fast = [[20.0, q / 100] for q in range(0, 101 - round(100 * slow_share))]
    slow = [[2000.0 + 8000.0 * i / 40, (100 - round(100 * slow_share) + i) / 100]
            for i in range(1, round(100 * slow_share) + 1)]
    rows = [{"executor": "ray", "scenario": "uniform", "mode": m, "contended": None} for m in ("none", "aligned")]
    return {"rows": rows, "series": {"ray/uniform/none": {"latency_cdf": [[20.0, q / 100] for q in range(101)]},
                                     "ray/uniform/aligned": {"latency_cdf": fast + slow}}}


def test_a_latency_caption_says_how_many_records_waited_instead_of_fixed_text() -> None:
    (figure,) = figures(_latency_payload(0.4))
    caption = figure["caption"]
    assert "Records that took over 10x the lowest median (200.0 ms): aligned 40%." in caption
    assert "aligned 20.0 ms / 9,800.0 ms" in caption and "aligned's p99 is 490.0x none's" in caption
    (quiet,) = figures(_latency_payload(0.0))
    assert "Records that took" not in quiet["caption"]


def test_a_met_target_explains_itself_with_its_own_figures() -> None:
    rows = [
        # the p99 ratio is met while aligned hardly aligned: the line must not claim it blocked
        {"executor": "sim", "scenario": "slow-channel", "mode": "aligned", "latency_p99": 30.0,
         "alignment_time_p50": 0.5},
        {"executor": "sim", "scenario": "slow-channel", "mode": "unaligned", "latency_p99": 10.0,
         "alignment_time_p50": 0.0},
        {"executor": "sim", "scenario": "slow-channel", "mode": "at-least-once", "latency_p99": 12.0,
         "alignment_time_p50": 0.0},
        # uniform cost met while aligned's records queued seconds: the line shows the p99s
        {"executor": "ray", "scenario": "uniform", "mode": "none", "throughput": 1000.0, "latency_p99": 40.0},
        {"executor": "ray", "scenario": "uniform", "mode": "aligned", "throughput": 950.0, "latency_p99": 9800.0},
    ]
    slow, uniform = targets(rows)
    assert "(target >= 2x both: met; alignment p50 per checkpoint: aligned 0.5 ms, unaligned 0.0 ms, " \
           "at-least-once 0.0 ms)" in slow
    assert "block" not in slow
    assert uniform.endswith("(cost 5.0%; target cost <= 10%: met; latency p99 none 40.0 ms / aligned 9,800.0 ms)")
    assert "nothing queues" not in uniform


def _contended(rows: list[dict]) -> list[dict]:
    return [{**r, "load_average": 20.8, "cores": 2, "other_cpu_share": 0.7, "contended": True} for r in rows]


def test_rows_measured_on_a_contended_machine_are_marked_in_table_plots_and_targets(payload) -> None:
    ray = {**payload, "rows": _contended([{**r, "executor": "ray"} for r in payload["rows"]]),
           "series": {k.replace("sim/", "ray/", 1): v for k, v in payload["series"].items()}}
    page = render(ray, columns=modes_table.TABLE_COLUMNS, target_lines=targets(ray["rows"]))
    assert page.count('<tr class="contended">') + page.count('<tr class="sep contended">') == len(ray["rows"])
    assert "CONTENDED: load 20.8 on 2 cores, others 70% of the CPU" in page
    assert f"{len(ray['rows'])} row(s) were measured at a load above the core count" in page
    for figure in figures(ray):
        assert "Measured on a contended machine" in figure["caption"], figure["id"]
        names = [s["name"] for p in figure["panels"] for s in p.get("series", [])] + \
            [p["title"] for p in figure["panels"]]
        assert any("[contended: load 20.8 on 2 cores]" in n for n in names), figure["id"]
    assert all("[contended: " in line for line in targets(ray["rows"]))
    assert "| CONTENDED: load 20.8 on 2 cores, others 70% of the CPU |" in modes_table.render_table(ray["rows"])
    # the simulator's rows are virtual time: never marked
    assert "| CONTENDED: " not in modes_table.render_table(payload["rows"])
    assert not any("contended" in f["caption"] for f in figures(payload))


def test_a_source_has_no_alignment_in_the_phase_plot(payload) -> None:
    phases = payload["series"]["sim/backpressure/aligned-timeout"]["phases"]
    sources = [s for s in phases["subtasks"] if s["source"]]
    assert sources and all(s["task"].startswith("Source: ") for s in sources)
    assert any(s["alignment_duration"] > 0 for s in sources)  # what the stats count between snapshot and write
    (gantt,) = [f for f in figures(payload) if f["id"] == "sim-backpressure-phases"]
    panel = next(p for p in gantt["panels"] if p["title"].startswith("aligned-timeout"))
    for bar in panel["bars"]:
        task = panel["rows"][bar["row"]]
        if task.startswith("Source: ") and not bar["outline"]:
            assert "alignment" not in bar["tip"], bar["tip"]
    assert any(OUTPUT_WAIT in bar["tip"] and bar["x1"] > bar["x0"] for bar in panel["bars"])
    assert OUTPUT_WAIT in [entry["name"] for entry in gantt["legend"]]
