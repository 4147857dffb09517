"""CPU seconds of a job's processes over a window, from /proc (Linux), and CPU per checkpoint.

`CpuSampler` snapshots the cumulative CPU time (user + system) of the driver and of every worker
process of the local raylet (task, coordinator and service actors, and idle pool workers, which
cost ~0) every `period` seconds on a thread. `window_cpu` takes the first and last snapshots
inside a window and sums the CPU of the processes alive in both (actors start before and die
after a steady window), so the figure is the job's CPU rate while it runs, not start-up or
teardown. `cpu_per_checkpoint` turns two such rates (checkpoints on, off) into seconds per
checkpoint.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from runtime.calibration.machine_load import children_of, cpu_seconds


def raylet_pid() -> int:
    """PID of the raylet of the Ray this driver is connected to (a worker's parent)."""
    import ray

    @ray.remote(num_cpus=0)
    def parent() -> int:
        return os.getppid()

    return ray.get(parent.remote())


def process_role(pid: int) -> str:
    """What a job process is: "driver" (this process), Ray's actor class name ("WorkerActor", from
    the `ray::<name>` title Ray gives its workers) or "other"."""
    if pid == os.getpid():
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            title = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return "other"
    name = title.removeprefix("ray::").split(".")[0].split(" ")[0] if title.startswith("ray::") else ""
    return name if name and name != "IDLE" else "other"


@dataclass(frozen=True)
class Snapshot:
    """Cumulative CPU seconds per PID at wall time `at`; `roles`: `process_role` per PID."""

    at: float
    cpu: dict[int, float]
    roles: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WindowCpu:
    """CPU seconds summed over the processes alive through [start, end] (wall times)."""

    start: float
    end: float
    cpu_s: float
    processes: int
    by_role: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def rate(self) -> float:
        """CPU seconds per second (1.0: one core busy)."""
        return self.cpu_s / self.seconds


def window_cpu(snapshots: Sequence[Snapshot], start: float, end: float) -> WindowCpu:
    """The CPU between the first snapshot at or after `start` and the last at or before `end`.

    Raises:
        ValueError: fewer than two snapshots fall in the window.
    """
    inside = [s for s in snapshots if start <= s.at <= end]
    if len(inside) < 2:
        raise ValueError(f"window [{start:.3f}, {end:.3f}] holds {len(inside)} CPU snapshot(s), needs 2")
    first, last = inside[0], inside[-1]
    both = first.cpu.keys() & last.cpu.keys()
    by_role: dict[str, float] = {}
    for p in both:
        role = last.roles.get(p, "other")
        by_role[role] = by_role.get(role, 0.0) + last.cpu[p] - first.cpu[p]
    return WindowCpu(first.at, last.at, sum(last.cpu[p] - first.cpu[p] for p in both), len(both),
                     dict(sorted(by_role.items())))


def cpu_per_checkpoint(on_rate: float, off_rate: float, checkpoints: int, seconds: float) -> float | None:
    """CPU seconds per checkpoint: the on-minus-off CPU rate (CPU seconds per second) times the
    on window's `seconds`, over the `checkpoints` completed in it. None when none completed."""
    if checkpoints <= 0:
        return None
    return (on_rate - off_rate) * seconds / checkpoints


class CpuSampler:
    """Snapshots the CPU of this process and of `parent`'s children every `period` seconds.

    Use as a context manager around a run; `snapshots` holds the results.
    """

    def __init__(self, parent: int, period: float = 0.1) -> None:
        self.parent, self.period = parent, period
        self.snapshots: list[Snapshot] = []
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def snapshot(self) -> Snapshot:
        cpu = {}
        for pid in (os.getpid(), *children_of(self.parent)):
            seconds = cpu_seconds(pid)
            if seconds is not None:
                cpu[pid] = seconds
                if self._roles.get(pid, "other") == "other":  # a pool worker may become an actor
                    self._roles[pid] = process_role(pid)
        return Snapshot(time.time(), cpu, {p: self._roles[p] for p in cpu})

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.snapshots.append(self.snapshot())

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
