"""What `barrierflow demo` and `barrierflow run` show of a running and a finished job: the progress
and phase (`runtime.jobmaster.lifecycle.progress`) while it runs — a live table on a terminal, a plain line
a second otherwise —, then each restart with its cause and the checkpoint it resumed from, the
checkpoint of an earlier execution a restored run started from, high availability, and the
demo's summary figures."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

__all__ = ["JobProgress", "checkpoint_rows", "execute_with_progress", "high_availability_line", "restart_lines",
           "shown", "started_from", "summary_figures"]


def shown(value: Any) -> str:
    """A progress or summary figure for people: whole numbers with thousands separators."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


class JobProgress:
    """Shows a running job's progress and phase (`runtime.jobmaster.lifecycle.progress.Phase`): on a terminal, a live
    table (`render`, redrawn by `rich.live.Live` with the seconds ticking, so a phase without
    reports does not look frozen); otherwise one plain line about every `every` seconds and at
    each phase change."""

    def __init__(self, out: Console, live: bool, every: float = 1.0) -> None:
        self.out = out
        self.live = live
        self.every = every
        self.started = time.perf_counter()
        self._printed_at: float | None = None
        self._figures: dict[str, Any] = {}
        #: the phases reported, in order (a phase entered again is listed again)
        self.phases: list[str] = []

    def __call__(self, info: dict[str, Any]) -> None:
        wall = time.perf_counter() - self.started
        phase = str(info.get("phase", "running"))
        changed = not self.phases or phase != self.phases[-1]
        if changed:
            self.phases.append(phase)
        figures = {k: v for k, v in info.items() if k != "phase"}
        records = info.get("records in")
        if isinstance(records, int) and wall > 0:
            figures["records/s (wall)"] = round(records / wall)
        self._figures = figures
        if not self.live and (changed or self._printed_at is None or wall - self._printed_at >= self.every):
            self._printed_at = wall
            text = ", ".join(f"{k} {shown(v)}" for k, v in figures.items())
            self.out.print(f"[{wall:6.1f} s] {phase}: {text}", soft_wrap=True, highlight=False, markup=False)

    def render(self) -> Table:
        """The live table: the phase and seconds since the start, then the latest figures."""
        wall = time.perf_counter() - self.started
        table = Table(title=f"{self.phases[-1] if self.phases else 'starting'} ({wall:.1f} s)", show_header=False)
        for key, value in self._figures.items():
            table.add_row(key, shown(value))
        return table


def execute_with_progress(env: Any, job_name: str, out: Console, **kwargs: Any) -> tuple[Any, JobProgress]:
    """`env.execute(job_name, **kwargs)` showing its progress on `out` (live on a terminal).

    Returns:
        The `JobResult` and the progress display (its `phases`).
    """
    progress = JobProgress(out, live=out.is_terminal)
    with Live(console=out, get_renderable=progress.render, refresh_per_second=4, transient=True) \
            if progress.live else contextlib.nullcontext():
        result = env.execute(job_name, progress=progress, **kwargs)
    return result, progress


def restart_lines(result: Any, crashes: int) -> list[str]:
    """Each restart with its cause and the checkpoint it resumed from, and why restarts and the
    `crashes` injected can differ."""
    restored = result.restored_checkpoints[1 if result.restored_from is not None else 0:]
    lines = []
    for number, failure in enumerate(result.failures, 1):
        resumed = restored[number - 1] if number <= len(restored) else None
        origin = f"checkpoint {resumed}" if resumed is not None else "the start (no checkpoint completed yet)"
        lines.append(f"restart {number}: {failure} -> resumed from {origin}")
    if result.restarts > crashes:
        lines.append(f"{crashes} crash(es) were planned; the other restarts had the causes listed above")
    elif result.restarts < crashes:
        lines.append(
            f"{crashes} crash(es) were planned and the job restarted {result.restarts} time(s): a restart is one "
            "failover (every task cancelled and redeployed from the latest completed checkpoint). Each planned "
            "crash strikes its task once that task has handled a set fraction of an even share of the records, or "
            "at the end of its input if it handles fewer; crashes that strike before the failover of an earlier "
            "one has redeployed the tasks are recovered by that same failover.")
    return lines


def started_from(result: Any) -> str | None:
    """Where a restored run started (`env.restore_from`), one line; None: it did not restore."""
    if result.restored_from is None:
        return None
    return f"restored from {result.restored_from.describe(result.parallelism)}"


def high_availability_line(result: Any) -> str | None:
    """Whether the coordinators were highly available, how, and how often a standby took over."""
    if result.high_availability is None:
        return None
    return f"high availability: {result.high_availability}; standby coordinators promoted: {result.promotions}"


def summary_figures(result: Any) -> dict[str, Any]:
    """A run's figures, as numbers (the demo's summary and `--json` both show these)."""
    completed = [c for c in result.checkpoints if c.completed]
    durations = sorted(c.duration for c in completed)
    persisted = [c.persisted_bytes for c in completed]
    return {
        "records_read": result.metrics.records_in,
        "records_committed": len(result.output("pv")),
        "job_time_s": result.metrics.duration,
        "restarts": result.restarts,
        "checkpoints_completed": len(completed),
        "checkpoints_aborted": len(result.checkpoints) - len(completed),
        "checkpoint_duration_p50_ms": durations[len(durations) // 2] * 1e3 if durations else None,
        "checkpoint_duration_max_ms": durations[-1] * 1e3 if durations else None,
        "alignment_time_max_ms": max(c.alignment_time for c in completed) * 1e3 if completed else None,
        "persisted_bytes_total": sum(persisted),
        "persisted_bytes_max": max(persisted, default=0),
    }


def checkpoint_rows(figures: dict[str, Any]) -> dict[str, str]:
    """The checkpoint rows of the summary and of the unaligned comparison, for people."""
    rows = {"checkpoints completed / aborted":
            f"{figures['checkpoints_completed']:,} / {figures['checkpoints_aborted']:,}"}
    if figures["checkpoints_completed"]:
        rows["checkpoint duration p50 / max"] = (f"{figures['checkpoint_duration_p50_ms']:,.2f} / "
                                                 f"{figures['checkpoint_duration_max_ms']:,.2f} ms")
        rows["alignment time max"] = f"{figures['alignment_time_max_ms']:,.2f} ms"
        rows["persisted in-flight data total / max"] = (f"{figures['persisted_bytes_total']:,} / "
                                                        f"{figures['persisted_bytes_max']:,} bytes")
    return rows
