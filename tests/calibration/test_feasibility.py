"""A profile whose costs the job cannot keep up with is flagged when `calibrate` writes it,
naming the term and its figures; a contended measurement is flagged in the profile and on the
terminal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.calibration import predict
from runtime.calibration.feasibility import TaskRate, cannot_keep_up
from runtime.calibration.machine_load import LoadSampler
from runtime.calibration.profile import CostProfile
from runtime.sim.costs import CostModel, StepCost
from tests.calibration.jobs import small_job


def test_control_cpu_beyond_interval_times_cores_is_named_with_its_figures() -> None:
    profile = CostProfile(cores=1, checkpoint_cpu=0.125)
    (line,) = cannot_keep_up(profile, interval=0.005)
    assert line.startswith("control.checkpoint_cpu: 0.125 s of CPU per checkpoint, one every 0.005 s, is 25 cores' "
                           "worth; the profile has 1 core(s)")
    assert cannot_keep_up(profile, interval=0.5) == []  # 25 % of the core: it keeps up
    assert cannot_keep_up(CostProfile(cores=None, checkpoint_cpu=0.125), interval=0.005) == []  # a core of its own


def test_a_task_slower_per_record_than_the_rate_allows_is_named() -> None:
    profile = CostProfile(steps={"default": StepCost(1e-5, 2e-6), "count": StepCost(1e-5, 300e-6)}, cores=4)
    rates = {"count[0]": TaskRate(records=2500, steps=40), "count[1]": TaskRate(records=2500, steps=40),
             "parse[0]": TaskRate(records=2500, steps=40)}
    assert cannot_keep_up(profile, interval=0.1, rates=rates) == []  # 0.75 s of work per second each
    doubled = {name: TaskRate(r.records * 2, r.steps * 2) for name, r in rates.items()}
    slow = cannot_keep_up(profile, interval=0.1, rates=doubled)
    assert [line.partition(":")[0] for line in slow] == ["steps.count (count[0])", "steps.count (count[1])"]
    assert slow[0] == ("steps.count (count[0]): 300 us of CPU per record x 5,000 records/s + 10 us per step x "
                       "80 steps/s = 1.5 s of work per second at the configured rate: the task cannot keep up")
    # on one core the three tasks together do not fit at the base rate
    (cores,) = cannot_keep_up(CostProfile(steps=profile.steps, cores=1), interval=0.1, rates=rates)
    assert cores.startswith("cores: the tasks need 1.51 cores' worth of CPU at the configured rate and the control "
                            "path 0; the profile has 1 core(s)")
    # 1.5 cores' worth of call handling on a 2-core machine leaves the steps half of their one core
    crowded = CostProfile(steps={"default": StepCost(1e-5, 2e-6), "count": StepCost(1e-5, 100e-6)}, cores=1,
                          machine_cores=2.0, background_cores=1.5)
    assert cannot_keep_up(replace(crowded, background_cores=0.5), interval=0.1, rates=rates) == []  # 0.506 of 1
    (half,) = cannot_keep_up(crowded, interval=0.1, rates=rates)
    assert half.startswith("cores: the tasks need 0.506 cores' worth of CPU at the configured rate and the control "
                           "path 0; the profile has 0.5 core(s) (what the work outside the steps leaves)")


def test_a_window_task_whose_firings_alone_outrun_its_thread_is_named_with_them() -> None:
    profile = CostProfile(steps={"default": StepCost(1e-5, 2e-6), "win": StepCost(1e-5, 2e-6, per_emitted=50e-6)})
    quiet = {"win[0]": TaskRate(records=1000, steps=100, emitted=1000)}
    assert cannot_keep_up(profile, interval=0.1, rates=quiet) == []  # 0.053 s of work per second
    (busy,) = cannot_keep_up(profile, interval=0.1, rates={"win[0]": TaskRate(records=1000, steps=100, emitted=20_000)})
    assert busy == ("steps.win (win[0]): 2 us of CPU per record x 1,000 records/s + 10 us per step x 100 steps/s + "
                    "50 us per fired record x 20,000 fired/s = 1 s of work per second at the configured rate: the "
                    "task cannot keep up")


def test_calibrate_flags_a_profile_whose_control_path_cannot_keep_up() -> None:
    env = small_job(records=600, rate=5000, interval=0.1)
    profile, _ = predict.calibrate(env, "tight", executor="sim", costs=CostModel(cores=1, checkpoint_cpu=0.125))
    assert profile.cores == 1 and profile.checkpoint_cpu >= 0.125
    warnings = profile.calibrated["warnings"]
    assert any(w.startswith("cannot keep up: control.checkpoint_cpu: 0.125 s of CPU per checkpoint, one every "
                            "0.1 s, is 1.25 cores' worth") for w in warnings), warnings
    assert isinstance(profile.calibrated["contended"], bool)
    assert set(profile.calibrated["machine_load"]) >= {"load_average", "other_share", "contended", "cores"}


class _BusyMachine(LoadSampler):
    """The machine of the report: load 20.8 on 2 cores, others taking 70 % of the CPU."""

    def __init__(self, *args, **kwargs) -> None:
        total = iter([0.0, 14.0])
        super().__init__(period=3600, clock=iter([0.0, 10.0]).__next__, loadavg=lambda: 20.8,
                         machine_cpu=lambda: next(total), process_cpu=lambda pid: 0.0,
                         descendants=lambda root: [root], cores=2)


JOB = '''
from tests.calibration.jobs import small_job


def build():
    return small_job(records=600, rate=5000, unaligned=False)
'''


def test_calibrate_on_a_busy_machine_warns_in_the_profile_and_on_the_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.cli import main

    (tmp_path / "busy_job.py").write_text(JOB)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(predict, "LoadSampler", _BusyMachine)
    assert main(["calibrate", "busy_job:build", "--executor", "sim", "-o", "profile.json"]) == 0
    doc = json.loads((tmp_path / "profile.json").read_text())["calibrated"]
    assert doc["contended"] is True
    assert doc["machine_load"]["other_share"] == 0.7 and doc["machine_load"]["load_average"]["during_max"] == 20.8
    assert any("other processes took 70% of the machine's CPU" in w for w in doc["warnings"])
    out = capsys.readouterr().out
    assert "warning: contended measurement: other processes took 70% of the machine's CPU" in out
    assert "the load average reached 20.8 on 2 cores" in out
