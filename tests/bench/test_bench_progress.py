"""`barrierflow bench`: the simulator only by default, Ray only when asked (saying how long it
takes), and plain progress lines at least every 5 s when the output is not a terminal."""

from __future__ import annotations

import json

import pytest

from benchmarks import checkpoint_modes as cm
from benchmarks.progress_lines import ProgressLines

TINY = cm.replace_profile("sim", True, rate=20_000, duration=0.25, warmup=0.0, max_rate_records=4_000,
                          backpressure_rate=100_000, scale=(1, 2))


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_at_each_start_and_at_least_every_5_seconds_while_a_step_runs() -> None:
    clock, lines = _Clock(), []
    progress = ProgressLines(3, every=5.0, clock=clock, write=lines.append)
    progress.step("sim/uniform/aligned (repeat 1/1)")
    written_at = [clock.now]
    for _ in range(40):  # 20 s of a long step, ticked every 0.5 s as the thread does
        clock.now += 0.5
        before = len(lines)
        progress.tick()
        if len(lines) > before:
            written_at.append(clock.now)
    assert [round(b - a, 6) for a, b in zip(written_at, written_at[1:])] == [5.0, 5.0, 5.0, 5.0]
    assert lines[0] == "[    0.0 s] 0/3 done; running sim/uniform/aligned (repeat 1/1) for 0.0 s"
    assert lines[-1] == "[   20.0 s] 0/3 done; running sim/uniform/aligned (repeat 1/1) for 20.0 s"
    progress.step_done()
    clock.now += 1.0
    progress.step("ray/backpressure/aligned (repeat 2/3)")  # a new step says so at once
    assert lines[-1] == "[   21.0 s] 1/3 done; running ray/backpressure/aligned (repeat 2/3) for 0.0 s"
    progress.step_done()
    progress.finish()
    assert lines[-1] == "[   21.0 s] 2/3 done"
    with pytest.raises(ValueError, match="every must be > 0 seconds"):
        ProgressLines(1, every=0)


@pytest.mark.slow
def test_bench_runs_the_simulator_by_default_and_prints_progress_lines_when_not_on_a_terminal(
        tmp_path, monkeypatch, capsys) -> None:
    from runtime.cli import main

    monkeypatch.setitem(cm.PROFILES, ("sim", True), TINY)
    out = tmp_path / "out"
    assert main(["bench", "--quick", "--scenario", "uniform", "--modes", "none", "aligned", "--out", str(out),
                 "--no-plots"]) == 0
    rows = json.loads((out / "checkpoint_modes.json").read_text())["rows"]
    assert [(r["executor"], r["mode"]) for r in rows] == [("sim", "none"), ("sim", "aligned")]
    assert all(r["contended"] is None and r["load_average"] is None for r in rows)  # virtual time: no load
    printed = capsys.readouterr().out  # captured: not a terminal
    progress = [line for line in printed.splitlines() if line.startswith("[") and " done" in line]
    assert progress[0].endswith("0/2 done; running sim/uniform/none (repeat 1/1) for 0.0 s")
    assert "1/2 done; running sim/uniform/aligned (repeat 1/1)" in progress[1]
    assert progress[-1].endswith("] 2/2 done")
    assert "Ray run(s)" not in printed  # no Ray, no Ray estimate


def test_ray_is_asked_for_and_its_duration_is_said() -> None:
    quick = cm.plan(["ray"], cm.SCENARIOS, cm.MODES, True)
    assert len(quick) == 17  # uniform, slow-channel (5 modes each) and backpressure (7)
    assert cm.ray_estimate(quick, True) == 10 * 20.0 + 7 * 35.0
    assert cm.ray_estimate(quick, True, repeat=3) == 3 * cm.ray_estimate(quick, True)
    assert cm.ray_estimate(cm.plan(["sim"], cm.SCENARIOS, cm.MODES, True), True) == 0
    import argparse

    parser = argparse.ArgumentParser()
    cm.add_arguments(parser)
    assert parser.parse_args([]).executor == "sim"
    text = " ".join(parser.format_help().split())
    assert "about 7 minutes with --quick, measured on 2 cores at load 3" in text
