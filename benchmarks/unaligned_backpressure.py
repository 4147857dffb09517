"""Aligned vs unaligned vs aligned-with-timeout checkpoints under backpressure, on the simulator.

    python -m benchmarks.unaligned_backpressure [--json PATH] [--per-split N] [--slowdown X]

One keyed subtask is slow (a `CostModel` slowdown) and channels have one credit: in-flight data
piles up in front of it, aligned barriers queue behind that data, unaligned barriers overtake it
and persist it as channel state. Virtual time, so the numbers are noise-free and the same on
every run. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.report import (
    add_output_arguments,
    add_sized_argument,
    markdown_table,
    output_of,
    parse_args,
    percentile,
)


def run_mode(mode: str, per_split: int, slowdown: float, interval: float, credits: int, buffer_size: int) -> dict:
    from runtime import StreamEnvironment
    from runtime.sim.costs import CostModel
    from runtime.workloads.scenarios import SINK, build_backpressure_job, check_headers, header_rows
    from vocabulary.options import CheckpointingMode

    splits = 4
    rows = header_rows(splits, per_split, 16)
    env = StreamEnvironment(parallelism=2, buffer_size=buffer_size, credits=credits, buffer_timeout=0.001)
    env.enable_checkpointing(
        interval=interval, mode=CheckpointingMode.EXACTLY_ONCE, unaligned=mode == "unaligned",
        alignment_timeout=0.01 if mode == "aligned+timeout" else None, tolerable_failures=1000,
    )
    build_backpressure_job(env, rows, splits)
    result = env.execute("backpressure", executor="sim", seed=1,
                         costs=CostModel(slow_tasks={"slow-count[1]": slowdown}))
    check = check_headers(rows, result.output(SINK))
    assert check.clean, check
    done = [c for c in result.checkpoints if c.completed]
    durations = [c.duration * 1e3 for c in done]
    return {
        "mode": mode,
        "checkpoints": len(done),
        "aborted": len(result.checkpoints) - len(done),
        "unaligned_checkpoints": sum(1 for c in done if c.unaligned),
        "duration_ms_p50": statistics.median(durations) if durations else None,
        "duration_ms_max": max(durations) if durations else None,
        "alignment_ms_max": max((c.alignment_time * 1e3 for c in done), default=None),
        "persisted_bytes_total": sum(c.persisted_bytes for c in done),
        "persisted_bytes_p50": percentile([c.persisted_bytes for c in done], 50),
        "throughput_rec_per_s": result.metrics.throughput,
        "job_s": result.metrics.duration,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    add_output_arguments(parser, "unaligned_backpressure")
    add_sized_argument(parser, "--per-split", full=20_000, quick=2_000, help="records per source split")
    parser.add_argument("--slowdown", type=float, default=40.0, help="slow subtask's cost factor (default 40)")
    parser.add_argument("--interval", type=float, default=0.05, help="checkpoint interval, virtual seconds (default 0.05)")
    parser.add_argument("--credits", type=int, default=8, help="buffers in flight per channel (default 8)")
    parser.add_argument("--buffer-size", type=int, default=64, help="records per buffer (default 64)")
    args = parse_args(parser, argv)
    rows = [run_mode(m, args.per_split, args.slowdown, args.interval, args.credits, args.buffer_size)
            for m in ("aligned", "unaligned", "aligned+timeout")]
    table = markdown_table(rows)
    print(table)
    aligned, unaligned = rows[0]["duration_ms_p50"], rows[1]["duration_ms_p50"]
    if aligned and unaligned:
        print(f"\nunaligned/aligned checkpoint duration p50: {unaligned / aligned:.3f}")
    output_of(args, "unaligned_backpressure").write({"rows": rows, "args": vars(args)}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
