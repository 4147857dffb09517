"""The checkpoint-mode benchmark's output: units, the printed table, and the files it writes.

Shared by `benchmarks.checkpoint_modes` and `benchmarks.peers` (which adds its rows to the same
output), so neither imports the other's runner.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from benchmarks.captions import machine_cell
from benchmarks.report import markdown_table, write_json
from benchmarks.targets import targets

UNITS = {
    "throughput": "records/s (max-rate run)",
    "latency_*": "ms, end to end, open-loop run at `rate`",
    "checkpoint_duration_*": "ms, completed checkpoints of the open-loop run",
    "alignment_time_*": "ms, longest task alignment per completed checkpoint",
    "persisted_bytes": "bytes of channel state (in-flight data) persisted, summed over completed checkpoints",
    "persisted_bytes_p50": "bytes of channel state persisted per completed checkpoint, median",
    "state_bytes": "bytes of operator state in the largest completed checkpoint",
    "debloated_buffer_size": "records: the smallest input buffer size a task asked its senders for at the end "
                             "of the open-loop run (debloating modes; the job's buffer size is the upper bound)",
    "rate": "records/s offered by the open-loop generator",
    "records": "records of the open-loop run",
    "time": "virtual seconds on sim, wall seconds on ray",
    "repeats": "runs merged into the row (`--repeat`): each number is its median run's (median_low); "
               "the runs themselves are under `runs`",
}
TABLE_UNITS = ("throughput in records/s; latencies, checkpoint durations and alignment times in ms "
               "(virtual on sim, wall on ray); bytes in bytes; debloated_buffer_size in records; machine: the "
               "1-minute load average while a wall-clock row ran, CONTENDED when above the core count or when "
               "other processes took a quarter of the CPU (its figures include their work; sim rows are virtual "
               "time, which the load does not change)")
#: the columns of the printed table (the JSON has every field; `machine` is `captions.machine_cell`)
TABLE_COLUMNS = (
    "executor", "scenario", "mode", "status", "throughput", "latency_p50", "latency_p99", "latency_p99_9",
    "checkpoint_duration_p50", "alignment_time_p50", "persisted_bytes_p50", "state_bytes",
    "debloated_buffer_size", "checkpoints_completed", "abort_reasons", "machine",
)


def shown_cell(row: dict[str, Any], column: str) -> Any:
    """A table cell: the row's field, or what `abort_reasons` and `machine` show."""
    if column == "abort_reasons":
        return ", ".join(f"{k}: {v}" for k, v in (row.get(column) or {}).items())
    if column == "machine":
        return machine_cell(row)
    return row.get(column)


def render_table(rows: Sequence[dict[str, Any]]) -> str:
    shown = [{c: shown_cell(row, c) for c in TABLE_COLUMNS} for row in rows]
    return TABLE_UNITS + "\n\n" + markdown_table(shown, TABLE_COLUMNS)


def write_outputs(payload: dict[str, Any], json_path: str, out_dir: str, *, plots: bool = True) -> list[str]:
    """Write the JSON, the Markdown table and (unless `plots` is False) the PNGs and
    `report.html`; returns the files."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(json_path, payload)
    table_path = os.path.join(out_dir, "checkpoint_modes.md")
    with open(table_path, "w") as fh:
        fh.write(render_table(payload["rows"]) + "\n")
        lines = targets(payload["rows"], payload.get("runs", ()))
        if lines:
            fh.write("\n" + "\n".join(f"- {line}" for line in lines) + "\n")
    files = [json_path, table_path]
    if plots:
        from benchmarks.html_report import write_report
        from benchmarks.plots import make_plots

        files += make_plots(payload, out_dir)
        files.append(write_report(payload, out_dir, columns=TABLE_COLUMNS, units=TABLE_UNITS,
                                  target_lines=targets(payload["rows"], payload.get("runs", ()))))
    return files
