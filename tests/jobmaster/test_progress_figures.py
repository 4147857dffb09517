"""`runtime.jobmaster.lifecycle.progress.progress_figures`: both executors report the same figures under the
same keys (what `barrierflow run` displays)."""

from __future__ import annotations

from typing import Any

from runtime.jobmaster.lifecycle.progress import Phase, progress_figures
from runtime.workloads.scenarios import relay_job

KEYS = ["phase", "records in", "checkpoints completed", "checkpoints aborted", "last checkpoint duration",
        "last alignment time", "restarts"]


def test_the_simulator_reports_the_shared_figures() -> None:
    seen: list[dict[str, Any]] = []
    relay_job(rows=2000).execute("job", executor="sim", progress=seen.append)
    assert seen, "no progress report"
    last = seen[-1]
    assert [k for k in last if k != "virtual time"] == KEYS
    assert last["checkpoints completed"] > 0 and last["last checkpoint duration"].endswith(" ms")


def test_figures_format_times_per_clock() -> None:
    virtual = progress_figures(Phase.RUNNING, clock="virtual time", seconds=0.01234, records_in=5, completed=1,
                               aborted=0, last_duration=0.002, last_alignment=None, restarts=0)
    wall = progress_figures(Phase.RUNNING, clock="wall time", seconds=3.14159, records_in=5, completed=1,
                            aborted=0, last_duration=None, last_alignment=None, restarts=2)
    assert virtual["virtual time"] == "0.0123 s" and virtual["last checkpoint duration"] == "2.00 ms"
    assert virtual["last alignment time"] == "-"
    assert wall["wall time"] == "3.14 s" and wall["last checkpoint duration"] == "-" and wall["restarts"] == 2
    assert [k for k in wall if k != "wall time"] == KEYS
