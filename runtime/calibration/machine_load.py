"""How busy the machine was while something was measured, and whether that disturbed it.

A measurement in wall time (a calibration run, a benchmark row on Ray) is only as good as the
machine was quiet: on a shared machine other processes take cores from the job, and what the job
then measures as its own cost is partly theirs. `LoadSampler` watches a measurement from outside:

* the 1-minute load average (`/proc/loadavg`, `os.getloadavg`) before, during (the highest
  sample) and after;
* the CPU every process of the machine used (`/proc/stat`) and the CPU of this process and its
  descendants (`/proc/<pid>/stat`: the simulator runs in this process, the embedded local Ray's
  processes descend from it), sampled every `period` seconds on a thread so short-lived children
  count; the difference is what *other* processes took.

`MachineLoad.contended` judges the figures (pure, testable with made-up numbers): the others took
at least `OTHER_SHARE_LIMIT` of the machine's CPU, or the load average net of this measurement's
own CPU rate exceeded the cores. The load average alone cannot say it: it counts the measured
job's own runnable threads too (a Ray job on 2 cores raises it by 2-3 by itself).

Without `/proc` (not Linux) the CPU figures are None and only the load average is judged. On a
Ray cluster joined by address the job's processes are not descendants of this one: they count as
others, and the verdict is about this machine only.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: share of the machine's CPU (cores x seconds) other processes may take before a measurement
#: counts as contended
OTHER_SHARE_LIMIT = 0.25


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None: gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields restart after the last ")"
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15)


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process readable in /proc."""
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        found[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    return found


def children_of(parent: int) -> list[int]:
    """PIDs whose parent is `parent`."""
    return sorted(pid for pid, ppid in _parents().items() if ppid == parent)


def descendants_of(root: int) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return sorted(found)


def machine_cpu_seconds() -> float | None:
    """CPU seconds every process of the machine used since boot, from /proc/stat (None: unreadable)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICKS


def usable_cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class MachineLoad:
    """The machine while a measurement ran (see the module docstring); CPU in seconds."""

    cores: int
    seconds: float
    load_before: float
    load_max: float
    load_after: float
    #: CPU of every process of the machine over the measurement (None: not measurable here)
    machine_cpu: float | None = None
    #: CPU of this process and its descendants over the measurement (None: not measurable here)
    own_cpu: float | None = None

    @property
    def other_cpu(self) -> float | None:
        """CPU seconds other processes took."""
        if self.machine_cpu is None or self.own_cpu is None:
            return None
        return max(0.0, self.machine_cpu - self.own_cpu)

    @property
    def other_share(self) -> float | None:
        """`other_cpu` as a share of the machine's CPU over the measurement (0..1)."""
        other = self.other_cpu
        if other is None or self.seconds <= 0:
            return None
        return min(1.0, other / (self.seconds * self.cores))

    @property
    def others_load(self) -> float:
        """The highest load average less this measurement's own CPU rate (cores' worth): what
        else wanted the cores."""
        own_rate = self.own_cpu / self.seconds if self.own_cpu is not None and self.seconds > 0 else 0.0
        return max(0.0, max(self.load_before, self.load_max, self.load_after) - own_rate)

    def warnings(self) -> list[str]:
        """Why the measurement was contended, one sentence per cause (empty: it was not)."""
        out = []
        share = self.other_share
        if share is not None and share >= OTHER_SHARE_LIMIT:
            out.append(f"other processes took {share:.0%} of the machine's CPU ({self.other_cpu:.1f} s of "
                       f"{self.seconds * self.cores:.1f} s on {self.cores} cores) while it ran")
        if self.others_load > self.cores:
            out.append(f"the load average reached {max(self.load_max, self.load_after, self.load_before):.1f} on "
                       f"{self.cores} cores ({self.others_load:.1f} beyond this run's own CPU)")
        return out

    @property
    def contended(self) -> bool:
        return bool(self.warnings())

    def to_json(self) -> dict[str, Any]:
        share = self.other_share
        return {"cores": self.cores, "seconds": round(self.seconds, 3),
                "load_average": {"before": round(self.load_before, 2), "during_max": round(self.load_max, 2),
                                 "after": round(self.load_after, 2)},
                "own_cpu": None if self.own_cpu is None else round(self.own_cpu, 3),
                "other_cpu": None if self.other_cpu is None else round(self.other_cpu, 3),
                "other_share": None if share is None else round(share, 3),
                "contended": self.contended, "warnings": self.warnings()}


class LoadSampler:
    """Measures the machine's load around a block (`with LoadSampler() as sampler: ...`, then
    `sampler.result`), sampling every `period` seconds on a daemon thread.

    Args:
        period: seconds between samples.
        clock, loadavg, machine_cpu, process_cpu, descendants: where the figures come from (the
            real machine by default; tests pass their own).
    """

    def __init__(self, period: float = 0.5, *, clock: Callable[[], float] = time.monotonic,
                 loadavg: Callable[[], float] = lambda: os.getloadavg()[0],
                 machine_cpu: Callable[[], float | None] = machine_cpu_seconds,
                 process_cpu: Callable[[int], float | None] = cpu_seconds,
                 descendants: Callable[[int], list[int]] = descendants_of, root: int | None = None,
                 cores: int | None = None) -> None:
        self.period = period
        self._clock, self._loadavg, self._machine_cpu = clock, loadavg, machine_cpu
        self._process_cpu, self._descendants = process_cpu, descendants
        self._root = os.getpid() if root is None else root
        self._cores = cores if cores is not None else usable_cores()
        self._own: dict[int, float] = {}  # pid -> CPU seconds when first seen (0 for one born during)
        self._own_latest: dict[int, float] = {}
        self._load_max = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.result: MachineLoad | None = None

    def sample(self, *, first: bool = False) -> None:
        """Read the load average and this process tree's CPU once."""
        load = self._loadavg()
        try:
            pids = self._descendants(self._root)
        except OSError:
            pids = [self._root]
        with self._lock:
            self._load_max = max(self._load_max, load)
            for pid in pids:
                seconds = self._process_cpu(pid)
                if seconds is None:
                    continue
                if pid not in self._own:
                    self._own[pid] = seconds if first else 0.0  # born during the measurement: all of it
                self._own_latest[pid] = seconds

    def start(self) -> None:
        self._started = self._clock()
        self._load_before = self._loadavg()
        self._machine_before = self._machine_cpu()
        self.sample(first=True)
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def stop(self) -> MachineLoad:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        machine_after = self._machine_cpu()
        with self._lock:
            own = sum(self._own_latest[pid] - self._own[pid] for pid in self._own_latest) if self._own_latest else None
        machine = machine_after - self._machine_before \
            if machine_after is not None and self._machine_before is not None else None
        self.result = MachineLoad(cores=self._cores, seconds=max(0.0, self._clock() - self._started),
                                  load_before=self._load_before, load_max=self._load_max,
                                  load_after=self._loadavg(), machine_cpu=machine,
                                  own_cpu=own if machine is not None else None)
        return self.result

    def __enter__(self) -> LoadSampler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
