"""`python -m benchmarks.nexmark` on the simulator, small: a row per query and mode, latency to the
committed output, the files it writes, and the events its rate-limited source reads."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import nexmark as bench
from benchmarks import nexmark_job
from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.generator import NexmarkGenerator
from runtime.workloads.nexmark.source import READ_AHEAD, NexmarkSource
from vocabulary.ports import ManualClock


def test_the_nexmark_source_builds_its_events_ahead_and_hands_out_the_generators() -> None:
    """A rate-limited reader asks for one or two events per read: the source builds them a block
    at a time (`READ_AHEAD`), and hands out exactly the generator's events."""
    config = NexmarkConfig(seed=2)
    source = NexmarkSource(config, 3_000, splits=2, rate=1_000.0)
    generator = NexmarkGenerator(config, 3_000)
    calls = []
    source.rows_fn = lambda idx: calls.append(len(idx)) or generator.records(idx)
    clock = ManualClock()
    reader = source.reader(source.splits()[1], clock)
    got = []
    while not reader.finished():
        got += reader.read(256)
        clock.advance(0.003)
    assert got == generator.records(np.arange(1, 3_000, 2, dtype=np.int64))
    assert calls == [READ_AHEAD, 1_500 - READ_AHEAD]


def test_a_row_per_query_and_mode_with_latency_to_the_commit(tmp_path) -> None:
    out = tmp_path / "out"
    assert bench.main(["--quick", "--query", "q2", "q9", "--modes", "none", "aligned", "unaligned", "--events", "3000",
                       "--seconds", "0.6", "--out", str(out)]) == 0
    payload = json.loads((out / "nexmark.json").read_text())
    assert "partial" not in payload  # the finished run's JSON replaces the one written as it went
    rows = {(r["query"], r["mode"]): r for r in payload["rows"]}
    assert list(rows) == [(q, m) for q in ("q2", "q9") for m in ("none", "aligned", "unaligned")]
    for (query, mode), row in rows.items():
        assert row["status"] == "ok" and row["throughput"] > 0 and row["scenario"] == f"nexmark-{query}", row
        if mode == "none":  # output committed only at the end of input: no commit latency
            assert row["latency_p50"] is None and row["checkpoints_completed"] == 0
        else:
            # committed at a checkpoint's completion, at most an interval and a checkpoint after creation
            assert 0 < row["latency_p50"] <= row["latency_p99"] < 1000, row
            assert row["checkpoints_completed"] > 0 and row["state_bytes"] > 0
    # q9's output comes from timers at each auction's expiry: later than q2's, which comes with its bid
    assert rows[("q9", "aligned")]["latency_p50"] > rows[("q2", "aligned")]["latency_p50"]
    assert rows[("q2", "unaligned")]["persisted_bytes_p50"] is not None
    for name in ("nexmark.md", "report.html", "sim-nexmark-q9-latency.png", "sim-nexmark-q9-durations.png"):
        assert (out / name).exists(), name
    assert "| sim | q9 | aligned | ok |" in (out / "nexmark.md").read_text()


def test_add_to_puts_the_query_rows_next_to_the_checkpoint_modes_scenarios(tmp_path) -> None:
    modes = tmp_path / "modes" / "checkpoint_modes.json"
    modes.parent.mkdir()
    uniform = {"executor": "sim", "scenario": "uniform", "mode": "aligned", "status": "ok", "throughput": 1.0}
    modes.write_text(json.dumps({"benchmark": "checkpoint_modes", "rows": [uniform], "series": {}}))
    args = ["--quick", "--query", "q1", "--modes", "aligned", "--events", "2000", "--seconds", "0.5", "--no-plots"]
    for _ in range(2):  # a second run replaces the query rows, never doubles them
        assert bench.main([*args, "--out", str(tmp_path / "out"), "--add-to", str(modes)]) == 0
    rows = json.loads(modes.read_text())["rows"]
    assert [(r["scenario"], r["mode"]) for r in rows] == [("uniform", "aligned"), ("nexmark-q1", "aligned")]
    assert "| sim | nexmark-q1 | aligned | ok |" in (modes.parent / "checkpoint_modes.md").read_text()


def test_a_stopped_run_keeps_the_rows_it_finished(tmp_path, monkeypatch) -> None:
    """The JSON is written after every run: stopped during its second combination, a run leaves
    the first one's row, marked partial."""
    finished = []
    run_one = bench.run_combination

    def stopped_at_the_second(*args, **kwargs):
        if finished:
            raise KeyboardInterrupt
        finished.append(run_one(*args, **kwargs))
        return finished[-1]

    monkeypatch.setattr(bench, "run_combination", stopped_at_the_second)
    out = tmp_path / "out"
    try:
        bench.main(["--quick", "--query", "q1", "q2", "--modes", "aligned", "--events", "2000", "--seconds", "0.5",
                    "--no-plots", "--out", str(out)])
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the second combination should have stopped the run")
    payload = json.loads((out / "nexmark.json").read_text())
    assert payload["partial"]
    assert [(r["query"], r["mode"], r["status"]) for r in payload["rows"]] == [("q1", "aligned", "ok")]
    assert payload["rows"][0]["throughput"] == finished[0].row["throughput"]


def test_each_round_runs_whole_before_the_next_and_after_round_follows_it() -> None:
    """Rounds interleave with a peer's: `after_round(r)` runs once round r's runs are done and
    before round r + 1 starts; the simulator runs in the first round only (it is deterministic)."""
    from runtime.workloads.nexmark.config import NexmarkConfig as Config

    combos = bench.plan(["sim"], ["q1"], ["none", "aligned"], 2)
    profile = bench.Profile(seconds=0.3, events=1_000, warmup=0.1)
    seen: list[tuple] = []
    merged = bench.run_matrix(combos, {"sim": profile}, Config(), {"sim": 1_000}, 3,
                              on_run=lambda combo, outcome: seen.append(("run", combo.mode)),
                              after_round=lambda r: seen.append(("round", r)))
    assert seen == [("run", "none"), ("run", "aligned"), ("round", 0), ("round", 1), ("round", 2)]
    assert [(o.row["query"], o.row["mode"], len(runs)) for o, runs in merged] == [("q1", "none", 1),
                                                                                  ("q1", "aligned", 1)]


def _ran(running_since: float | None) -> SimpleNamespace:
    return SimpleNamespace(metrics=SimpleNamespace(running_since=running_since))


def test_a_paced_run_that_started_after_its_first_event_was_due_runs_again_with_the_lead_it_took(
        monkeypatch) -> None:
    # on Ray with an actor per subtask q8's tasks ran 7.5 s after submission against a 3 s lead:
    # 4.5 s of events were a backlog read at full speed, inside the measured window
    clock = iter([100.0, 200.0, 300.0])
    monkeypatch.setattr(nexmark_job.time, "time", lambda: next(clock))
    monkeypatch.setattr(nexmark_job, "_measured_leads", {})
    anchors: list[float] = []
    runs = iter([7.5, 1.0, 1.0])  # each run's start, seconds after submission

    def run(anchor: float) -> SimpleNamespace:
        anchors.append(anchor)
        submitted = anchor - (3.0 if len(anchors) == 1 else 8.5)
        return _ran(submitted + next(runs))

    result, anchor = nexmark_job.on_time(run, 3.0, "nexmark-q8/aligned")
    assert anchors == [103.0, 200.0 + 7.5 + nexmark_job.LEAD_MARGIN] and anchor == anchors[-1]
    assert result.metrics.running_since < anchor
    # the next run of the job starts with the lead it needed; another job with its own
    anchors.clear()
    nexmark_job.on_time(run, 3.0, "nexmark-q8/aligned")
    assert anchors == [300.0 + 8.5]


def test_a_paced_run_late_even_with_the_measured_lead_is_an_error_naming_the_job(monkeypatch) -> None:
    monkeypatch.setattr(nexmark_job, "_measured_leads", {})
    with pytest.raises(nexmark_job.LateStartError, match=r"calibrate nexmark-q5: the paced run's tasks started "
                                                         r"\d+\.\d s after submission, 5\.0 s after its first event"):
        nexmark_job.on_time(lambda anchor: _ran(anchor + 5.0), 2.0, "calibrate nexmark-q5")
    # a run on the simulator (no start time) or on time is taken as it is
    assert nexmark_job.on_time(lambda anchor: _ran(None), 2.0, "sim")[0].metrics.running_since is None


def test_a_paced_run_that_returns_more_than_its_result_is_judged_by_the_result_inside(monkeypatch) -> None:
    # the calibration's run returns (result, job graph): on_time hands both back, judged by the result
    monkeypatch.setattr(nexmark_job, "_measured_leads", {})
    runs = iter([(1.0, "late graph"), (-1.0, "on-time graph")])  # (start after the anchor, graph)

    def run(anchor: float) -> tuple[SimpleNamespace, str]:
        after, graph = next(runs)
        return _ran(anchor + after), graph

    (result, graph), anchor = nexmark_job.on_time(run, 2.0, "calibrate nexmark-q8", result_of=lambda ran: ran[0])
    assert graph == "on-time graph" and result.metrics.running_since < anchor
