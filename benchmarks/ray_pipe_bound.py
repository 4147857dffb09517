"""The raw bound on this machine: the page-view chain as bare Ray actors, no barrierflow code.

    python -m benchmarks.ray_pipe_bound [--records N] [--batch 1000] [--credits 8] [--json PATH]

Two source actors (parallelism 2) read pre-built Arrow record batches (one distinct object per
batch: pickle would serialise a repeated object once), map them to the app column, hash-partition
them by app over two keyed-count actors with at most `credits` calls in flight per channel (when
full, wait for the oldest), and each count actor counts per app record by record (as the job's
`CountPerKey` does, emitting one (app, count) per record) into a local sink. Sources run in
self-scheduled steps (a `step` call the actor queues to itself per ~2 ms slice, the usual bare-Ray
pattern; barrierflow's task actors run their slices on a work thread instead). Both create their
actors with Ray's task events off (`enable_task_events=False`), so neither pays for Ray recording
every call. Throughput is
records over the time from the start signal to the last record counted (actor start-up
excluded). Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import pyarrow as pa

from benchmarks.report import (
    add_output_arguments,
    add_sized_argument,
    markdown_table,
    median_row,
    output_of,
    parse_args,
)


def make_batches(records: int, batch: int, splits: int, apps: int = 50) -> list[list[pa.RecordBatch]]:
    from runtime.workloads.pageview import pageview_rows

    rows = pageview_rows(records, apps, seed=1)
    per_split: list[list[pa.RecordBatch]] = [[] for _ in range(splits)]
    size = len(rows) // splits
    for s in range(splits):
        part = rows[s * size:(s + 1) * size]
        for start in range(0, len(part), batch):
            per_split[s].append(pa.RecordBatch.from_pylist(part[start:start + batch]))
    return per_split


def run(records: int, batch: int, credits: int, parallelism: int = 2) -> dict[str, Any]:
    import ray

    @ray.remote(num_cpus=0.01, enable_task_events=False)
    class Count:
        def __init__(self) -> None:
            self.counts: dict[str, int] = {}
            self.records = 0
            self.sink: list[Any] = []
            self.last = 0.0

        def push(self, batch: pa.RecordBatch) -> None:
            counts = self.counts
            out = []
            for app in batch.column(0).to_pylist():
                n = counts.get(app, 0) + 1
                counts[app] = n
                out.append({"app": app, "count": n})
            self.sink.append(out)
            self.records += len(out)
            self.last = time.time()

        def stats(self) -> tuple[int, float]:
            return self.records, self.last

    @ray.remote(num_cpus=0.01, enable_task_events=False)
    class Source:
        def __init__(self, batches: list[pa.RecordBatch], counts: list[Any], credits: int) -> None:
            self.batches, self.counts, self.credits = batches, counts, credits
            self.next = 0
            self.in_flight: list[list[Any]] = [[] for _ in counts]
            self.me: Any = None

        def start(self, me: Any) -> None:
            self.me = me
            self.me.step.remote()

        def step(self) -> None:
            deadline = time.perf_counter() + 0.002
            n = len(self.counts)
            while self.next < len(self.batches) and time.perf_counter() < deadline:
                batch = self.batches[self.next].select(["app"])  # the map: page view -> app
                self.next += 1
                apps = batch.column(0).to_pylist()
                parts: list[list[int]] = [[] for _ in range(n)]
                for i, app in enumerate(apps):
                    parts[hash(app) % n].append(i)
                for channel, idx in enumerate(parts):
                    if not idx:
                        continue
                    window = self.in_flight[channel]
                    if len(window) >= self.credits:
                        ray.get(window.pop(0))
                    window.append(self.counts[channel].push.remote(batch.take(pa.array(idx))))
            if self.next < len(self.batches):
                self.me.step.remote()

        def drain(self) -> None:
            for window in self.in_flight:
                ray.get(window)

    per_split = make_batches(records, batch, parallelism)
    counts = [Count.remote() for _ in range(parallelism)]
    sources = [Source.remote(per_split[s], counts, credits) for s in range(parallelism)]
    ray.get([c.stats.remote() for c in counts] + [s.drain.remote() for s in sources])  # actors up
    started = time.time()
    ray.get([s.start.remote(s) for s in sources])
    total = sum(len(b) for part in per_split for b in part)
    while True:
        stats = ray.get([c.stats.remote() for c in counts])
        if sum(r for r, _ in stats) >= total:
            break
        time.sleep(0.005)
    ended = max(last for _, last in stats)
    for actor in counts + sources:
        ray.kill(actor)
    elapsed = ended - started
    return {"records": total, "batch": batch, "credits": credits, "seconds": elapsed,
            "records_per_s": total / elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser, "ray_pipe_bound")
    add_sized_argument(parser, "--records", full=400_000, quick=50_000, help="records per run")
    parser.add_argument("--batch", type=int, default=1000, help="records per call (default 1000)")
    parser.add_argument("--credits", type=int, default=8, help="calls in flight (default 8)")
    add_sized_argument(parser, "--repeat", full=3, quick=1, help="runs; the median is reported")
    args = parse_args(parser, argv)
    from runtime.ray.cluster import ensure_ray

    ensure_ray()
    rows = [run(args.records, args.batch, args.credits) for _ in range(args.repeat)]
    median = median_row(rows, "records_per_s")
    table = markdown_table(rows)
    print(table)
    print(f"\nraw bound (median of {len(rows)}): {median['records_per_s']:,.0f} records/s")
    output_of(args, "ray_pipe_bound").write({"runs": rows, "median_records_per_s": median["records_per_s"]}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
