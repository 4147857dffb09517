"""`runtime.calibration.machine_load`: when a measurement counts as contended, and what the
sampler adds up (fed made-up figures: the real machine's load cannot be set by a test)."""

from __future__ import annotations

import os

import pytest

from runtime.calibration.machine_load import OTHER_SHARE_LIMIT, LoadSampler, MachineLoad, descendants_of


def _load(**changes) -> MachineLoad:
    quiet = {"cores": 2, "seconds": 10.0, "load_before": 0.5, "load_max": 2.1, "load_after": 1.8,
             "machine_cpu": 19.0, "own_cpu": 18.0}
    return MachineLoad(**{**quiet, **changes})


def test_a_quiet_machine_is_not_contended_even_when_the_job_loads_it() -> None:
    load = _load()  # the job took 18 of 20 CPU seconds: its own load average, nobody else's
    assert load.other_share == pytest.approx(0.05)
    assert load.others_load == pytest.approx(2.1 - 1.8)
    assert not load.contended and load.warnings() == []
    assert load.to_json()["contended"] is False


def test_other_processes_taking_a_quarter_of_the_cpu_make_it_contended() -> None:
    load = _load(machine_cpu=18.0, own_cpu=12.0)  # others: 6 of 20 CPU seconds
    assert load.other_share == pytest.approx(0.3) and load.other_share >= OTHER_SHARE_LIMIT
    (warning,) = load.warnings()
    assert warning == "other processes took 30% of the machine's CPU (6.0 s of 20.0 s on 2 cores) while it ran"
    assert load.to_json()["other_share"] == 0.3 and load.contended


def test_a_load_average_beyond_the_cores_is_contended_without_cpu_figures() -> None:
    load = _load(load_before=20.8, load_max=20.8, machine_cpu=None, own_cpu=None)  # no /proc
    assert load.other_share is None
    (warning,) = load.warnings()
    assert "the load average reached 20.8 on 2 cores (20.8 beyond this run's own CPU)" in warning


class _Machine:
    """A scripted machine: load average, total CPU and per-process CPU, changed by the test."""

    def __init__(self) -> None:
        self.now, self.load, self.total = 0.0, 1.0, 100.0
        self.processes: dict[int, float] = {1: 50.0}

    def sampler(self) -> LoadSampler:
        return LoadSampler(period=3600, clock=lambda: self.now, loadavg=lambda: self.load,
                           machine_cpu=lambda: self.total, process_cpu=self.processes.get,
                           descendants=lambda root: sorted(self.processes), root=1, cores=2)


def test_the_sampler_counts_children_born_during_the_run_and_nothing_from_before() -> None:
    machine = _Machine()
    sampler = machine.sampler()
    sampler.start()
    machine.now, machine.load, machine.total = 4.0, 3.0, 108.0
    machine.processes.update({1: 52.0, 7: 3.0})  # the driver +2 s, a worker born meanwhile: 3 s
    sampler.sample()
    machine.now, machine.load, machine.total = 5.0, 2.5, 110.0
    machine.processes[1] = 53.0
    result = sampler.stop()
    assert (result.seconds, result.load_before, result.load_max, result.load_after) == (5.0, 1.0, 3.0, 2.5)
    assert result.own_cpu == pytest.approx(3.0 + 3.0)  # driver 50 -> 53, worker 0 -> 3
    assert result.machine_cpu == pytest.approx(10.0) and result.other_cpu == pytest.approx(4.0)
    assert result.other_share == pytest.approx(0.4) and result.contended


def test_the_real_sampler_sees_this_process() -> None:
    assert os.getpid() in descendants_of(os.getpid())
    with LoadSampler(period=0.05) as sampler:
        sum(i * i for i in range(200_000))
    result = sampler.result
    assert result is not None and result.cores >= 1 and result.seconds > 0
    assert result.own_cpu is None or result.own_cpu >= 0
