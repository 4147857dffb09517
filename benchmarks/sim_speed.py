"""Simulator speed: simulated records per wall second for the page-view job.

    python -m benchmarks.sim_speed [--records N] [--json PATH]

Page-view job (source → map → keyBy → count → sink), parallelism 4, aligned checkpoints every
100 virtual ms, no faults. Prints a table and writes JSON.
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


def run_once(records: int, parallelism: int, interval: float, buffer_size: int) -> dict:
    from checkpoint.options import CheckpointingMode
    from runtime import StreamEnvironment
    from runtime.cli import _pageview_rows, build_pageview

    rows = _pageview_rows(records, 50, seed=1)
    env = StreamEnvironment(parallelism=parallelism, buffer_size=buffer_size, credits=8)
    env.enable_checkpointing(interval=interval, mode=CheckpointingMode.EXACTLY_ONCE)
    build_pageview(env, rows, splits=parallelism)
    started = time.perf_counter()
    result = env.execute("pageview", executor="sim", seed=1)
    wall = time.perf_counter() - started
    assert len(result.output("pv")) == records
    return {
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
    args = parse_args(parser, argv)
    rows = [run_once(args.records, args.parallelism, args.interval, args.buffer_size) for _ in range(args.repeat)]
    best = median_row(rows, "records_per_wall_s")
    table = markdown_table(rows)
    print(table)
    print(f"\nmedian: {best['records_per_wall_s']:,.0f} simulated records per wall second")
    output_of(args, "sim_speed").write({"runs": rows, "median_records_per_wall_s": best["records_per_wall_s"]}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
