"""PNG plots of a `benchmarks.checkpoint_modes` JSON document (matplotlib, Agg backend).

    python -m benchmarks.plots bench-out/checkpoint_modes.json [--out DIR]

Draws the figures of `benchmarks.figures` (which says what each shows), one PNG per figure named
after its id, each with its one-line caption under the title. Everything comes from the JSON's
`rows` and `series`, so the plots can be redrawn from a saved run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import textwrap
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.patches import Patch  # noqa: E402

from benchmarks.figures import figures  # noqa: E402

MARKERS = {"circle": "o", "cross": "x", "tick": "|", "diamond": "D", "ring": "o"}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def draw(figure: dict[str, Any], path: str) -> None:
    """Draw one figure spec (see `benchmarks.figures`) to a PNG."""
    panels = figure["panels"]
    heights = [0.9 + 0.32 * len(p["rows"]) if p.get("rows") else 3.4 for p in panels]
    caption = "\n".join(textwrap.wrap(figure["caption"], 105))
    n_legend = len(_legend_entries(figure, panels))
    top = 0.2 * (2 + caption.count("\n"))  # inches: title and caption (tight_layout makes room)
    bottom = 0.5 + 0.22 * ((n_legend + 3) // 4)  # inches: x label and legend rows
    total = sum(heights) + top + bottom
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.5, total), squeeze=False,
                             sharex=figure.get("share_x", True), gridspec_kw={"height_ratios": heights})
    for ax, panel in zip(axes[:, 0], panels):
        _draw_panel(ax, panel)
    axes[-1, 0].set_xlabel(panels[-1]["x"]["label"])
    handles, labels = _legend(figure, axes[:, 0])
    if handles:
        fig.legend(handles, labels, loc="lower center", fontsize="small", ncol=min(4, len(handles)), frameon=False)
    fig.suptitle(f"{figure['title']}\n{caption}\n", x=0.01, ha="left", fontsize="medium")  # blank line: room above the panel titles
    fig.tight_layout(rect=(0, (bottom - 0.3) / total, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _draw_panel(ax: Any, panel: dict[str, Any]) -> None:
    rows = panel.get("rows")
    for series in panel.get("series", []):
        xs = [p[0] for p in series["points"]]
        ys = [p[1] for p in series["points"]]
        style = {"color": series["color"], "label": series["name"]}
        if series["kind"] == "points":
            marker = MARKERS.get(series.get("marker", "circle"), "o")
            if series.get("marker") == "ring":
                ax.scatter(xs, ys, marker=marker, s=40, facecolors="none", edgecolors=series["color"],
                           label=series["name"])
            else:
                ax.scatter(xs, ys, marker=marker, s=120 if marker == "|" else 30, **style)
        else:
            ax.plot(xs, ys, drawstyle="steps-post" if series["kind"] == "step" else "default",
                    linestyle="--" if series.get("dash") else "-",
                    marker=MARKERS.get(series["marker"]) if series.get("marker") else None, markersize=3, **style)
    for bar in panel.get("bars", []):
        width = bar["x1"] - bar["x0"]
        if bar["outline"]:
            ax.barh(bar["row"], width, left=bar["x0"], height=0.8, fill=False, edgecolor="#d62728", linewidth=2.0)
        elif width > 0:
            ax.barh(bar["row"], width, left=bar["x0"], height=0.6, color=bar["color"],
                    hatch="///" if bar["hatch"] else None, alpha=0.55 if bar["hatch"] else 1.0,
                    edgecolor="white" if not bar["hatch"] else bar["color"], linewidth=0.5)
    for line in panel.get("vlines", []):
        ax.axvline(line["x"], color="grey", linestyle="--", linewidth=1)
    x, y = panel["x"], panel["y"]
    ax.set_xlim(x.get("min"), x.get("max"))
    if rows:
        ax.set_yticks(range(len(rows)), rows, fontsize="small")
        ax.set_ylim(len(rows) - 0.4, -0.6)  # first row on top
    else:
        ax.set_ylim(y.get("min"), y.get("max"))
        ax.set_ylabel(y["label"])
    ax.grid(True, alpha=0.3)
    if panel.get("title"):
        ax.set_title(panel["title"], fontsize="medium", loc="left")


def _legend_entries(figure: dict[str, Any], panels: list[dict[str, Any]]) -> list[str]:
    names = []
    for panel in panels:
        for series in panel.get("series", []):
            if series["name"] not in names:
                names.append(series["name"])
    return names + [entry["name"] for entry in figure.get("legend", [])]


def _legend(figure: dict[str, Any], axes: Any) -> tuple[list[Any], list[str]]:
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    for entry in figure.get("legend", []):
        if entry.get("outline"):
            handles.append(Patch(fill=False, edgecolor=entry["color"], linewidth=2))
        else:
            handles.append(Patch(facecolor=entry["color"], hatch="///" if entry.get("hatch") else None,
                                 alpha=0.55 if entry.get("hatch") else 1.0))
        labels.append(entry["name"])
    return handles, labels


def make_plots(payload: dict[str, Any], out_dir: str) -> list[str]:
    """Draw every figure of `payload` into `out_dir`; returns the PNG paths."""
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for figure in figures(payload):
        path = os.path.join(out_dir, f"{_slug(figure['id'])}.png")
        draw(figure, path)
        files.append(path)
    return files


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
