"""Page-view job throughput and latency on an executor, checkpointing aligned vs off.

    python -m benchmarks.throughput [--executor ray|sim] [--records N] [--rate 5000]
                                    [--steady-seconds S] [--repeat 3] [--json PATH]

The job: generator (parallelism 2) -> map to app -> key_by(app) -> count per app -> sink.

* **max rate**, checkpoints every 100 ms aligned, and checkpointing off: throughput is records
  divided by the span from the first record created to the last record counted (actor start-up
  and teardown excluded). The ratio aligned/off is the cost of aligned checkpointing.
* **steady**: the generator paced at `--rate` records/s with checkpoints every 100 ms aligned;
  p50/p99 end-to-end latency (record creation at the source to its arrival at the count/sink
  task) and checkpoint durations.

With `--bound` (default on for Ray) the raw Ray bound (`benchmarks.ray_pipe_bound`) is measured
in the same run and the ratio barrierflow/bound reported. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from benchmarks.report import markdown_table, percentile, write_json

APPS = 50


def page_view(i: int) -> dict[str, Any]:
    return {"app": f"app{(i * 7919) % APPS}", "user": i % 10_000}


def to_app(record: dict[str, Any]) -> dict[str, Any]:
    return {"app": record["app"], "created_at": record["created_at"]}


def build(records: int, *, checkpoints: bool, rate: float | None = None, buffer_size: int = 1000,
          buffer_timeout: float = 0.005) -> Any:
    from checkpoint.options import CheckpointingMode
    from operators import CollectSink, KeyedProcessFunction
    from runtime import StreamEnvironment

    class CountStamped(KeyedProcessFunction):
        def process_element(self, record: dict[str, Any], ctx: Any):
            count = ctx.value_state("count", default=0)
            n = count.value() + 1
            count.update(n)
            yield {"app": ctx.key, "count": n, "created_at": record["created_at"], "done_at": ctx.now()}

    env = StreamEnvironment(parallelism=2, buffer_size=buffer_size, credits=8, buffer_timeout=buffer_timeout)
    if checkpoints:
        env.enable_checkpointing(interval=0.1, mode=CheckpointingMode.EXACTLY_ONCE, tolerable_failures=100)
    (
        env.generate(count=records, rate=rate, fn=page_view)
        .map(to_app, name="to-app")
        .key_by("app")
        .process(CountStamped(), name="count")
        .sink_to(CollectSink("pv"))
    )
    return env


def run(executor: str, records: int, *, checkpoints: bool, rate: float | None = None) -> dict[str, Any]:
    env = build(records, checkpoints=checkpoints, rate=rate)
    started = time.time()
    result = env.execute("pageview-bench", executor=executor)
    wall = time.time() - started
    output = result.output("pv")
    assert len(output) == records, f"{len(output)} records committed, expected {records}"
    first = min(r["created_at"] for r in output)
    last = max(r["done_at"] for r in output)
    latencies = result.metrics.latencies
    durations = [c.duration for c in result.completed_checkpoints]
    return {
        "executor": executor,
        "run": ("steady" if rate else "max rate") + (" aligned" if checkpoints else " no checkpoints"),
        "records": records,
        "records_per_s": records / (last - first) if last > first else 0.0,
        "latency_p50_ms": _ms(percentile(latencies, 50)),
        "latency_p99_ms": _ms(percentile(latencies, 99)),
        "checkpoints": len(durations),
        "checkpoint_p50_ms": _ms(statistics.median(durations)) if durations else None,
        "alignment_max_ms": _ms(max((c.alignment_time for c in result.completed_checkpoints), default=0.0)),
        "wall_s": wall,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="ray", choices=["ray", "sim"])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--rate", type=float, default=5000.0)
    parser.add_argument("--steady-seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-bound", action="store_true", help="skip the raw Ray bound")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.executor == "ray":
        from runtime.ray.cluster import ensure_ray

        ensure_ray()  # one Ray for every run (and the bound), not one per job
    rows: list[dict[str, Any]] = []
    for _ in range(args.repeat):  # interleaved, so machine noise hits both modes alike
        rows.append(run(args.executor, args.records, checkpoints=True))
        rows.append(run(args.executor, args.records, checkpoints=False))
    steady = run(args.executor, int(args.rate * args.steady_seconds), checkpoints=True, rate=args.rate)
    rows.append(steady)

    def median(run_name: str) -> float:
        values = sorted(r["records_per_s"] for r in rows if r["run"] == run_name)
        return values[len(values) // 2]

    aligned, off = median("max rate aligned"), median("max rate no checkpoints")
    summary: dict[str, Any] = {
        "aligned_records_per_s": aligned,
        "off_records_per_s": off,
        "aligned_vs_off": aligned / off if off else None,
        "steady_rate": args.rate,
        "steady_latency_p50_ms": steady["latency_p50_ms"],
        "steady_latency_p99_ms": steady["latency_p99_ms"],
    }
    if args.executor == "ray" and not args.no_bound:
        from benchmarks.ray_pipe_bound import run as bound_run

        bounds = sorted(bound_run(args.records, 1000, 8)["records_per_s"] for _ in range(args.repeat))
        summary["raw_bound_records_per_s"] = bounds[len(bounds) // 2]
        summary["aligned_vs_bound"] = aligned / summary["raw_bound_records_per_s"]
        summary["off_vs_bound"] = off / summary["raw_bound_records_per_s"]
    print(markdown_table(rows))
    print()
    print(markdown_table([summary]))
    write_json(args.json or f"bench-out/throughput_{args.executor}.json", {"runs": rows, "summary": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
