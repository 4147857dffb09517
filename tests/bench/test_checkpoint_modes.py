"""Smoke and determinism tests of the checkpoint-modes benchmark (simulator only, small runs)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from benchmarks import checkpoint_modes as cm
from benchmarks import modes_table, peers
from benchmarks.modes_job import KeyedRecords, ScheduledGenerator
from benchmarks.modes_outcome import FIELDS, SINK, Combination, Outcome, measured_since, summarise
from benchmarks.plots import make_plots

# a tiny profile: a few thousand records per run, well under a second each
TINY = cm.replace_profile("sim", True, rate=20_000, duration=0.25, warmup=0.0, max_rate_records=4_000,
                          backpressure_rate=100_000, scale=(1, 2))


@pytest.fixture(autouse=True)
def tiny_profiles(monkeypatch):
    monkeypatch.setitem(cm.PROFILES, ("sim", True), TINY)


@pytest.mark.slow
def test_quick_matrix_on_sim_writes_json_table_and_plots(tmp_path) -> None:
    out = tmp_path / "out"
    json_path = tmp_path / "modes.json"
    rc = cm.main(["--quick", "--executor", "sim", "--scenario", "uniform", "backpressure", "--out", str(out),
                  "--json", str(json_path), "--no-progress"])
    assert rc == 0
    payload = json.loads(json_path.read_text())
    rows = payload["rows"]
    assert [(r["scenario"], r["mode"]) for r in rows] == [
        (s, m) for s in ("uniform", "backpressure") for m in cm.MODES
        if not m.endswith("-debloat") or s == "backpressure"  # debloating matters only under backpressure
    ]
    for row in rows:
        assert row["status"] == "ok", row
        assert set(FIELDS) <= set(row)
        assert row["throughput"] > 0
        assert 0 < row["latency_p50"] <= row["latency_p90"] <= row["latency_p99"] <= row["latency_p99_9"] \
            <= row["latency_max"]
        if row["mode"] == "none":
            assert row["checkpoints_completed"] == 0 and row["checkpoint_duration_p50"] is None
        else:
            assert row["checkpoints_completed"] > 0
            assert row["checkpoint_duration_p50"] <= row["checkpoint_duration_p99"] <= row["checkpoint_duration_max"]
            assert row["state_bytes"] > 0
    by = {(r["scenario"], r["mode"]): r for r in rows}
    # only unaligned checkpoints persist channel state; aligned ones wait for the backlog instead
    assert by[("backpressure", "unaligned")]["persisted_bytes"] > 0
    assert by[("backpressure", "aligned")]["persisted_bytes"] == 0
    assert by[("backpressure", "aligned")]["alignment_time_max"] > 0
    assert by[("backpressure", "unaligned")]["checkpoint_duration_p50"] < \
        by[("backpressure", "aligned")]["checkpoint_duration_p50"]
    # debloating: smaller buffers in front of the slow subtask, so aligned barriers wait behind
    # less data and unaligned checkpoints persist less
    assert by[("backpressure", "aligned-debloat")]["checkpoint_duration_p50"] < \
        by[("backpressure", "aligned")]["checkpoint_duration_p50"] / 3
    assert by[("backpressure", "unaligned-debloat")]["persisted_bytes_p50"] < \
        by[("backpressure", "unaligned")]["persisted_bytes_p50"] / 3
    assert by[("backpressure", "aligned-debloat")]["debloated_buffer_size"] < TINY.buffer_size
    assert by[("backpressure", "aligned")]["debloated_buffer_size"] is None
    table = (out / "checkpoint_modes.md").read_text()
    assert "| sim | backpressure | unaligned | ok |" in table
    pngs = sorted(p.name for p in out.glob("*.png"))
    # uniform: only its latency CDF (its durations, timeline and phases repeat each other's: ~5 ms)
    assert pngs == sorted([
        "sim-uniform-latency.png", "sim-backpressure-latency.png", "sim-backpressure-durations.png",
        "sim-backpressure-timeline.png", "sim-backpressure-phases.png",
    ])
    assert (out / "report.html").stat().st_size > 10_000
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    timeline = payload["series"]["sim/backpressure/aligned"]["timeline"]
    kinds = {e[1] for e in timeline["events"]}
    assert kinds == {"barrier-in", "snapshot", "ack"}
    # every task acknowledged the chosen checkpoint, after it was triggered and before it completed
    acks = [e for e in timeline["events"] if e[1] == "ack"]
    assert len({e[2] for e in acks}) == 4
    assert all(timeline["trigger_time"] <= e[0] <= timeline["end_time"] for e in acks)


@pytest.mark.slow
def test_the_same_sim_scenario_twice_gives_identical_numbers() -> None:
    combo = Combination("sim", "backpressure", "aligned-timeout", 2)
    first = cm.run_combination(combo, TINY)
    second = cm.run_combination(combo, TINY)
    assert first.row == second.row
    assert first.latency_cdf == second.latency_cdf
    assert first.checkpoints == second.checkpoints
    assert first.timeline == second.timeline
    assert first.row["checkpoints_completed"] > 0


@pytest.mark.slow
def test_scale_runs_each_parallelism_and_reuses_uniform_for_the_default_one() -> None:
    combos = cm.plan(["sim"], ["uniform", "scale"], ["aligned"], quick=True)
    assert [(c.scenario_label, c.parallelism) for c in combos] == [("uniform", 2), ("scale-p1", 1), ("scale-p2", 2)]
    outcomes = cm.run_matrix(combos, quick=True, show_progress=False)
    uniform, p1, p2 = (o.row for o in outcomes)
    assert p2 == {**uniform, "scenario": "scale-p2"}
    assert p1["parallelism"] == 1 and p1["status"] == "ok" and p1["throughput"] != uniform["throughput"]


def test_keys_are_deterministic_and_zipf_is_skewed() -> None:
    uniform, zipf = KeyedRecords(64), KeyedRecords(64, zipf_s=1.2)
    assert [uniform(i) for i in range(50)] == [KeyedRecords(64)(i) for i in range(50)]
    counts_u: dict[str, int] = {}
    counts_z: dict[str, int] = {}
    for i in range(20_000):
        counts_u[uniform(i)["key"]] = counts_u.get(uniform(i)["key"], 0) + 1
        counts_z[zipf(i)["key"]] = counts_z.get(zipf(i)["key"], 0) + 1
    assert len(counts_u) == 64 and max(counts_u.values()) < 2 * 20_000 / 64
    assert counts_z["k0"] > 0.15 * 20_000 and counts_z["k0"] == max(counts_z.values())
    with pytest.raises(ValueError, match="keys"):
        KeyedRecords(0)


def test_open_loop_stamps_are_the_schedule_not_the_read_time() -> None:
    from vocabulary.ports import ManualClock

    source = ScheduledGenerator(count=10, rate=100.0, splits=1)
    clock = ManualClock(0.0)
    reader = source.reader(source.splits()[0], clock)
    clock.advance(0.05)  # the source was busy: 6 records are due, the first since t=0
    records = reader.read(100)
    assert [r["i"] for r in records] == list(range(6))
    assert [r["created_at"] for r in records] == pytest.approx([k / 100.0 for k in range(6)])


def test_a_failing_combination_is_a_row_saying_so(monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("no cluster here")

    monkeypatch.setattr(cm, "run_combination", boom)
    outcomes = cm.run_matrix([Combination("sim", "uniform", "aligned", 2)], quick=True, show_progress=False)
    row = outcomes[0].row
    assert row["status"] == "failed: RuntimeError: no cluster here"
    assert row["throughput"] is None and row["latency_p99"] is None
    assert "failed: RuntimeError" in modes_table.render_table([row])


def test_targets_report_ratios_with_a_reason() -> None:
    rows = [
        {"executor": "sim", "scenario": "backpressure", "mode": "aligned", "checkpoint_duration_p50": 100.0,
         "latency_p99": 50.0},
        {"executor": "sim", "scenario": "backpressure", "mode": "unaligned", "checkpoint_duration_p50": 5.0,
         "latency_p99": 40.0},
        {"executor": "sim", "scenario": "slow-channel", "mode": "aligned", "latency_p99": 30.0,
         "alignment_time_p50": 28.0},
        {"executor": "sim", "scenario": "slow-channel", "mode": "unaligned", "latency_p99": 10.0},
        {"executor": "sim", "scenario": "slow-channel", "mode": "at-least-once", "latency_p99": 20.0},
        {"executor": "ray", "scenario": "uniform", "mode": "none", "throughput": 1000.0},
        {"executor": "ray", "scenario": "uniform", "mode": "aligned", "throughput": 850.0},
    ]
    lines = cm.targets(rows)
    assert len(lines) == 3  # the backpressure latency target is gone: under saturation p99 is the queue
    assert any("= 0.050 (target <= 0.1: met; in-flight data persisted per checkpoint (p50): unaligned 0 B" in line
               for line in lines)
    slow = next(line for line in lines if "slow-channel" in line)
    assert "3.0x unaligned" in slow and "1.5x at-least-once" in slow and "NOT met" in slow
    assert "alignment p50 per checkpoint: aligned 28.0 ms, unaligned 0.0 ms, at-least-once 0.0 ms" in slow
    assert any("cost 15.0%" in line and "NOT met" in line for line in lines)


@pytest.mark.slow
def test_slow_channel_aligned_waits_for_the_late_barrier_and_the_others_do_not() -> None:
    profile = replace(TINY, link_delay=0.03)
    rows = {mode: cm.run_combination(Combination("sim", "slow-channel", mode, 2), profile).row
            for mode in ("aligned", "unaligned", "at-least-once")}
    for row in rows.values():
        assert row["status"] == "ok" and row["checkpoints_completed"] > 0
    # aligned: the fast channels wait ~ the link's 30 ms for each checkpoint's late barrier
    assert 25 <= rows["aligned"]["alignment_time_p50"] <= 35
    assert rows["unaligned"]["alignment_time_max"] == rows["at-least-once"]["alignment_time_max"] == 0
    assert rows["aligned"]["latency_p99"] >= 2 * rows["unaligned"]["latency_p99"]
    assert rows["aligned"]["latency_p99"] >= 2 * rows["at-least-once"]["latency_p99"]
    # the remote source's own records (0.25 %) are late in every mode: they show at p99.9
    for row in rows.values():
        assert row["latency_p99_9"] >= 30
    line = next(line for line in cm.targets(list(rows.values())) if "slow-channel" in line)
    assert "(target >= 2x both: met;" in line


@pytest.mark.slow
def test_plots_redraw_from_saved_json(tmp_path) -> None:
    combo = Combination("sim", "backpressure", "unaligned", 2)
    payload = cm.payload_of([cm.run_combination(combo, TINY)], {})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(payload, default=str))
    from benchmarks.plots import main as plots_main

    assert plots_main([str(path), "--out", str(tmp_path / "png")]) == 0
    assert sorted(os.listdir(tmp_path / "png")) == [
        "sim-backpressure-durations.png", "sim-backpressure-latency.png", "sim-backpressure-phases.png",
        "sim-backpressure-timeline.png",
    ]
    assert make_plots({"rows": [], "series": {}}, str(tmp_path / "empty")) == []


def test_peers_without_the_extra_say_how_to_install(monkeypatch, capsys) -> None:
    monkeypatch.setattr(peers, "available", lambda: {"flink": False, "bytewax": False})
    assert peers.main([]) == 0
    assert "pip install -e .[peers]" in capsys.readouterr().out
    assert peers.run_peers(quick=True) == []


@pytest.mark.slow
def test_cli_has_a_bench_subcommand(tmp_path) -> None:
    from runtime.cli import main as cli_main

    rc = cli_main(["bench", "--quick", "--executor", "sim", "--scenario", "uniform", "--modes", "none",
                   "--out", str(tmp_path), "--no-plots", "--no-progress"])
    assert rc == 0
    rows = json.loads((tmp_path / "checkpoint_modes.json").read_text())["rows"]
    assert [(r["executor"], r["scenario"], r["mode"], r["status"]) for r in rows] == [("sim", "uniform", "none", "ok")]


def _fake_row(combo, *, throughput, p99, status="ok", reasons=None) -> dict:
    row = {f: None for f in FIELDS}
    row.update(executor=combo.executor, scenario=combo.scenario_label, mode=combo.mode,
               parallelism=combo.parallelism, status=status, throughput=throughput, latency_p99=p99,
               checkpoints_completed=5, abort_reasons=reasons or {}, repeats=1)
    return row


def test_repeat_interleaves_the_ray_matrix_and_reports_median_runs(monkeypatch) -> None:
    import runtime.ray.cluster as cluster

    # the scheduling and merging under test; the runs themselves are scripted (no Ray started)
    monkeypatch.setattr(cluster, "ensure_ray", lambda: False)
    script = {"none": iter([(1000.0, 30.0), (900.0, 10.0), (1100.0, 20.0)]),
              "aligned": iter([(850.0, 40.0), (880.0, 50.0), (1050.0, 60.0)])}
    calls = []

    def fake_run(combo, profile):
        calls.append((combo.executor, combo.mode))
        if combo.executor == "sim":
            return Outcome(row=_fake_row(combo, throughput=1.0, p99=1.0))
        throughput, p99 = next(script[combo.mode])
        reasons = {"expired": 2} if throughput == 880.0 else {}
        return Outcome(row=_fake_row(combo, throughput=throughput, p99=p99, reasons=reasons),
                          latency_cdf=[(p99, 1.0)])

    monkeypatch.setattr(cm, "run_combination", fake_run)
    combos = [Combination("ray", "uniform", "none", 2), Combination("ray", "uniform", "aligned", 2),
              Combination("sim", "uniform", "aligned", 2)]
    none, aligned, sim = cm.run_matrix(combos, quick=True, repeat=3, show_progress=False)
    # repeat by repeat, so the modes a target compares run side by side, each repeat starting at
    # another mode; the simulator once
    assert calls == [("ray", "none"), ("ray", "aligned"), ("sim", "aligned"),
                     ("ray", "aligned"), ("ray", "none"), ("ray", "none"), ("ray", "aligned")]
    assert (none.row["throughput"], none.row["latency_p99"], none.row["repeats"]) == (1000.0, 20.0, 3)
    assert [r["throughput"] for r in none.runs] == [1000.0, 900.0, 1100.0]
    assert none.latency_cdf == [(20.0, 1.0)]  # the plots show the run with the median p99
    assert aligned.row["throughput"] == 880.0 and aligned.row["abort_reasons"] == {}  # 0, 2, 0 -> 0
    assert sim.row["repeats"] == 1 and len(sim.runs) == 1
    lines = cm.targets([o.row for o in (none, aligned, sim)], [o.runs for o in (none, aligned, sim)])
    ray_line = next(line for line in lines if line.startswith("ray uniform"))
    # medians 880/1000 miss the target; repeat by repeat 0.85, 0.978, 0.955
    assert "= 0.880" in ray_line and "NOT met" in ray_line
    assert ray_line.endswith("[medians of 3 repeats; met in 2 of 3 repeats]")


def test_repeat_leaves_failed_runs_out_of_the_medians_and_says_so(monkeypatch) -> None:
    results = iter([1000.0, RuntimeError("actor died"), 800.0])

    def fake_run(combo, profile):
        value = next(results)
        if isinstance(value, Exception):
            raise value
        return Outcome(row=_fake_row(combo, throughput=value, p99=value / 100))

    monkeypatch.setattr(cm, "run_combination", fake_run)
    import runtime.ray.cluster as cluster

    monkeypatch.setattr(cluster, "ensure_ray", lambda: False)
    (outcome,) = cm.run_matrix([Combination("ray", "uniform", "aligned", 2)], quick=True, repeat=3,
                               show_progress=False)
    assert outcome.row["status"] == "ok in 2 of 3 runs; failed: RuntimeError: actor died"
    assert outcome.row["throughput"] == 800.0  # median_low of the two that ran
    assert [r["status"] for r in outcome.runs] == ["ok", "failed: RuntimeError: actor died", "ok"]


def test_repeat_must_be_a_positive_integer(capsys) -> None:
    with pytest.raises(SystemExit):
        cm.main(["--executor", "sim", "--repeat", "0"])
    assert "--repeat must be an integer >= 1, got '0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="repeat must be an integer >= 1"):
        cm.run_matrix([], quick=True, repeat=0, show_progress=False)


def test_the_warm_up_is_left_out_of_latencies_and_checkpoints_and_the_final_checkpoint_too() -> None:
    from types import SimpleNamespace

    from checkpoint.stats import CheckpointStats
    from runtime.jobmaster.result import JobMetrics

    # start-up: the first records waited 500 ms, then 2 ms; one checkpoint during the warm-up; the
    # final one (aligned in every mode, once the sources read their input) is no checkpoint of the mode
    records = [{"created_at": t / 1000, "processed_at": t / 1000 + (0.5 if t < 100 else 0.002)} for t in range(1000)]
    checkpoints = [CheckpointStats(id=1, completed=True, failure_reason=None, trigger_time=0.05, duration=0.3),
                   CheckpointStats(id=2, completed=True, failure_reason=None, trigger_time=0.5, duration=0.01),
                   CheckpointStats(id=3, completed=True, failure_reason=None, trigger_time=1.0, duration=0.2)]
    run = SimpleNamespace(output=lambda name: records, checkpoints=checkpoints, metrics=JobMetrics())
    combo = Combination("sim", "uniform", "aligned", 2)
    since = measured_since(run, 0.2)
    outcome = summarise(combo, run, run, rate=1000.0, records=1000, since=since)
    assert since == pytest.approx(0.2)
    assert outcome.row["latency_max"] == pytest.approx(2.0)
    assert outcome.row["checkpoint_duration_p50"] == pytest.approx(10.0) and outcome.row["checkpoints_completed"] == 1
    assert [p["id"] for p in outcome.checkpoints] == [2]
    everything = summarise(combo, run, run, rate=1000.0, records=1000)
    assert everything.row["latency_max"] == pytest.approx(500.0)


@pytest.mark.slow
def test_backpressure_throughput_run_checkpoints_at_its_own_interval(monkeypatch) -> None:
    # at the 100 ms interval a mode whose checkpoints end sooner runs several times as many: the
    # backpressure throughput columns would compare checkpoint counts, not what a mode costs
    profile = replace(TINY, backpressure_throughput_interval=0.25)
    seen: list[tuple[str, float | None, float]] = []
    real_make_env = cm.make_env

    def spy(combo, profile, storage=None, interval=None):
        env = real_make_env(combo, profile, storage, interval)
        seen.append((combo.scenario, interval, env.checkpoint_config.interval))
        return env

    monkeypatch.setattr(cm, "make_env", spy)
    for scenario in ("backpressure", "uniform"):
        cm.run_combination(Combination("sim", scenario, "aligned", 2), profile)
    # latency run, then throughput run, per scenario
    assert seen == [("backpressure", None, TINY.interval), ("backpressure", 0.25, 0.25),
                    ("uniform", None, TINY.interval), ("uniform", None, TINY.interval)]


@pytest.mark.slow
def test_debloat_target_flag_changes_the_debloating_modes_only(tmp_path) -> None:
    def buffer(target: str | None) -> tuple[int, int | None]:
        argv = ["--quick", "--executor", "sim", "--scenario", "backpressure", "--modes", "aligned",
                "aligned-debloat", "--no-plots", "--no-progress", "--json", str(tmp_path / f"{target}.json")]
        assert cm.main(argv + (["--debloat-target", target] if target else [])) == 0
        by = {r["mode"]: r for r in json.loads((tmp_path / f"{target}.json").read_text())["rows"]}
        return by["aligned-debloat"]["debloated_buffer_size"], by["aligned"]["debloated_buffer_size"]

    default, plain = buffer(None)
    larger, still_plain = buffer(str(TINY.debloat_target * 8))
    assert plain is None and still_plain is None
    assert larger > default  # more seconds in flight: larger buffers


def test_debloat_target_flag_rejects_what_is_not_seconds(capsys) -> None:
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(SystemExit):
            cm.main(["--executor", "sim", "--debloat-target", bad])
        assert f"--debloat-target must be a number of seconds > 0, got {bad!r}" in capsys.readouterr().err


@pytest.mark.slow
def test_the_windowed_join_scenario_pairs_the_records_and_checkpoints_the_open_windows() -> None:
    combo = Combination("sim", "windowed-join", "aligned", 2)
    result = cm.execute(combo, TINY, rate=TINY.rate, count=4_000)
    # record 2n meets 2n + 1 unless a window boundary falls between their due times (50 us apart)
    assert 1_900 <= len(result.output(SINK)) <= 2_000, len(result.output(SINK))
    joined, uniform = (cm.run_combination(Combination("sim", scenario, "aligned", 2), TINY).row
                       for scenario in ("windowed-join", "uniform"))
    assert joined["status"] == "ok" and joined["checkpoints_completed"] > 0
    assert joined["state_bytes"] > 10 * uniform["state_bytes"], (joined["state_bytes"], uniform["state_bytes"])


def test_peers_plan_runs_barrierflow_into_each_sink_and_only_the_variants_named() -> None:
    have = {"flink": True, "bytewax": True}
    plan = peers.run_plan(False, have, ("collect", "discard"), ("barrierflow-udf", "bytewax"))
    names = sorted({(name, fn.__name__, args[-1] if fn is peers.run_barrierflow else None) for name, _, _, _, fn, args in plan})
    assert names == [("barrierflow-udf", "run_barrierflow", "collect"),
                     ("barrierflow-udf-discarding", "run_barrierflow", "discard"), ("bytewax", "run_variant", None)]
    assert [mode for name, mode, *_ in plan if name == "barrierflow-udf-discarding"] == list(peers.BARRIERFLOW_MODES)
    # a system that is not installed has no rows, whatever `only` names
    assert {p[0] for p in peers.run_plan(True, {"flink": False, "bytewax": False}, ("collect",), peers.VARIANTS)} == \
        {"barrierflow-udf", "barrierflow-vectorised"}
