"""The checkpoint-modes figures, as plain data both renderers draw: `benchmarks.plots` (PNG,
matplotlib) and `benchmarks.html_report` (SVG in the browser, interactive).

A figure is a dict: `id`, `title`, `caption` (what the figure's own data show, computed from
them by `benchmarks.captions`; "" when they show nothing worth a line), `panels` and
`share_x` (compared panels share their x axis; y is shared within a panel). A panel has `title`,
`x` and `y` axes (`label`, `min`, `max`; durations and latencies start at 0), optional
`rows` (category labels of a y axis of rows: timelines and Gantt charts), `series` (`name`,
`color`, `kind` "step" | "line" | "points", `marker`, `dash`, `points` [[x, y], ...], optional
`tips` (one hover text per point)), `bars` (`row`, `x0`, `x1`, `color`, `hatch`, `outline`,
`tip`), `vlines` (`x`, `label`) and `legend` (extra entries: `name`, `color`, `hatch`,
`outline`, `marker`).

What is drawn, per executor (figures that would repeat another are left out):

* latency CDF: `uniform` (headroom: every mode alike), `slow-channel` and `backpressure`;
* checkpoint duration over time: `slow-channel` and `backpressure`;
* barrier timeline and phase Gantt of one checkpoint per mode: `slow-channel` and `backpressure`
  (a source has no inputs: the Gantt draws its wait between snapshot and write as output wait,
  never as alignment);
* throughput against parallelism, when `scale` ran.

A row measured on a contended machine (`contended`: a load above the core count) is marked in
its series' names, panel titles and the caption.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks.captions import (
    contended_label,
    contention_note,
    durations_caption,
    gantt_caption,
    latency_caption,
    scale_caption,
    timeline_caption,
)

MODE_ORDER = ("none", "aligned", "unaligned", "aligned-timeout", "at-least-once", "aligned-debloat",
              "unaligned-debloat")
MODE_COLORS = {
    "none": "#7f7f7f", "aligned": "#d62728", "unaligned": "#1f77b4", "aligned-timeout": "#ff7f0e",
    "at-least-once": "#2ca02c", "aligned-debloat": "#9467bd", "unaligned-debloat": "#17becf",
}
PHASES = ("start_delay", "alignment_duration", "sync_duration", "async_duration")
PHASE_COLORS = {"start_delay": "#bdbdbd", "alignment_duration": "#ff7f0e", "sync_duration": "#1f77b4",
                "async_duration": "#2ca02c"}
PHASE_NAMES = {"start_delay": "start delay", "alignment_duration": "alignment (blocking)",
               "sync_duration": "sync", "async_duration": "async"}
#: a source's wait between its snapshot and its write (it has no inputs to align)
OUTPUT_WAIT = "output wait (source)"
#: the colour of each phase as drawn, by its drawn name
NAME_COLORS = {**{PHASE_NAMES[p]: PHASE_COLORS[p] for p in PHASES},
               "alignment (not blocking)": PHASE_COLORS["alignment_duration"], OUTPUT_WAIT: "#8c564b"}
CHANNEL_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
STRAGGLER_COLOR = "#d62728"
#: scenarios whose latency CDF is drawn, and those with per-checkpoint figures
CDF_SCENARIOS = ("uniform", "slow-channel", "backpressure")
DETAIL_SCENARIOS = ("slow-channel", "backpressure")
#: NexMark queries (`benchmarks.nexmark`: scenarios "nexmark-q0", ...): a latency CDF and the
#: checkpoint durations of each
NEXMARK_PREFIX = "nexmark-"
#: series coincide when at every drawn point they are closer than this share of the axis span
#: (lines that close lie on top of each other at any readable size)
COINCIDE = 0.01


def mode_rank(mode: str) -> tuple[int, str]:
    return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), mode)


def _groups(payload: dict[str, Any]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """series by (executor, scenario) -> mode -> series, modes in `MODE_ORDER`."""
    groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for key, series in payload.get("series", {}).items():
        executor, scenario, mode = key.split("/", 2)
        groups.setdefault((executor, scenario), {})[mode] = series
    return {key: dict(sorted(modes.items(), key=lambda kv: mode_rank(kv[0]))) for key, modes in groups.items()}


def _row(payload: dict[str, Any], executor: str, scenario: str, mode: str) -> dict[str, Any]:
    for row in payload.get("rows", []):
        if (row.get("executor"), row.get("scenario"), row.get("mode")) == (executor, scenario, mode):
            return row
    return {}


def _time_unit(executor: str) -> str:
    return "virtual ms" if executor == "sim" else "ms"


def _join(*parts: str) -> str:
    """Caption parts, the empty ones left out."""
    return " ".join(p for p in parts if p)


# ---------------------------------------------------------------------------- latency CDF


def coinciding(curves: dict[str, list[list[float]]]) -> list[list[str]]:
    """Groups (of two or more) of series whose CDFs lie on top of each other."""
    groups: list[list[str]] = []
    for name, points in curves.items():
        for group in groups:
            if _same_curve(curves[group[0]], points):
                group.append(name)
                break
        else:
            groups.append([name])
    return [g for g in groups if len(g) > 1]


def _same_curve(a: list[list[float]], b: list[list[float]]) -> bool:
    if len(a) != len(b):
        return False
    span_x = max((abs(p[0]) for p in a + b), default=0.0) or 1.0
    span_y = max((abs(p[1]) for p in a + b), default=0.0) or 1.0
    return all(abs(p[0] - q[0]) <= COINCIDE * span_x and abs(p[1] - q[1]) <= COINCIDE * span_y
               for p, q in zip(a, b))


def latency_figure(payload: dict[str, Any], executor: str, scenario: str,
                   modes: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    curves = {m: [list(p) for p in s["latency_cdf"]] for m, s in modes.items() if s.get("latency_cdf")}
    if not curves:
        return None
    same = coinciding(curves)
    alias = {name: group for group in same for name in group}
    rows = {mode: _row(payload, executor, scenario, mode) for mode in curves}
    series = []
    for index, (mode, points) in enumerate(curves.items()):
        others = [m for m in alias.get(mode, []) if m != mode]
        everyone = len(others) + 1 == len(curves) > 2
        name = mode + (" (= every mode)" if everyone else f" (= {', '.join(others)})" if others else "")
        tips = [f"{mode}: p{100 * q:g} = {x:,.2f} ms" for x, q in points]
        series.append({"name": name + contended_label(rows[mode]), "color": MODE_COLORS.get(mode, "#000"),
                       "kind": "step", "points": points, "tips": tips,
                       "dash": bool(others) and alias[mode].index(mode) > 0, "order": index})
    caption = _join(latency_caption(curves, same), contention_note(rows))
    x_max = max(p[0] for points in curves.values() for p in points)
    return {
        "id": f"{executor}-{scenario}-latency",
        "title": f"{executor} / {scenario}: end-to-end latency (CDF)",
        "caption": caption,
        "share_x": True,
        "panels": [{
            "title": "",
            "x": {"label": f"latency ({_time_unit(executor)}; axis from 0)", "min": 0.0, "max": x_max * 1.02},
            "y": {"label": "fraction of records", "min": 0.0, "max": 1.0},
            "series": series,
        }],
    }


# ---------------------------------------------------------------------------- durations over time


def durations_figure(payload: dict[str, Any], executor: str, scenario: str,
                     modes: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    points_by_mode = {m: s["checkpoints"] for m, s in modes.items() if s.get("checkpoints")}
    if not points_by_mode:
        return None
    start = min(p["trigger_time"] for points in points_by_mode.values() for p in points)
    rows = {mode: _row(payload, executor, scenario, mode) for mode in points_by_mode}
    series = []
    for mode, points in points_by_mode.items():
        done = [p for p in points if p["completed"]]
        color = MODE_COLORS.get(mode, "#000")
        series.append({
            "name": mode + contended_label(rows[mode]), "color": color, "kind": "line", "marker": "circle",
            "points": [[p["trigger_time"] - start, p["duration"]] for p in done],
            "tips": [f"{mode}: checkpoint {p['id']} took {p['duration']:,.2f} ms"
                     f"{' (unaligned)' if p.get('unaligned') else ''}, persisted {p.get('persisted_bytes', 0):,} B"
                     for p in done],
        })
        aborted = [p for p in points if not p["completed"]]
        if aborted:
            series.append({"name": f"{mode} (aborted)", "color": color, "kind": "points", "marker": "cross",
                           "points": [[p["trigger_time"] - start, p["duration"]] for p in aborted],
                           "tips": [f"{mode}: checkpoint {p['id']} aborted ({p['failure_reason']}) after "
                                    f"{p['duration']:,.2f} ms" for p in aborted]})
    y_max = max((pt[1] for s in series for pt in s["points"]), default=1.0)
    unit = "virtual s" if executor == "sim" else "s"
    same = _coinciding_levels({s["name"]: [p[1] for p in s["points"]] for s in series if s["kind"] == "line"},
                              y_max)
    together = "; ".join(" = ".join(g) for g in same)
    caption = durations_caption({m: [p["duration"] for p in points if p["completed"]]
                                 for m, points in points_by_mode.items()},
                                {m: sum(not p["completed"] for p in points) for m, points in points_by_mode.items()})
    return {
        "id": f"{executor}-{scenario}-durations",
        "title": f"{executor} / {scenario}: checkpoint duration over time",
        "caption": _join(caption, f"Lines that coincide: {together}." if together else "", contention_note(rows)),
        "share_x": True,
        "panels": [{
            "title": "",
            "x": {"label": f"trigger time ({unit} since the first checkpoint)", "min": 0.0},
            "y": {"label": f"duration ({_time_unit(executor)}; axis from 0)", "min": 0.0, "max": y_max * 1.05},
            "series": series,
        }],
    }


def _coinciding_levels(values: dict[str, list[float]], span: float) -> list[list[str]]:
    """Groups of series whose median and extremes are within `COINCIDE` of the axis span: their
    lines lie on top of each other (their points need not be at the same times)."""
    def summary(v: list[float]) -> tuple[float, float, float]:
        return (min(v), statistics.median(v), max(v)) if v else (0.0, 0.0, 0.0)

    groups: list[list[str]] = []
    for name, v in values.items():
        for group in groups:
            if all(abs(a - b) <= COINCIDE * span for a, b in zip(summary(values[group[0]]), summary(v))):
                group.append(name)
                break
        else:
            groups.append([name])
    return [g for g in groups if len(g) > 1]


# ---------------------------------------------------------------------------- barrier timeline


def _task_order(task: str) -> tuple[int, str]:
    return (0 if task.startswith("Source") else 1, task)


def timeline_figure(payload: dict[str, Any], executor: str, scenario: str,
                    modes: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    timelines = {m: s["timeline"] for m, s in modes.items() if s.get("timeline")}
    if not timelines:
        return None
    panels = []
    x_max = 0.0
    for mode, timeline in timelines.items():
        start = timeline["trigger_time"]
        events = timeline["events"]
        tasks = sorted({e[2] for e in events}, key=_task_order)
        row = {t: i for i, t in enumerate(tasks)}
        series = []
        channels = sorted({e[3] for e in events if e[1] == "barrier-in"})
        for ch in channels:
            pts = [e for e in events if e[1] == "barrier-in" and e[3] == ch]
            series.append({"name": f"barrier in, channel {ch}", "color": CHANNEL_COLORS[ch % len(CHANNEL_COLORS)],
                           "kind": "points", "marker": "tick",
                           "points": [[(e[0] - start) * 1e3, row[e[2]]] for e in pts],
                           "tips": [f"{e[2]}: barrier in on channel {ch} at {(e[0] - start) * 1e3:,.2f} ms"
                                    for e in pts]})
        snaps = [e for e in events if e[1] == "snapshot"]
        series.append({"name": "snapshot", "color": "#000000", "kind": "points", "marker": "diamond",
                       "points": [[((e[3] if e[3] is not None else e[0]) - start) * 1e3, row[e[2]]] for e in snaps],
                       "tips": [f"{e[2]}: snapshot at {((e[3] if e[3] is not None else e[0]) - start) * 1e3:,.2f} ms"
                                for e in snaps]})
        acks = [e for e in events if e[1] == "ack"]
        series.append({"name": "ack", "color": "#d62728", "kind": "points", "marker": "ring",
                       "points": [[(e[0] - start) * 1e3, row[e[2]]] for e in acks],
                       "tips": [f"{e[2]}: acknowledged at {(e[0] - start) * 1e3:,.2f} ms" for e in acks]})
        end = (timeline["end_time"] - start) * 1e3
        x_max = max(x_max, end, *(p[0] for s in series for p in s["points"]))
        kind = "unaligned" if timeline.get("unaligned") else "aligned"
        label = contended_label(_row(payload, executor, scenario, mode))
        panels.append({
            "title": f"{mode}: checkpoint {timeline['checkpoint_id']} ({kind}), completed at {end:,.1f} ms{label}",
            "x": {"label": f"{_time_unit(executor)} after the trigger", "min": 0.0},
            "y": {"label": ""}, "rows": tasks, "series": series,
            "vlines": [{"x": end, "label": f"completed {end:,.1f} ms"}],
        })
    for panel in panels:
        panel["x"]["max"] = x_max * 1.03
    return {
        "id": f"{executor}-{scenario}-timeline",
        "title": f"{executor} / {scenario}: barrier timeline of one checkpoint per mode",
        "caption": _join(timeline_caption(timelines),
                         contention_note({m: _row(payload, executor, scenario, m) for m in timelines})),
        "share_x": True,
        "panels": panels,
    }


# ---------------------------------------------------------------------------- phase Gantt


def stragglers(end_to_end: Sequence[float]) -> set[int]:
    """Indexes of subtasks whose end-to-end duration is above max(p95, 1.5 x median) (p95
    interpolated, so with few subtasks the slowest can stand out)."""
    if len(end_to_end) < 2:
        return set()
    ordered = sorted(end_to_end)
    rank = 0.95 * (len(ordered) - 1)
    low = int(rank)
    p95 = ordered[low] + (ordered[min(low + 1, len(ordered) - 1)] - ordered[low]) * (rank - low)
    bound = max(p95, 1.5 * statistics.median(ordered))
    return {i for i, v in enumerate(end_to_end) if v > bound}


def is_source(subtask: dict[str, Any]) -> bool:
    """Whether a subtask of the phase data reads a source: it has no input channels, so it never
    aligns (`source` in the JSON; older documents: the "Source: " name every source vertex has)."""
    return bool(subtask.get("source", str(subtask.get("task", "")).startswith("Source: ")))


def drawn_phases(subtask: dict[str, Any]) -> list[tuple[str, float, bool]]:
    """(name, ms, hatched) of each phase a subtask's row draws, in order. A source has no input
    to align: the time its stats count between the snapshot and the write is its barrier waiting
    in its output behind data after its snapshot (an alignment timeout turns it unaligned), drawn
    as that, between its sync and async parts."""
    if is_source(subtask):
        return [(PHASE_NAMES["start_delay"], subtask["start_delay"], False),
                (PHASE_NAMES["sync_duration"], subtask["sync_duration"], False),
                (OUTPUT_WAIT, subtask["alignment_duration"], False),
                (PHASE_NAMES["async_duration"], subtask["async_duration"], False)]
    out = []
    for phase in PHASES:
        blocking = phase != "alignment_duration" or subtask.get("aligned_blocking", False)
        out.append((PHASE_NAMES[phase] if blocking else "alignment (not blocking)", subtask[phase], not blocking))
    return out


def gantt_figure(payload: dict[str, Any], executor: str, scenario: str,
                 modes: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    chosen = {m: s["phases"] for m, s in modes.items() if s.get("phases")}
    if not chosen:
        return None
    panels = []
    x_max = 0.0
    drawn: dict[str, list[dict[str, Any]]] = {}
    outlined_tasks: dict[str, list[str]] = {}
    names_used: set[str] = set()
    for mode, phases in chosen.items():
        subtasks = sorted(phases["subtasks"], key=lambda s: _task_order(s["task"]))
        outlined = stragglers([s["end_to_end_duration"] for s in subtasks])
        outlined_tasks[mode] = [subtasks[i]["task"] for i in sorted(outlined)]
        bars = []
        drawn[mode] = []
        for row, sub in enumerate(subtasks):
            x = 0.0
            parts = drawn_phases(sub)
            drawn[mode].append({"task": sub["task"], "end_to_end_duration": sub["end_to_end_duration"],
                                "phases": {name: length for name, length, _ in parts}})
            for name, length, hatched in parts:
                if length > 0:
                    names_used.add(name)
                tip = (f"{sub['task']}: {name} {length:,.2f} ms ({x:,.2f}-{x + length:,.2f}); end to end "
                       f"{sub['end_to_end_duration']:,.2f} ms; processed {sub['processed_data']:,} B, persisted "
                       f"{sub['persisted_data']:,} B, state {sub['checkpointed_size']:,} B")
                bars.append({"row": row, "x0": x, "x1": x + length, "color": NAME_COLORS[name],
                             "hatch": hatched, "outline": False, "tip": tip})
                x += length
            if row in outlined:
                bars.append({"row": row, "x0": 0.0, "x1": max(x, sub["end_to_end_duration"]), "color": None,
                             "hatch": False, "outline": True,
                             "tip": f"{sub['task']}: straggler, end to end {sub['end_to_end_duration']:,.2f} ms"})
            x_max = max(x_max, x, sub["end_to_end_duration"])
        kind = "unaligned" if phases.get("unaligned") else "aligned"
        label = contended_label(_row(payload, executor, scenario, mode))
        panels.append({
            "title": f"{mode}: checkpoint {phases['checkpoint_id']} ({kind}), {phases['duration']:,.1f} ms{label}",
            "x": {"label": f"{_time_unit(executor)} after the trigger", "min": 0.0},
            "y": {"label": ""}, "rows": [s["task"] for s in subtasks], "bars": bars, "series": [],
        })
    for panel in panels:
        panel["x"]["max"] = x_max * 1.03
    legend = [{"name": PHASE_NAMES[p], "color": PHASE_COLORS[p]} for p in PHASES]
    legend.insert(2, {"name": "alignment (not blocking)", "color": PHASE_COLORS["alignment_duration"], "hatch": True})
    if OUTPUT_WAIT in names_used:
        legend.insert(2, {"name": OUTPUT_WAIT, "color": NAME_COLORS[OUTPUT_WAIT]})
    legend.append({"name": "straggler", "color": STRAGGLER_COLOR, "outline": True})
    return {
        "id": f"{executor}-{scenario}-phases",
        "title": f"{executor} / {scenario}: where each subtask spent one checkpoint",
        "caption": _join(gantt_caption(drawn, outlined_tasks),
                         contention_note({m: _row(payload, executor, scenario, m) for m in chosen})),
        "share_x": True,
        "panels": panels,
        "legend": legend,
    }


# ---------------------------------------------------------------------------- scale


def scale_figure(payload: dict[str, Any], executor: str) -> dict[str, Any] | None:
    by_mode: dict[str, list[list[float]]] = {}
    for row in payload.get("rows", []):
        if row.get("executor") != executor or not str(row.get("scenario", "")).startswith("scale-p"):
            continue
        if row.get("throughput"):
            by_mode.setdefault(row["mode"], []).append([row["parallelism"], row["throughput"]])
    if not by_mode:
        return None
    series = [{"name": mode, "color": MODE_COLORS.get(mode, "#000"), "kind": "line", "marker": "circle",
               "points": sorted(points), "tips": [f"{mode}: parallelism {p:g}: {t:,.0f} rec/s" for p, t in sorted(points)]}
              for mode, points in sorted(by_mode.items(), key=lambda kv: mode_rank(kv[0]))]
    same = coinciding({s["name"]: s["points"] for s in series})
    rows = {f"{r['mode']} p{r['parallelism']}": r for r in payload.get("rows", [])
            if r.get("executor") == executor and str(r.get("scenario", "")).startswith("scale-p")}
    return {
        "id": f"{executor}-scale-throughput",
        "title": f"{executor} / scale: throughput against parallelism",
        "caption": _join(scale_caption({s["name"]: s["points"] for s in series}, same), contention_note(rows)),
        "share_x": True,
        "panels": [{
            "title": "",
            "x": {"label": "parallelism", "min": 0.0},
            "y": {"label": "records/s (axis from 0)", "min": 0.0,
                  "max": 1.05 * max(p[1] for s in series for p in s["points"])},
            "series": series,
        }],
    }


def figures(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every figure of a checkpoint-modes JSON document, in reading order."""
    groups = _groups(payload)
    out: list[dict[str, Any] | None] = []
    for executor in sorted({e for e, _ in groups}, key=lambda e: (e != "sim", e)):
        for scenario in CDF_SCENARIOS:
            if (executor, scenario) in groups:
                out.append(latency_figure(payload, executor, scenario, groups[(executor, scenario)]))
        for scenario in DETAIL_SCENARIOS:
            modes = groups.get((executor, scenario))
            if modes is None:
                continue
            detailed = {m: s for m, s in modes.items() if m != "none"}
            out.append(durations_figure(payload, executor, scenario, detailed))
            out.append(timeline_figure(payload, executor, scenario, detailed))
            out.append(gantt_figure(payload, executor, scenario, detailed))
        out.append(scale_figure(payload, executor))
        for scenario in sorted(s for e, s in groups if e == executor and s.startswith(NEXMARK_PREFIX)):
            modes = groups[(executor, scenario)]
            out.append(latency_figure(payload, executor, scenario, modes))
            out.append(durations_figure(payload, executor, scenario, {m: s for m, s in modes.items() if m != "none"}))
    return [f for f in out if f is not None]
