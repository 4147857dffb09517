"""Page-view job throughput and latency on an executor, checkpointing aligned vs off.

    python -m benchmarks.throughput [--executor ray|sim] [--job udf|vectorised] [--records N]
                                    [--rate 5000] [--steady-seconds S] [--warmup 2] [--repeat 3]
                                    [--unchained] [--slots 1 2] [--sink collect discard]
                                    [--address HOST:PORT --checkpoint-dir URI] [--json PATH]

The page-view job, parallelism 2, in two forms (`--job`):

* `udf` (default): generator `fn(i)` -> `map` to app -> key_by(app) -> a keyed Python function
  counting per app -> CollectSink: every record is a dict through per-record Python functions.
* `vectorised`: generator `batch_fn(indices)` -> `map_batches` to app -> key_by(app) -> `count()`
  -> CollectSink: Arrow batches end to end, no dict per record (network buffers of 10,000 records
  unless `--buffer-size`).

`--unchained` runs every operator as its own task (source, to-app, count, sink: 8 tasks), so
four of them are listener-less tasks downstream of the sources (what completion notifications
riding on barriers saves: `runtime.jobmaster.coordination.completions`).

`--slots N [N ...]` (Ray) runs the job with `slots_per_worker=N` (`runtime.ray.slots`: tasks per
worker actor; `pipeline`, the default, is Ray's default: one worker per pipeline, here 2 tasks
chained, 4 unchained), each value in every repeat, interleaved, and reports every figure per value
(`slots` column; one summary row per value). Every checkpointed run reports
`calls_per_checkpoint`: the coordinator actor's calls (triggers and notifications to the
workers, acknowledgements from them, commits: `JobMetrics.coordinator_calls`; with sockets the
triggers and acknowledgements that went as frames count too) per checkpoint.

`--sink collect discard` runs the job into its exactly-once `CollectSink` and into a
`DiscardingSink`, interleaved as `--slots`, and reports each (`sink` column). With checkpoints the
`CollectSink` stages every checkpoint's records in the committer during the run; without, it
commits them all at end of input, after the last record was counted. The discarding runs show
what the checkpoints cost the job without that sink work, as the peers measure with their
discarding sinks (`benchmarks.peers`); they commit nothing, so they have no visible throughput,
their throughput runs to the last record counted in both jobs, and the run checks the keyed counts
instead of the output.

Checkpoints go to a fresh local directory per run on Ray (as `barrierflow demo` does).

`--address HOST:PORT` runs every Ray run (and the raw bound) on that Ray cluster instead of a local
Ray started for the benchmark (this process must run on one of its nodes), so the figures next to
a local run's say what the hops between nodes cost; `--checkpoint-dir URI` is where its runs
checkpoint, each run under a job name of its own (a cluster of several nodes needs storage every
node reaches, e.g. `s3://bucket/prefix`). CPU per checkpoint is not measured there: the job's
processes are spread over the nodes (`--no-cpu` is implied). The output is named
`throughput_ray_cluster[_<job>]`.

* **max rate**, checkpoints every 100 ms aligned, and checkpointing off: throughput is records
  divided by the span from the first record created to the last record counted (actor start-up
  and teardown excluded). The ratio aligned/off is the cost of aligned checkpointing.
  On Ray, `visible_records_per_s` divides by the span to the last *commit* instead: when the
  output became visible. Without checkpoints the exactly-once sink stages and commits all its
  records at end of input, after the last record was counted, so the first figure leaves that
  sink work out for "off" only; `aligned_vs_off_visible` compares like with like.
  `write_cpu_us_per_record`: the CPU the tasks' writer threads spent on the completed
  checkpoints (`SubtaskCheckpointStats.async_cpu`: serialising and writing the snapshots, and
  the sinks' stages: turning a checkpoint's records into Arrow and sending them to the committer),
  per record of the run, in µs (0 on the simulator, which measures no CPU); the summary's
  `aligned_write_cpu_us_per_record` is its median over the max-rate aligned runs.
* **steady**: the generator paced at `--rate` records/s with checkpoints every 100 ms aligned;
  p50/p99 end-to-end latency and checkpoint durations. The latency of a record is from the time
  it was *due* under the rate schedule (`generate(stamp="due")`: record k of a split is due
  k / (rate / splits) seconds after that split's reader was created, as if an external stream
  delivered it then) to its arrival at the task holding the count and the sink (before the
  count runs: `Task._run_chain`, the wall clock of that actor). So it includes the source's own
  delay in waking up and reading it, the wait for a partly filled buffer (up to the 5 ms
  `buffer_timeout`), the Ray call and thread hand-offs to the count task, queueing behind earlier
  buffers and barrier alignment; it excludes the count itself, the sink's staging and the commit
  (when the output becomes visible: a checkpoint later). Records due in the first `--warmup`
  seconds (default 2 s) after the earliest due stamp a count task saw are left out
  (`StreamEnvironment.set_latency_warmup`; counted in `warmup_records`): the schedule runs from the
  moment each reader is created, so what is due while the actors still start would otherwise read
  as latency (p99 216–280 ms measured so). A fixed time rather than "until the first checkpoint
  completed": the runs without checkpoints are measured over the same records, the rule is the one
  `benchmarks.checkpoint_modes` uses (`measured_since`), and it does not depend on the checkpoint
  timing being measured. `messages_per_checkpoint`: control messages per completed checkpoint, counted
  by the tasks (triggers, acknowledgements, declines, aborts, non-final completion notifications and
  the one global commit; `JobMetrics.calls_per_checkpoint`, both executors): with one subtask per
  worker each is one Ray call; with slots the Ray calls are fewer (`calls_per_checkpoint`).
  `load_1m`: the machine's load average when the run ended.
* **CPU per checkpoint** (Ray, unless `--no-cpu`): each repeat also runs the steady job with
  checkpointing off. In both steady runs `benchmarks.process_cpu` samples the CPU of every job
  process (the driver and the raylet's workers: task, coordinator and service actors) every
  100 ms; over the window from 20 % to 90 % of the run's input (start-up and the final drain left
  out) `cpu_per_checkpoint_ms` = (CPU rate on - CPU rate off) x window / checkpoints completed in
  the window, also per process role (`cpu_per_checkpoint_ms_<role>`: driver, WorkerActor (the tasks),
  CoordinatorActor, ...). `cpu_cores` is each run's CPU rate (1.0: one core busy). Measured
  figures and a profile of the per-record path: `benchmarks/README.md`. A stable cost figure next
  to the noisy throughput ratio; the median over the repeats is reported.

On Ray the raw bound (`benchmarks.ray_pipe_bound`, unless `--no-bound`) is measured in the same
run, one bound run after each aligned/off pair: this machine's speed drifts over minutes, and a
bound measured minutes apart from the runs it is compared with moved the ratio by ±25 %. Ratios
are reported as medians over the repeats and, per repeat (`ratios`), run against its neighbours.
Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import uuid
from typing import Any

from benchmarks.process_cpu import CpuSampler, cpu_per_checkpoint, raylet_pid, window_cpu
from benchmarks.report import (
    add_output_arguments,
    add_sized_argument,
    local_checkpoint_dir,
    markdown_table,
    median_row,
    output_of,
    parse_args,
)
from runtime.ray.data_links import DATA_TRANSPORTS, DEFAULT_DATA_TRANSPORT
from runtime.ray.slots import PIPELINE, Slots, SlotsError, check_slots

APPS = 50


def page_view(i: int) -> dict[str, Any]:
    return {"app": f"app{(i * 7919) % APPS}", "user": i % 10_000}


def to_app(record: dict[str, Any]) -> dict[str, Any]:
    return {"app": record["app"], "created_at": record["created_at"]}


_APP_NAMES: Any = None


def page_views_batch(indices: Any) -> dict[str, Any]:
    """The vectorised `page_view`: the same records, as columns."""
    import pyarrow as pa

    global _APP_NAMES
    if _APP_NAMES is None:
        _APP_NAMES = pa.array([f"app{a}" for a in range(APPS)])
    return {"app": _APP_NAMES.take(pa.array((indices * 7919) % APPS)), "user": pa.array(indices % 10_000)}


def to_app_batch(batch: Any) -> Any:
    """The vectorised `to_app`."""
    return batch.select(["app", "created_at"])


JOBS = ("udf", "vectorised")
#: checkpoint modes `build` takes (`checkpoint.modes` names)
MODES = ("aligned", "unaligned", "at-least-once")
#: network buffer size per job unless `--buffer-size`
BUFFER_SIZES = {"udf": 1000, "vectorised": 10_000}
#: the job's sink (`--sink`): the exactly-once `CollectSink`, or a `DiscardingSink` (as the peers'
#: discarding sinks), which stages and commits nothing
SINKS = ("collect", "discard")


def build(records: int, *, checkpoints: bool, rate: float | None = None, buffer_size: int | None = None,
          buffer_timeout: float = 0.005, job: str = "udf", mode: str = "aligned",
          storage: str | None = None, credits: int = 8, chaining: bool = True, warmup: float = 0.0,
          sink: str = "collect") -> Any:
    """The page-view job (`job`: "udf" or "vectorised"); `mode` (with `checkpoints`): "aligned",
    "unaligned" or "at-least-once"; checkpoints in `storage` (None: in memory); `chaining=False`:
    every operator its own task (8 tasks instead of 4); `sink`: one of `SINKS`. With a `rate`
    records are stamped when due and the first `warmup` seconds of them are left out of the
    latencies; without, when read."""
    from checkpoint.modes import parse_mode
    from operators import CollectSink, DiscardingSink, KeyedProcessFunction
    from runtime import StreamEnvironment

    class CountStamped(KeyedProcessFunction):
        def process_element(self, record: dict[str, Any], ctx: Any):
            count = ctx.value_state("count", default=0)
            n = count.value() + 1
            count.update(n)
            yield {"app": ctx.key, "count": n, "created_at": record["created_at"], "done_at": ctx.now()}

    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    if sink not in SINKS:
        raise ValueError(f"sink must be one of {SINKS}, got {sink!r}")
    sink_operator = DiscardingSink("pv") if sink == "discard" else CollectSink("pv")
    stamp = "due" if rate else "read"
    size = buffer_size or BUFFER_SIZES[job]
    env = StreamEnvironment(parallelism=2, buffer_size=size, credits=credits, buffer_timeout=buffer_timeout)
    env.set_latency_warmup(warmup)
    if not chaining:
        env.disable_chaining()
    if checkpoints:
        env.enable_checkpointing(interval=0.1, tolerable_failures=100, storage=storage,
                                 **parse_mode(mode, accepted=MODES).checkpointing())
    if job == "vectorised":
        (
            env.generate(count=records, rate=rate, batch_fn=page_views_batch, stamp=stamp)
            .map_batches(to_app_batch, name="to-app")
            .key_by("app")
            .count(name="count")
            .sink_to(sink_operator)
        )
        return env
    (
        env.generate(count=records, rate=rate, fn=page_view, stamp=stamp)
        .map(to_app, name="to-app")
        .key_by("app")
        .process(CountStamped(), name="count")
        .sink_to(sink_operator)
    )
    return env


def execute(executor: str, records: int, job_name: str = "pageview-bench", slots: Slots = PIPELINE,
            checkpoint_dir: str | None = None, data_transport: str = DEFAULT_DATA_TRANSPORT, **build_args: Any) -> tuple[Any, float]:
    """Build the job (`build`'s arguments) and run it (on Ray with `slots_per_worker=slots` and
    `data_transport`); on Ray it checkpoints to a fresh local directory, or in `checkpoint_dir`
    under a job name of its own. Returns the `JobResult` and the wall seconds of `execute`."""
    options = {"slots_per_worker": slots, "data_transport": data_transport} if executor == "ray" else {}
    if checkpoint_dir is not None:
        job_name = f"{job_name}-{uuid.uuid4().hex[:12]}"
    with local_checkpoint_dir() if checkpoint_dir is None else contextlib.nullcontext(checkpoint_dir) as storage:
        env = build(records, storage=storage if executor == "ray" else None, **build_args)
        started = time.time()
        result = env.execute(job_name, executor=executor, **options)
        return result, time.time() - started


#: the part of a steady run's input (by creation time) over which its CPU is measured
CPU_WINDOW = (0.2, 0.9)


def run(executor: str, records: int, *, checkpoints: bool, rate: float | None = None, job: str = "udf",
        mode: str = "aligned", buffer_size: int | None = None, credits: int = 8,
        cpu_of: int | None = None, chaining: bool = True, slots: Slots = PIPELINE,
        warmup: float = 0.0, checkpoint_dir: str | None = None, data_transport: str = DEFAULT_DATA_TRANSPORT,
        sink: str = "collect") -> dict[str, Any]:
    """One run's row; with `cpu_of` (a raylet's PID) and `rate`, also the job's CPU rate over
    `CPU_WINDOW` of the steady input (`cpu_cores`, `cpu_window_s`, `window_checkpoints`)."""
    if cpu_of is not None and not rate:
        raise ValueError("cpu_of needs a steady rate: the CPU window is a share of the paced input")
    sampler = CpuSampler(cpu_of) if cpu_of is not None else contextlib.nullcontext()
    with sampler:
        result, wall = execute(executor, records, checkpoints=checkpoints, rate=rate, job=job, mode=mode,
                               buffer_size=buffer_size, credits=credits, chaining=chaining, slots=slots,
                               warmup=warmup if rate else 0.0, checkpoint_dir=checkpoint_dir,
                               data_transport=data_transport, sink=sink)
    problem = unaccounted(result, records, sink)
    assert problem is None, problem
    output = result.output("pv")
    if job == "udf" and sink == "collect":
        first = min(r["created_at"] for r in output)
        last = max(r["done_at"] for r in output)
        throughput = records / (last - first) if last > first else 0.0
    else:  # first record created -> last record reached the count task (as above, without the output)
        throughput = result.metrics.end_to_end_throughput or 0.0
    metrics = result.metrics
    visible = None
    if metrics.last_commit_at is not None and metrics.first_created_at is not None:
        visible = records / (metrics.last_commit_at - metrics.first_created_at)
    durations = [c.duration for c in result.completed_checkpoints]
    cpu: dict[str, Any] = {}
    if isinstance(sampler, CpuSampler) and rate:
        if metrics.first_created_at is None:
            raise ValueError("the steady run's records carry no created_at stamps: no CPU window")
        span = records / rate
        window = window_cpu(sampler.snapshots, metrics.first_created_at + CPU_WINDOW[0] * span,
                            metrics.first_created_at + CPU_WINDOW[1] * span)
        cpu = {"cpu_cores": window.rate, "cpu_window_s": window.seconds,
               "cpu_cores_by_role": {role: cpu_s / window.seconds for role, cpu_s in window.by_role.items()},
               "window_checkpoints": sum(window.start <= c.trigger_time + c.duration <= window.end
                                         for c in result.completed_checkpoints)}
    calls = metrics.coordinator_calls
    return {
        "executor": executor,
        "job": job,
        "slots": slots,
        "data_transport": data_transport,
        "sink": sink,
        "run": ("steady" if rate else "max rate") + (f" {mode}" if checkpoints else " no checkpoints"),
        "records": records,
        "records_per_s": throughput,
        "visible_records_per_s": visible,
        "latency_p50_ms": _ms(metrics.latency_percentile(50)),
        "latency_p99_ms": _ms(metrics.latency_percentile(99)),
        "latency_max_ms": _ms(metrics.latencies.max if len(metrics.latencies) else None),
        "warmup_records": metrics.latency_warmup_records,
        "checkpoints": len(durations),
        "messages_per_checkpoint": metrics.calls_per_checkpoint(len(durations)),
        "checkpoint_p50_ms": _ms(statistics.median(durations)) if durations else None,
        "write_cpu_us_per_record": write_cpu_per_record(result.completed_checkpoints, records) if durations else None,
        "alignment_max_ms": _ms(max((c.alignment_time for c in result.completed_checkpoints), default=0.0)),
        "calls_per_checkpoint": (sum(calls.get(k, 0) for k in ("control", "control frames", "report", "commit")) / len(result.checkpoints)
                                 if calls and result.checkpoints else None),
        "wall_s": wall,
        "load_1m": os.getloadavg()[0],
        **cpu,
    }


def write_cpu_per_record(completed: list[Any], records: int) -> float:
    """µs of writer-thread CPU per record: every subtask's `async_cpu` of the `completed`
    checkpoints (`checkpoint.stats.CheckpointStats`), over the run's `records`."""
    return sum(s.async_cpu for c in completed for s in c.subtasks.values()) / records * 1e6


def unaccounted(result: Any, records: int, sink: str) -> str | None:
    """What is wrong with the output of a run of `records` into `sink` (None: every record counted
    once): a `CollectSink` committed each record, its final counts add up; a `DiscardingSink`
    committed nothing, and the keyed counts say every record was counted."""
    output = result.output("pv")
    if sink == "discard":
        if output:
            return f"{len(output)} records committed into a DiscardingSink"
        counts = result.final_state["count"]["count"]
    else:
        if len(output) != records:
            return f"{len(output)} records committed, expected {records}"
        counts = {}
        for r in output:
            counts[r["app"]] = max(counts.get(r["app"], 0), r["count"])
    if sum(counts.values()) != records:
        return f"final counts add up to {sum(counts.values())}, expected {records}"
    return None


def cpu_cost(on_row: dict[str, Any], off_row: dict[str, Any]) -> dict[str, Any]:
    """CPU per checkpoint from a steady run with checkpoints (`on_row`) and one without."""
    per = cpu_per_checkpoint(on_row["cpu_cores"], off_row["cpu_cores"], on_row["window_checkpoints"],
                             on_row["cpu_window_s"])
    per_role = {}
    for role in sorted(on_row["cpu_cores_by_role"].keys() | off_row["cpu_cores_by_role"].keys()):
        extra = on_row["cpu_cores_by_role"].get(role, 0.0) - off_row["cpu_cores_by_role"].get(role, 0.0)
        per_role[f"cpu_per_checkpoint_ms_{role}"] = _ms(cpu_per_checkpoint(
            extra, 0.0, on_row["window_checkpoints"], on_row["cpu_window_s"]))
    return {"cpu_cores_on": on_row["cpu_cores"], "cpu_cores_off": off_row["cpu_cores"],
            "window_checkpoints": on_row["window_checkpoints"], "cpu_per_checkpoint_ms": _ms(per), **per_role}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="ray", choices=["ray", "sim"])
    parser.add_argument("--job", default="udf", choices=JOBS)
    parser.add_argument("--buffer-size", type=int, default=None,
                        help=f"records per network buffer (default {BUFFER_SIZES})")
    parser.add_argument("--credits", type=int, default=8, help="buffers in flight per channel (default 8)")
    parser.add_argument("--records", type=int, default=None,
                        help="records per max-rate run (default 400,000, vectorised 4,000,000; a tenth with --quick)")
    parser.add_argument("--rate", type=float, default=5000.0, help="records/s of the steady run (default 5000)")
    add_sized_argument(parser, "--steady-seconds", full=10.0, quick=2.0, type=float, help="length of the steady run, s")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="seconds of due records at the start of a steady run left out of its latencies (default 2)")
    add_sized_argument(parser, "--repeat", full=3, quick=1, help="interleaved repeats; medians are reported")
    parser.add_argument("--no-bound", action="store_true", help="skip the raw Ray bound")
    parser.add_argument("--unchained", action="store_true",
                        help="every operator its own task: source, to-app, count, sink (8 tasks)")
    parser.add_argument("--no-cpu", action="store_true", help="skip CPU per checkpoint (the steady runs without checkpoints)")
    parser.add_argument("--slots", type=slots_argument, nargs="+", default=[PIPELINE], metavar="N",
                        help="Ray: tasks per worker actor (slots_per_worker: N >= 1, or 'pipeline' for one worker "
                        "per pipeline, Ray's default); several values run interleaved (default pipeline)")
    parser.add_argument("--data-transport", nargs="+", default=[DEFAULT_DATA_TRANSPORT], choices=DATA_TRANSPORTS,
                        help="Ray: how data calls go between workers, Ray actor calls or sockets "
                        f"(`data_transport`); several values run interleaved, as --slots (default {DEFAULT_DATA_TRANSPORT})")
    parser.add_argument("--sink", nargs="+", default=["collect"], choices=SINKS,
                        help="the job's sink: the exactly-once CollectSink, or a DiscardingSink that stages and "
                        "commits nothing (as the peers' sinks); several values run interleaved, as --slots "
                        "(default collect)")
    parser.add_argument("--address", metavar="HOST:PORT",
                        help="Ray: run on this Ray cluster (from one of its nodes) instead of a local Ray; "
                        "implies --no-cpu")
    parser.add_argument("--checkpoint-dir", metavar="URI",
                        help="Ray: checkpoint storage of every run, each under a job name of its own (default: a "
                        "fresh local directory per run; a cluster of several nodes needs one they all reach)")
    add_output_arguments(parser, "throughput_<executor>[_cluster][_<job>]")
    args = parse_args(parser, argv)
    if args.executor != "ray" and (args.slots != [PIPELINE] or args.data_transport != [DEFAULT_DATA_TRANSPORT]):
        parser.error("--slots and --data-transport apply to --executor ray only")
    if args.executor != "ray" and (args.address or args.checkpoint_dir):
        parser.error("--address and --checkpoint-dir apply to --executor ray only")
    nodes = None
    if args.executor == "ray":
        nodes = _join_ray(parser, args.address, args.checkpoint_dir)
    records = args.records or (4_000_000 if args.job == "vectorised" else 400_000) // (10 if args.quick else 1)
    if not 0 <= args.warmup < args.steady_seconds:
        parser.error(f"--warmup must be >= 0 and shorter than --steady-seconds ({args.steady_seconds}), "
                     f"got {args.warmup}")
    kw = {"job": args.job, "buffer_size": args.buffer_size, "credits": args.credits, "chaining": not args.unchained,
          "checkpoint_dir": args.checkpoint_dir}
    with_bound = args.executor == "ray" and not args.no_bound
    with_cpu = args.executor == "ray" and not args.no_cpu and not args.address
    raylet = raylet_pid() if with_cpu else None
    steady_records = int(args.rate * args.steady_seconds)
    costs: list[dict[str, Any]] = []
    if with_bound:
        from benchmarks.ray_pipe_bound import run as bound_run
    variants = [(slots, transport, sink) for slots in args.slots for transport in args.data_transport
                for sink in args.sink]
    rows: list[dict[str, Any]] = []
    bounds: list[dict[str, Any]] = []
    per_repeat: list[dict[str, Any]] = []
    for i in range(args.repeat):  # interleaved, so machine noise hits both modes (and the bound) alike
        if with_bound:
            bounds.append(bound_run(records, args.buffer_size or BUFFER_SIZES[args.job], args.credits))
        for slots, transport, sink in variants:  # ... and every slots value, transport and sink alike
            kw_slots = {**kw, "slots": slots, "data_transport": transport, "sink": sink}
            aligned_row = run(args.executor, records, checkpoints=True, **kw_slots)
            off_row = run(args.executor, records, checkpoints=False, **kw_slots)
            rows += [aligned_row, off_row]
            ratios = {"repeat": i + 1, "slots": slots, "data_transport": transport, "sink": sink,
                      "aligned_vs_off": aligned_row["records_per_s"] / off_row["records_per_s"]}
            if aligned_row["visible_records_per_s"] and off_row["visible_records_per_s"]:
                ratios["aligned_vs_off_visible"] = (aligned_row["visible_records_per_s"]
                                                    / off_row["visible_records_per_s"])
            if with_bound:
                ratios["aligned_vs_bound"] = aligned_row["records_per_s"] / bounds[-1]["records_per_s"]
            if with_cpu:
                steady_kw = {"rate": args.rate, "cpu_of": raylet, "warmup": args.warmup, **kw_slots}
                on_row = run(args.executor, steady_records, checkpoints=True, **steady_kw)
                off_row = run(args.executor, steady_records, checkpoints=False, **steady_kw)
                rows += [on_row, off_row]
                costs.append(cost := {"slots": slots, "data_transport": transport, "sink": sink,
                                      **cpu_cost(on_row, off_row)})
                ratios |= {key: value for key, value in cost.items() if key.startswith("cpu_per_checkpoint_ms")}
                ratios["calls_per_checkpoint"] = on_row["calls_per_checkpoint"]
            per_repeat.append(ratios)
    if not with_cpu:
        for slots, transport, sink in variants:
            rows.append(run(args.executor, steady_records, checkpoints=True, rate=args.rate, warmup=args.warmup, **kw,
                            slots=slots, data_transport=transport, sink=sink))
    summaries = [_summary(rows, costs, bounds, variant, args.rate, args.warmup) for variant in variants]
    if args.address:
        summaries = [{"address": args.address, "nodes": nodes, **summary} for summary in summaries]
    summary = summaries[0]
    table = f"{markdown_table(rows)}\n\n{markdown_table(per_repeat)}\n\n{markdown_table(summaries)}"
    print(table)
    suffix = ("_cluster" if args.address else "") + ("" if args.job == "udf" else f"_{args.job}")
    output_of(args, f"throughput_{args.executor}{suffix}").write(
        {"runs": rows, "bounds": bounds, "ratios": per_repeat, "summary": summary, "summaries": summaries}, table)
    return 0


def _join_ray(parser: argparse.ArgumentParser, address: str | None, checkpoint_dir: str | None) -> int:
    """Start a local Ray, or join the cluster at `address`, once for every run (and the bound);
    the number of nodes. A cluster of several nodes needs checkpoint storage they all reach."""
    from runtime.ray.cluster import alive_nodes, ensure_ray
    from runtime.ray.storage import is_node_local

    ensure_ray(address)
    nodes = len(alive_nodes())
    if nodes > 1 and (checkpoint_dir is None or is_node_local(checkpoint_dir)):
        parser.error(f"--address {address}: the cluster has {nodes} nodes, so --checkpoint-dir must be storage every "
                     f"node reaches (e.g. s3://bucket/prefix), got {checkpoint_dir or 'none (a local directory)'}")
    return nodes


def slots_argument(text: str) -> Slots:
    """`--slots`' values: an int >= 1 or "pipeline"."""
    try:
        return check_slots(text if text == PIPELINE else int(text))
    except (ValueError, SlotsError) as exc:
        raise argparse.ArgumentTypeError(f"an int >= 1 or {PIPELINE!r}, got {text!r}") from exc


def _summary(rows: list[dict[str, Any]], costs: list[dict[str, Any]], bounds: list[dict[str, Any]],
             variant: tuple[Slots, str, str], rate: float, warmup: float) -> dict[str, Any]:
    """Medians over the repeats of one variant's runs (slots value, transport, sink)."""
    slots, transport, sink = variant
    rows = [r for r in rows if (r["slots"], r["data_transport"], r["sink"]) == variant]

    def median(run_name: str, column: str = "records_per_s") -> float:
        return median_row([r for r in rows if r["run"] == run_name], column)[column]

    steady_runs = [r for r in rows if r["run"] == "steady aligned"]
    steady = median_row(steady_runs, "latency_p99_ms")
    aligned, off = median("max rate aligned"), median("max rate no checkpoints")
    summary: dict[str, Any] = {
        "slots": slots,
        "data_transport": transport,
        "sink": sink,
        "aligned_records_per_s": aligned,
        "off_records_per_s": off,
        "aligned_vs_off": aligned / off if off else None,
    }
    if written := [r for r in rows if r["run"] == "max rate aligned" and r["write_cpu_us_per_record"] is not None]:
        summary["aligned_write_cpu_us_per_record"] = median_row(written, "write_cpu_us_per_record")[
            "write_cpu_us_per_record"]
    if all(r["visible_records_per_s"] for r in rows):
        aligned_v = median("max rate aligned", "visible_records_per_s")
        off_v = median("max rate no checkpoints", "visible_records_per_s")
        summary["aligned_vs_off_visible"] = aligned_v / off_v
    summary |= {
        "steady_rate": rate,
        "steady_warmup_s": warmup,
        "steady_latency_p50_ms": steady["latency_p50_ms"],
        "steady_latency_p99_ms": steady["latency_p99_ms"],
        # the spread over the repeats: every steady aligned run's figures
        "steady_latency_p50_ms_runs": [_round(r["latency_p50_ms"]) for r in steady_runs],
        "steady_latency_p99_ms_runs": [_round(r["latency_p99_ms"]) for r in steady_runs],
        "messages_per_checkpoint": median_row(steady_runs, "messages_per_checkpoint")["messages_per_checkpoint"]
        if steady_runs and all(r["messages_per_checkpoint"] is not None for r in steady_runs) else None,
        "load_1m_runs": [_round(r["load_1m"]) for r in rows],
    }
    checkpointed = [r for r in steady_runs if r["calls_per_checkpoint"] is not None]
    if checkpointed:
        summary["calls_per_checkpoint"] = median_row(checkpointed, "calls_per_checkpoint")["calls_per_checkpoint"]
    if measured := [c for c in costs if (c["slots"], c["data_transport"], c["sink"]) == variant
                    and c["cpu_per_checkpoint_ms"] is not None]:
        middle = median_row(measured, "cpu_per_checkpoint_ms")  # one repeat's figures, consistent
        summary |= {key: value for key, value in middle.items()
                    if key not in ("window_checkpoints", "slots", "data_transport", "sink")}
    if bounds:
        summary["raw_bound_records_per_s"] = median_row(bounds, "records_per_s")["records_per_s"]
        summary["aligned_vs_bound"] = aligned / summary["raw_bound_records_per_s"]
        summary["off_vs_bound"] = off / summary["raw_bound_records_per_s"]
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
