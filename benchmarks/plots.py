"""PNG plots of a `benchmarks.checkpoint_modes` JSON document (matplotlib, Agg backend).

    python -m benchmarks.plots bench-out/checkpoint_modes.json [--out DIR]

Per (executor, scenario): the end-to-end latency CDF with one line per mode, and checkpoint
duration over time (x: trigger time, one series per mode, aborted checkpoints as crosses). Per
executor, for one scenario (`backpressure` when it ran): a barrier timeline of one checkpoint per
mode — when each task received the barrier on each input channel, took its synchronous snapshot
and acknowledged, relative to the trigger. Everything is drawn from the JSON's `series`, so the
plots can be redrawn from a saved run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

MODE_ORDER = ("none", "aligned", "unaligned", "aligned-timeout", "at-least-once")
TIMELINE_SCENARIO = "backpressure"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _groups(payload: dict[str, Any]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """series by (executor, scenario) -> mode -> series, modes in `MODE_ORDER`."""
    groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for key, series in payload.get("series", {}).items():
        executor, scenario, mode = key.split("/", 2)
        groups.setdefault((executor, scenario), {})[mode] = series
    for key, modes in groups.items():
        groups[key] = dict(sorted(modes.items(), key=lambda kv: _mode_rank(kv[0])))
    return groups


def _mode_rank(mode: str) -> tuple[int, str]:
    return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), mode)


def latency_cdf(executor: str, scenario: str, modes: dict[str, dict[str, Any]], path: str) -> bool:
    """Latency CDF, one line per mode; returns False (and writes nothing) without data."""
    curves = {m: s["latency_cdf"] for m, s in modes.items() if s.get("latency_cdf")}
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, cdf in curves.items():
        ax.plot([max(p[0], 1e-3) for p in cdf], [p[1] for p in cdf], label=mode, drawstyle="steps-post")
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("fraction of records")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"latency CDF — {executor} / {scenario}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def checkpoint_durations(executor: str, scenario: str, modes: dict[str, dict[str, Any]], path: str) -> bool:
    """Checkpoint duration over time, one series per mode; False without checkpoints."""
    series = {m: s["checkpoints"] for m, s in modes.items() if s.get("checkpoints")}
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, points in series.items():
        done = [p for p in points if p["completed"]]
        line = ax.plot([p["trigger_time"] for p in done], [p["duration"] for p in done], marker="o",
                       markersize=3, label=mode)
        aborted = [p for p in points if not p["completed"]]
        if aborted:
            ax.scatter([p["trigger_time"] for p in aborted], [p["duration"] for p in aborted], marker="x",
                       color=line[0].get_color(), label=f"{mode} (aborted)")
    ax.set_xlabel("trigger time (s, virtual on sim)" if executor == "sim" else "trigger time (s)")
    ax.set_ylabel("checkpoint duration (ms)")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"checkpoint duration — {executor} / {scenario}")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def barrier_timeline(executor: str, scenario: str, modes: dict[str, dict[str, Any]], path: str) -> bool:
    """One subplot per mode: barrier arrivals per channel, snapshot and ack per task (ms after
    the trigger); False when no mode has a timeline."""
    timelines = {m: s["timeline"] for m, s in modes.items() if s.get("timeline")}
    if not timelines:
        return False
    fig, axes = plt.subplots(len(timelines), 1, figsize=(8, 2.2 + 1.9 * len(timelines)), squeeze=False)
    for ax, (mode, timeline) in zip(axes[:, 0], timelines.items()):
        _draw_timeline(ax, mode, timeline)
    axes[-1, 0].set_xlabel("ms after the checkpoint was triggered")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", fontsize="small", ncol=4)
    fig.suptitle(f"barrier timeline — {executor} / {scenario} (barrier in = arrived at the input channel)",
                 x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _draw_timeline(ax: Any, mode: str, timeline: dict[str, Any]) -> None:
    start = timeline["trigger_time"]
    events = timeline["events"]
    tasks = sorted({e[2] for e in events}, key=_task_order)
    row = {t: i for i, t in enumerate(tasks)}
    ms = lambda t: (t - start) * 1e3  # noqa: E731
    arrivals = [e for e in events if e[1] == "barrier-in"]
    channels = sorted({e[3] for e in arrivals})
    cmap = plt.get_cmap("tab10")
    for ch in channels:
        pts = [e for e in arrivals if e[3] == ch]
        ax.scatter([ms(e[0]) for e in pts], [row[e[2]] for e in pts], marker="|", s=140,
                   color=cmap(ch % 10), label=f"barrier in, channel {ch}")
    snaps = [e for e in events if e[1] == "snapshot"]
    ax.scatter([ms(e[3] if e[3] is not None else e[0]) for e in snaps], [row[e[2]] for e in snaps],
               marker="D", s=30, color="black", label="snapshot")
    acks = [e for e in events if e[1] == "ack"]
    ax.scatter([ms(e[0]) for e in acks], [row[e[2]] for e in acks], marker="o", s=36, facecolors="none",
               edgecolors="red", label="ack")
    ax.axvline(ms(timeline["end_time"]), color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(tasks)), tasks, fontsize="small")
    ax.set_ylim(-0.7, len(tasks) - 0.3)
    kind = "unaligned" if timeline.get("unaligned") else "aligned"
    ax.set_title(f"{mode}: checkpoint {timeline['checkpoint_id']} ({kind}), completed at "
                 f"{ms(timeline['end_time']):.1f} ms", fontsize="medium", loc="left")
    ax.grid(True, axis="x", alpha=0.3)


def _task_order(task: str) -> tuple[int, str]:
    # sources first, then by name (task names are "vertex[subtask]")
    return (0 if task.startswith("Source") else 1, task)


def make_plots(payload: dict[str, Any], out_dir: str) -> list[str]:
    """Draw every plot of `payload` into `out_dir`; returns the PNG paths."""
    os.makedirs(out_dir, exist_ok=True)
    files: list[str] = []
    groups = _groups(payload)
    for (executor, scenario), modes in groups.items():
        stem = os.path.join(out_dir, f"{_slug(executor)}_{_slug(scenario)}")
        if latency_cdf(executor, scenario, modes, f"{stem}_latency_cdf.png"):
            files.append(f"{stem}_latency_cdf.png")
        if checkpoint_durations(executor, scenario, modes, f"{stem}_checkpoint_durations.png"):
            files.append(f"{stem}_checkpoint_durations.png")
    for executor in sorted({e for e, _ in groups}):
        scenario = _timeline_scenario([s for e, s in groups if e == executor], groups, executor)
        if scenario is None:
            continue
        path = os.path.join(out_dir, f"{_slug(executor)}_{_slug(scenario)}_barrier_timeline.png")
        if barrier_timeline(executor, scenario, groups[(executor, scenario)], path):
            files.append(path)
    return files


def _timeline_scenario(scenarios: Sequence[str], groups: dict[tuple[str, str], dict[str, dict[str, Any]]],
                       executor: str) -> str | None:
    with_timeline = [s for s in scenarios if any(v.get("timeline") for v in groups[(executor, s)].values())]
    if TIMELINE_SCENARIO in with_timeline:
        return TIMELINE_SCENARIO
    return with_timeline[0] if with_timeline else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="a JSON file written by benchmarks.checkpoint_modes")
    parser.add_argument("--out", default=None, help="output directory (default: the JSON's directory)")
    args = parser.parse_args(argv)
    with open(args.json) as fh:
        payload = json.load(fh)
    files = make_plots(payload, args.out or os.path.dirname(os.path.abspath(args.json)))
    print("\n".join(files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
