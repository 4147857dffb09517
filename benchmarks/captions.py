"""Captions of the checkpoint-modes figures, computed from the figures' own data.

A caption says what the plot below it shows, in numbers read from the same points, bars and
events the plot draws (never from a table or from what the scenario was designed to show), and a
comparison only when those numbers bear it out: a fixed "nothing queues" above a plot where 40 %
of records waited 2-10 s is what this module exists to prevent. A figure whose data say nothing
gets no caption (""). Rows measured at a load above the core count are named (`contention_note`),
as their wall-clock figures include other processes' work.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

#: one mode's figure is "N x" another's only when they differ by at least this factor
APART = 2.0


def _ms(value: float) -> str:
    return f"{value:,.1f} ms" if value < 10_000 else f"{value / 1e3:,.1f} s"


def quantile(points: Sequence[Sequence[float]], q: float) -> float:
    """The latency at cumulative fraction `q` of a CDF drawn as (latency, fraction) points: the
    first point reaching `q`."""
    for x, fraction in points:
        if fraction >= q - 1e-12:
            return float(x)
    return float(points[-1][0])


def share_above(points: Sequence[Sequence[float]], bound: float) -> float:
    """The fraction of records whose latency exceeds `bound` (from the CDF points)."""
    below = max((fraction for x, fraction in points if x <= bound), default=0.0)
    return max(0.0, 1.0 - below)


def latency_caption(curves: Mapping[str, Sequence[Sequence[float]]], same: Sequence[Sequence[str]] = ()) -> str:
    """Per mode the median and p99 read off its CDF; how many records waited more than ten times
    the fastest mode's median; which modes' p99 is `APART` times another's; which lines coincide."""
    if not curves:
        return ""
    p50 = {m: quantile(points, 0.5) for m, points in curves.items()}
    p99 = {m: quantile(points, 0.99) for m, points in curves.items()}
    parts = ["p50 / p99: " + ", ".join(f"{m} {_ms(p50[m])} / {_ms(p99[m])}" for m in curves) + "."]
    floor = min(p50.values())
    if floor > 0:
        slow = {m: share_above(points, 10 * floor) for m, points in curves.items()}
        waited = [f"{m} {share:.0%}" for m, share in slow.items() if share >= 0.01]
        if waited:
            parts.append(f"Records that took over 10x the lowest median ({_ms(10 * floor)}): {', '.join(waited)}.")
    fastest = min(p99, key=lambda m: (p99[m], m))
    apart = [m for m in p99 if p99[fastest] > 0 and p99[m] >= APART * p99[fastest]]
    if apart:
        parts.append(", ".join(f"{m}'s p99 is {p99[m] / p99[fastest]:.1f}x" for m in apart) + f" {fastest}'s.")
    if same:
        parts.append("Lines that coincide: " + "; ".join(" = ".join(g) for g in same) + ".")
    return " ".join(parts)


def durations_caption(durations: Mapping[str, Sequence[float]], aborted: Mapping[str, int] | None = None) -> str:
    """Per mode the median and longest of the completed checkpoints plotted (ms), the aborted ones,
    and which modes' median is `APART` times shorter than another's."""
    done = {m: sorted(v) for m, v in durations.items() if v}
    if not done:
        return ""
    median = {m: statistics.median(v) for m, v in done.items()}
    parts = ["Completed checkpoints, median / longest: "
             + ", ".join(f"{m} {_ms(median[m])} / {_ms(v[-1])} ({len(v)})" for m, v in done.items()) + "."]
    if aborted and any(aborted.values()):
        parts.append("Aborted: " + ", ".join(f"{m} {n}" for m, n in aborted.items() if n) + ".")
    slowest = max(median, key=lambda m: (median[m], m))
    shorter = [m for m in median if median[m] > 0 and median[slowest] >= APART * median[m]]
    if shorter:
        parts.append(", ".join(f"{m}'s median is {median[slowest] / median[m]:.1f}x shorter" for m in shorter)
                     + f" than {slowest}'s.")
    return " ".join(parts)


def timeline_caption(timelines: Mapping[str, Mapping[str, Any]]) -> str:
    """Per mode: when the last barrier reached a task (and which), when the first and last tasks
    snapshotted, and when the checkpoint completed (ms after its trigger)."""
    parts = []
    for mode, timeline in timelines.items():
        start = timeline["trigger_time"]
        arrivals = [e for e in timeline["events"] if e[1] == "barrier-in"]
        snaps = sorted(((e[3] if e[3] is not None else e[0]) - start) * 1e3 for e in timeline["events"]
                       if e[1] == "snapshot")
        text = f"{mode}: "
        if arrivals:
            last = max(arrivals, key=lambda e: e[0])
            text += f"last barrier in at {_ms((last[0] - start) * 1e3)} ({last[2]}, channel {last[3]}), "
        if snaps:
            text += f"snapshots from {_ms(snaps[0])} to {_ms(snaps[-1])}, "
        parts.append(text + f"completed at {_ms((timeline['end_time'] - start) * 1e3)}")
    return ("; ".join(parts) + ".") if parts else ""


def gantt_caption(rows: Mapping[str, Sequence[Mapping[str, Any]]], stragglers: Mapping[str, Sequence[str]]) -> str:
    """Per mode: the subtask that took longest end to end, its longest phase, and the stragglers.
    `rows`: mode -> the subtasks as drawn (`task`, `end_to_end_duration`, `phases`: name -> ms)."""
    parts = []
    for mode, subtasks in rows.items():
        if not subtasks:
            continue
        slowest = max(subtasks, key=lambda s: (s["end_to_end_duration"], s["task"]))
        phase, length = max(slowest["phases"].items(), key=lambda kv: (kv[1], kv[0]))
        text = (f"{mode}: {slowest['task']} took longest, {_ms(slowest['end_to_end_duration'])} end to end, "
                f"{_ms(length)} of it {phase}")
        if stragglers.get(mode):
            text += f" (stragglers: {', '.join(stragglers[mode])})"
        parts.append(text)
    return ("; ".join(parts) + ".") if parts else ""


def scale_caption(points: Mapping[str, Sequence[Sequence[float]]], same: Sequence[Sequence[str]] = ()) -> str:
    """Per mode the throughput at its lowest and highest parallelism and the ratio."""
    parts = []
    for mode, series in points.items():
        if len(series) < 2:
            continue
        (p0, t0), (p1, t1) = series[0], series[-1]
        parts.append(f"{mode} {t0:,.0f} rec/s at parallelism {p0:g}, {t1:,.0f} at {p1:g} ({t1 / t0:.2f}x)")
    text = ("; ".join(parts) + ".") if parts else ""
    if same:
        text += " Lines that coincide: " + "; ".join(" = ".join(g) for g in same) + "."
    return text.strip()


def contention_note(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """The modes whose row was measured at a load above the core count (`contended`), with the
    load: their wall-clock figures include other processes' work."""
    marked = {m: r for m, r in rows.items() if r.get("contended")}
    if not marked:
        return ""
    listed = ", ".join(f"{m} (load {r.get('load_average', '?')} on {r.get('cores', '?')} cores"
                       + (f", others {r['other_cpu_share']:.0%} of the CPU" if r.get("other_cpu_share") is not None
                          else "") + ")" for m, r in marked.items())
    return f"Measured on a contended machine: {listed}; these figures include other processes' work."


def contended_label(row: Mapping[str, Any]) -> str:
    """" [contended: load X on N cores]" for a row measured at a load above the core count, else ""."""
    if not row.get("contended"):
        return ""
    return f" [contended: load {row.get('load_average', '?')} on {row.get('cores', '?')} cores]"


def machine_cell(row: Mapping[str, Any]) -> str:
    """The table's `machine` cell: the load while a wall-clock row ran, CONTENDED when it was above
    the core count (or others took a quarter of the CPU); empty for the simulator (virtual time)."""
    if row.get("contended") is None:
        return ""
    load = f"load {row.get('load_average', '?')} on {row.get('cores', '?')} cores"
    if not row["contended"]:
        return load
    share = row.get("other_cpu_share")
    return f"CONTENDED: {load}" + (f", others {share:.0%} of the CPU" if share is not None else "")
