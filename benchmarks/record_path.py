"""The page-view UDF job's per-record path in one process, without Ray: records per second per core.

    python -m benchmarks.record_path [--records N] [--repeat R] [--handover {network,local}] [--profile TOP]
                                     [--out DIR] [--json PATH]

The job is `benchmarks.throughput --job udf` (generator `page_view` -> map `to_app` -> key_by(app)
-> keyed `CountStamped` -> `CollectSink`, parallelism 2, buffers of 1,000 records), built by the same
`build` and run by the same `Task` code the Ray task actors run: two source tasks (read, map,
partition, records -> Arrow buffers) and two count tasks (Arrow buffer -> records, key, keyed
state, the function, the sink). Buffers go straight from a sender's output channel to its
receiver's input gate (as the batch alone, as it arrives from the network; `--handover local`: as
the buffer object, as an in-process channel between tasks of one Ray worker hands it over, so the
receiver gets the producer's records and no batch is built), credits straight back; checkpointing
is off (the barrier and snapshot path is not per record). What is left out is exactly what Ray adds: serialising buffers, actor
calls, threads.

Each side is timed on its own (`time.process_time` around the tasks' `step` calls: CPU seconds, so
other load on the machine slows it less than wall time would): `source_rps` is records per CPU
second of the source tasks, `count_rps` of the count tasks, `total_rps` of both (a record passes
both sides; 1 / total_rps is the per-record CPU of the whole chain). `--profile TOP` runs one more
pass under cProfile and prints the TOP functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from typing import Any

from benchmarks.report import add_output_arguments, add_sized_argument, markdown_table, output_of, parse_args
from benchmarks.throughput import build
from runtime.core.task import Task
from runtime.ray.timers import WallClock
from runtime.records.messages import Buffer, BufferOrEvent
from vocabulary.handles import TaskId
from vocabulary.ports import NoTimers


class _CountingCommitter:
    """A sink's external system that only counts: the committed records per sink."""

    def __init__(self) -> None:
        self.committed: dict[str, list[Any]] = {}

    def stage(self, sink: str, transaction_id: str, records: Any) -> None:
        raise AssertionError("checkpointing is off: nothing is staged")

    def commit(self, sink: str, transaction_id: str, records: Any = None) -> None:
        self.committed.setdefault(sink, []).extend(records.to_pylist() if hasattr(records, "to_pylist")
                                                   else records)


class _Ports:
    """Credits go straight back to the sender."""

    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe

    def buffer_consumed(self, task_id: TaskId, input_channel: int) -> None:
        sender, out_channel = self.pipe.reverse[(task_id, input_channel)]
        self.pipe.tasks[sender].add_credit(out_channel)

    def source_finished(self, task_id: TaskId) -> None:
        pass

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        pass

    def wake(self, task_id: TaskId) -> None:
        pass


class _Pipe:
    """The job's tasks, wired in one process."""

    def __init__(self, records: int, local: bool = False) -> None:
        self.local = local
        graph = build(records, checkpoints=False, job="udf").get_job_graph("record-path")
        self.committer = _CountingCommitter()
        ports = _Ports(self)
        clock = WallClock()  # a Ray task actor's
        self.tasks: dict[TaskId, Task] = {
            task_id: Task(task_id, graph, graph.vertex(task_id.vertex), clock=clock, timers=NoTimers(),
                          ports=ports, committer=self.committer)  # type: ignore[arg-type]
            for task_id in graph.task_ids()
        }
        self.routes = {(r.sender, r.output_channel): (r.receiver, r.input_channel) for r in graph.channel_routes()}
        self.reverse = {receiver: sender for sender, receiver in self.routes.items()}
        self.sources = [self.tasks[t] for t in graph.source_task_ids()]
        self.others = [t for t in self.tasks.values() if not t.is_source]

    def _send(self, task: Task) -> None:
        for out_channel, payload in task.drain_sendable():
            receiver, in_channel = self.routes[(task.task_id, out_channel)]
            if isinstance(payload, Buffer) and not self.local:
                # as it arrives from the network: the batch only (the sender's record cache is not
                # shipped, `Buffer.__reduce__`), so the receiver turns columns into records
                payload = Buffer.of(payload.batch)
            self.tasks[receiver].push(BufferOrEvent(in_channel, payload))

    def run(self) -> tuple[float, float]:
        """Run to the end; CPU seconds spent in the source tasks and in the others."""
        source_cpu = other_cpu = 0.0
        clock = time.process_time
        while not all(t.is_finished for t in self.tasks.values()):
            # a side's CPU includes handing its buffers over: building the batch a hop carries
            for task in self.sources:
                started = clock()
                task.step()
                self._send(task)
                source_cpu += clock() - started
            for task in self.others:
                started = clock()
                while task.step():
                    pass
                self._send(task)
                other_cpu += clock() - started
        return source_cpu, other_cpu


def run_once(records: int, local: bool = False) -> dict[str, Any]:
    pipe = _Pipe(records, local)
    source_cpu, count_cpu = pipe.run()
    output = pipe.committer.committed.get("pv", [])
    assert len(output) == records, f"{len(output)} records reached the sink, expected {records}"
    finals: dict[str, int] = {}
    for r in output:
        finals[r["app"]] = max(finals.get(r["app"], 0), r["count"])
    assert sum(finals.values()) == records, f"final counts add up to {sum(finals.values())}, expected {records}"
    return {
        "records": records,
        "source_cpu_s": source_cpu,
        "count_cpu_s": count_cpu,
        "source_rps": records / source_cpu,
        "count_rps": records / count_cpu,
        "total_rps": records / (source_cpu + count_cpu),
        "us_per_record": (source_cpu + count_cpu) / records * 1e6,
    }


def profile(records: int, top: int, local: bool = False) -> str:
    """cProfile of one run: the `top` functions by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_once(records, local)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser, "record_path")
    add_sized_argument(parser, "--records", full=200_000, quick=20_000, help="records per run")
    add_sized_argument(parser, "--repeat", full=5, quick=1, help="runs; the median is reported")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="also profile one run (cProfile) and print the TOP functions by own time")
    parser.add_argument("--handover", choices=["network", "local"], default="network",
                        help="buffers reach the receiver as from another process (the batch alone; default) "
                             "or as in-process channels hand them over (the buffer object)")
    args = parse_args(parser, argv)
    local = args.handover == "local"
    run_once(min(args.records, 10_000), local)  # warm-up: imports, first-use caches
    rows = [run_once(args.records, local) for _ in range(args.repeat)]
    table = markdown_table(rows)
    print(table)
    summary = {key: statistics.median(r[key] for r in rows) for key in ("source_rps", "count_rps", "total_rps",
                                                                         "us_per_record")}
    print(f"\nmedian of {len(rows)}: {summary['total_rps']:,.0f} records per CPU second over both sides "
          f"({summary['us_per_record']:.2f} µs per record; source {summary['source_rps']:,.0f}/s, "
          f"count {summary['count_rps']:,.0f}/s)")
    payload: dict[str, Any] = {"runs": rows, "median": summary}
    if args.profile:
        payload["profile"] = profile(args.records, args.profile, local)
        print(payload["profile"])
    output_of(args, "record_path").write(payload, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
