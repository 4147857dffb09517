"""CPU per checkpoint (benchmarks.process_cpu, benchmarks.throughput): the arithmetic, the window
and the JSON shape, on fabricated snapshots and this test's own processes (no Ray)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks import throughput
from benchmarks.process_cpu import (
    CpuSampler,
    Snapshot,
    children_of,
    cpu_per_checkpoint,
    cpu_seconds,
    window_cpu,
)


def test_window_takes_first_and_last_snapshot_inside_and_only_processes_alive_through_it():
    snapshots = [
        Snapshot(9.0, {1: 0.0, 2: 0.0}),  # before the window: ignored
        Snapshot(10.0, {1: 1.0, 2: 5.0, 3: 7.0}),
        Snapshot(11.0, {1: 1.5, 2: 5.2, 3: 7.1}),
        Snapshot(12.0, {1: 2.0, 2: 5.5, 4: 0.3}, {1: "driver", 2: "TaskActor", 4: "TaskActor"}),  # 3 died, 4 started: neither counts
        Snapshot(13.5, {1: 9.0, 2: 9.0}),  # after the window: ignored
    ]
    window = window_cpu(snapshots, 9.5, 12.5)
    assert (window.start, window.end, window.processes) == (10.0, 12.0, 2)
    assert window.cpu_s == pytest.approx(1.0 + 0.5)
    assert window.rate == pytest.approx(0.75)
    assert window.by_role == {"TaskActor": pytest.approx(0.5), "driver": pytest.approx(1.0)}


def test_a_window_without_two_snapshots_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"window \[1.000, 2.000\] holds 1 CPU snapshot"):
        window_cpu([Snapshot(1.5, {1: 0.0}), Snapshot(3.0, {1: 1.0})], 1.0, 2.0)


def test_cpu_per_checkpoint_is_the_extra_cpu_over_the_checkpoints():
    # 1.2 cores with checkpoints, 1.0 without, 5 s holding 50 checkpoints: 0.2 * 5 / 50 = 20 ms each
    assert cpu_per_checkpoint(1.2, 1.0, 50, 5.0) == pytest.approx(0.02)
    assert cpu_per_checkpoint(1.2, 1.0, 0, 5.0) is None


def test_cpu_cost_row_shape_for_the_json():
    on = {"cpu_cores": 1.3, "cpu_window_s": 4.0, "window_checkpoints": 40,
          "cpu_cores_by_role": {"TaskActor": 1.0, "CoordinatorActor": 0.3}}
    off = {"cpu_cores": 1.1, "cpu_window_s": 4.1, "window_checkpoints": 0,
           "cpu_cores_by_role": {"TaskActor": 1.05, "driver": 0.05}}
    cost = throughput.cpu_cost(on, off)
    assert cost == {"cpu_cores_on": 1.3, "cpu_cores_off": 1.1, "window_checkpoints": 40,
                    "cpu_per_checkpoint_ms": pytest.approx(20.0),
                    "cpu_per_checkpoint_ms_CoordinatorActor": pytest.approx(30.0),
                    "cpu_per_checkpoint_ms_TaskActor": pytest.approx(-5.0),
                    "cpu_per_checkpoint_ms_driver": pytest.approx(-5.0)}


def test_cpu_needs_a_steady_rate():
    with pytest.raises(ValueError, match="cpu_of needs a steady rate"):
        throughput.run("sim", 10, checkpoints=True, cpu_of=os.getpid())


def test_cpu_seconds_grow_with_work_and_the_sampler_sees_children():
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) >= before + 0.05
    assert cpu_seconds(2**22 + 7) is None  # beyond pid_max: gone
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in children_of(os.getpid())
        with CpuSampler(os.getpid(), period=0.02) as sampler:
            deadline = time.monotonic() + 10  # on a loaded machine the sampler thread waits for a core
            while len(sampler.snapshots) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert len(sampler.snapshots) >= 2
        assert {os.getpid(), child.pid} <= sampler.snapshots[-1].cpu.keys()
        assert sampler.snapshots[-1].roles[os.getpid()] == "driver"
        assert sampler.snapshots[-1].roles[child.pid] == "other"
    finally:
        child.kill()
        child.wait()
