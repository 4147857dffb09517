"""`report.html`: the checkpoint-modes results as one self-contained page.

The page holds the target lines, the table and every figure of `benchmarks.figures`, drawn in
the browser as SVG by `benchmarks/chart.js` (inlined, no library, no network): hover for exact
values, drag across a panel to zoom (panels of a figure zoom together), double-click to reset.
A script error anywhere is recorded as `data-errors` on the <html> element; once drawn, <body>
says how many figures it drew (`data-rendered`) out of how many (`data-figures`) — what the
headless-browser test reads.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.captions import machine_cell
from benchmarks.figures import figures

CHART_JS = Path(__file__).with_name("chart.js")

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1140px; color: #222; padding: 0 12px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #666; }
ul.targets li { margin: 4px 0; } .met { color: #1a7f37; } .notmet { color: #c62828; font-weight: 600; }
.table { overflow-x: auto; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 12px; white-space: nowrap; }
th, td { padding: 3px 7px; border-bottom: 1px solid #eee; text-align: right; }
th { position: sticky; top: 0; background: #f6f6f6; } td.l, th.l { text-align: left; }
tr.sep td { border-top: 2px solid #bbb; }
tr.contended td { background: #fff3e0; } p.contended { color: #c62828; font-weight: 600; }
figure { margin: 26px 0; border-top: 1px solid #ddd; padding-top: 8px; }
figcaption b { font-size: 15px; } figcaption { margin-bottom: 6px; }
button.reset { float: right; visibility: hidden; }
.legend { margin: 4px 0 2px 150px; font-size: 12px; }
.legend span { margin-right: 14px; white-space: nowrap; }
.sw { display: inline-block; width: 18px; height: 10px; margin-right: 5px; vertical-align: middle; background: var(--c); }
.sw.dash { background: repeating-linear-gradient(90deg, var(--c) 0 6px, transparent 6px 9px); height: 3px; }
.sw.hatch { background: repeating-linear-gradient(45deg, var(--c) 0 3px, #fff 3px 6px); }
.sw.outline { background: none; border: 2px solid var(--c); height: 8px; }
svg.panel { display: block; font-size: 11px; user-select: none; }
svg .grid { stroke: #eee; } svg .frame { fill: none; stroke: #999; } svg .ptitle { font-size: 12px; font-weight: 600; }
svg .overlay { fill: transparent; cursor: crosshair; } svg .brush { fill: rgba(66, 133, 244, .18); }
svg .vline { stroke: #888; stroke-dasharray: 4, 3; }
.tip { position: absolute; display: none; background: #fffff0; border: 1px solid #999; padding: 3px 6px;
       font-size: 12px; pointer-events: none; max-width: 520px; box-shadow: 1px 1px 4px rgba(0,0,0,.2); }
"""

_ERRORS = """window.__chartErrors = [];
window.addEventListener("error", function (e) {
  window.__chartErrors.push(String(e.message || e));
  document.documentElement.setAttribute("data-errors", window.__chartErrors.join(" | "));
});"""


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "" if value is None else str(value)


def _value(row: dict[str, Any], column: str) -> Any:
    return machine_cell(row) if column == "machine" else row.get(column)


def table_html(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    labels = {"executor", "scenario", "mode", "status", "abort_reasons", "machine"}
    head = "".join(f'<th class="{"l" if c in labels else ""}">{html.escape(c)}</th>' for c in columns)
    body = []
    previous = None
    for row in rows:
        group = (row.get("executor"), row.get("scenario"))
        classes = (["sep"] if previous is not None and group != previous else []) + \
            (["contended"] if row.get("contended") else [])
        cls = f' class="{" ".join(classes)}"' if classes else ""
        previous = group
        cells = "".join(f'<td class="{"l" if c in labels else ""}">{html.escape(_cell(_value(row, c)))}</td>'
                        for c in columns)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def render(payload: dict[str, Any], *, columns: Sequence[str], target_lines: Sequence[str] = (),
           units: str = "") -> str:
    """The page for a checkpoint-modes JSON document."""
    figs = figures(payload)
    items = []
    for line in target_lines:
        cls = "notmet" if "NOT met" in line else "met"
        items.append(f'<li class="{cls}">{html.escape(line)}</li>')
    targets = f'<h2>Targets</h2><ul class="targets">{"".join(items)}</ul>' if items else ""
    figure_html = "".join(
        f'<figure id="fig-{html.escape(f["id"])}"><button class="reset">reset zoom</button><figcaption>'
        f'<b>{html.escape(f["title"])}</b><br>{html.escape(f["caption"])}</figcaption>'
        f'<div class="panels"></div></figure>'
        for f in figs
    )
    contended = [r for r in payload.get("rows", []) if r.get("contended")]
    warning = (f'<p class="contended">{len(contended)} row(s) were measured at a load above the core count '
               f'(up to {max(r.get("load_average") or 0 for r in contended)} on {contended[0].get("cores", "?")} '
               "cores; CONTENDED in the machine column, marked in the plots): their wall-clock figures include "
               "other processes' work.</p>") if contended else ""
    args = payload.get("args", {})
    meta = (f'{len(payload.get("rows", []))} combinations; executors: '
            f'{html.escape(str(args.get("executor", "?")))}; quick: {args.get("quick", "?")}; '
            f'repeats: {args.get("repeat", 1)}; wall time {payload.get("total_wall_s", "?")} s'
            + (f'; load average {payload["load_average"]}' if payload.get("load_average") else ""))
    data = json.dumps(figs, separators=(",", ":")).replace("</", "<\\/")
    script = CHART_JS.read_text()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>barrierflow: checkpoint modes</title>
<script>{_ERRORS}</script>
<style>{_STYLE}</style></head>
<body>
<h1>barrierflow: what each checkpoint mode costs</h1>
<p class="meta">{meta}</p>
{warning}
{targets}
<h2>Results</h2>
<p class="meta">{html.escape(units)}</p>
{table_html(payload.get("rows", []), columns)}
<h2>Figures</h2>
<p class="meta">Hover for exact values; drag across a panel to zoom in on x (a figure's panels zoom together),
double-click or "reset zoom" to go back.</p>
{figure_html}
<script type="application/json" id="figures">{data}</script>
<script>{script}</script>
</body></html>
"""


def write_report(payload: dict[str, Any], out_dir: str, *, columns: Sequence[str],
                 target_lines: Sequence[str] = (), units: str = "") -> str:
    """Write `out_dir/report.html`; returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(payload, columns=columns, target_lines=target_lines, units=units))
    return path
