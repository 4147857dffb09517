"""Simulator speed: simulated records per wall second for the page-view job.

    python -m benchmarks.sim_speed [--quick] [--records N] [--invariants off|on|both] [--out DIR] [--json PATH]

Page-view job (source → map → keyBy → count → sink), parallelism 4, aligned checkpoints every
100 virtual ms, no faults. Prints a table and writes JSON. `--invariants both` runs each repeat
with the invariant checker off and on (`runtime.checker.invariants`), interleaved, and reports the
checker's overhead (the ratio of the medians).
"""

from __future__ import annotations

import argparse
import time

from benchmarks.report import (
    add_output_arguments,
    add_sized_argument,
    markdown_table,
    median_row,
    output_of,
    parse_args,
)


def run_once(records: int, parallelism: int, interval: float, buffer_size: int, invariants: bool = False) -> dict:
    from runtime import StreamEnvironment
    from runtime.workloads.pageview import build_pageview, pageview_rows
    from vocabulary.options import CheckpointingMode

    rows = pageview_rows(records, 50, seed=1)
    env = StreamEnvironment(parallelism=parallelism, buffer_size=buffer_size, credits=8)
    env.enable_checkpointing(interval=interval, mode=CheckpointingMode.EXACTLY_ONCE)
    build_pageview(env, rows, splits=parallelism)
    started = time.perf_counter()
    result = env.execute("pageview", executor="sim", seed=1, invariants=invariants)
    wall = time.perf_counter() - started
    assert len(result.output("pv")) == records
    return {
        "invariants": "on" if invariants else "off",
        "records": records,
        "parallelism": parallelism,
        "buffer_size": buffer_size,
        "wall_s": wall,
        "records_per_wall_s": records / wall,
        "virtual_s": result.metrics.duration,
        "events": result.metrics.events,
        "checkpoints_completed": len(result.completed_checkpoints),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    add_output_arguments(parser, "sim_speed")
    add_sized_argument(parser, "--records", full=400_000, quick=50_000, help="records per run")
    parser.add_argument("--parallelism", type=int, default=4, help="subtasks per operator (default 4)")
    parser.add_argument("--interval", type=float, default=0.1, help="checkpoint interval, virtual seconds (default 0.1)")
    parser.add_argument("--buffer-size", type=int, default=1000, help="records per buffer (default 1000)")
    add_sized_argument(parser, "--repeat", full=3, quick=1, help="runs; the median is reported")
    parser.add_argument("--invariants", choices=["off", "on", "both"], default="off",
                        help="run with the invariant checker off, on, or both (side by side; default off)")
    args = parse_args(parser, argv)
    settings = {"off": [False], "on": [True], "both": [False, True]}[args.invariants]
    rows = [run_once(args.records, args.parallelism, args.interval, args.buffer_size, invariants)
            for _ in range(args.repeat) for invariants in settings]
    table = markdown_table(rows)
    print(table)
    summary: dict[str, float] = {}
    for setting in ("off", "on"):
        runs = [r for r in rows if r["invariants"] == setting]
        if runs:
            best = median_row(runs, "records_per_wall_s")
            summary[setting] = best["records_per_wall_s"]
            print(f"\nmedian, invariants {setting}: {best['records_per_wall_s']:,.0f} simulated records per wall second")
    payload: dict[str, object] = {"runs": rows, "median_records_per_wall_s": summary.get("off", summary.get("on"))}
    if len(summary) == 2:
        payload["invariants_overhead"] = summary["off"] / summary["on"] - 1
        print(f"invariant checker overhead: {payload['invariants_overhead']:+.1%} wall time per record")
    output_of(args, "sim_speed").write(payload, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
