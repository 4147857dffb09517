"""NexMark cells of `benchmarks.fidelity`: a query's job calibrated, measured and predicted.

The job is `benchmarks.nexmark_job`'s, as `python -m benchmarks.nexmark` runs it (its `Profile`
for the measured executor: parallelism, interval, alignment timeout, latency-run seconds,
full-speed events, warm-up). **Calibrated** per query (on Ray once per round of
`benchmarks.fidelity`): its unaligned latency run on the
measured executor with the barrier trace on (Ray: `CALIBRATION_SECONDS` of events at the NexMark
rate, or the latency runs' length if longer; the simulator: the latency runs' length) and the same job at full speed
(`runtime.calibration.predict.full_speed_records` events), fitted into a `CostProfile`.
**Measured**: `nexmark.run_combination` (latency run + full-speed run), on Ray with a worker
actor per subtask as the calibration runs it (`SIMULATED_RAY_OPTIONS`, the structure the
simulator models; `benchmarks.nexmark`'s default, a worker per pipeline, shares each worker's
GIL among its subtasks, which the simulator does not model). **Predicted**: the same
two runs on the simulator with the profile (`runtime.calibration.predict.predict`), summarised by
`nexmark_job.summarise` as the measured ones are (on the simulator the schedule is anchored at
0, so the warm-up and the commit latencies mean the same), checkpoint durations plus the
profile's coordinator `finalize` time (a simulated coordinator completes at once).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from benchmarks import nexmark
from benchmarks.modes_outcome import Combination
from benchmarks.nexmark_job import on_time
from benchmarks.report import local_checkpoint_dir
from runtime.calibration.fit import fit_profile
from runtime.calibration.predict import SIMULATED_RAY_OPTIONS, full_speed_records, predict
from runtime.calibration.profile import CostProfile

QUERIES = ("q5", "q8")
#: seconds of events at the NexMark rate in a calibration run on Ray (warm-up included): the step-cost
#: fit is noisy on a few seconds of wall-clock runs; the simulator's runs are deterministic, and
#: one calibrates with the latency runs' length
CALIBRATION_SECONDS = 10.0
#: row fields holding checkpoint durations (ms), to which a prediction adds the coordinator's finalize time
DURATIONS = ("checkpoint_duration_p50", "checkpoint_duration_p99", "checkpoint_duration_max")


def scenario(query: str) -> str:
    """The scenario name of a query's cells (as `benchmarks.nexmark` names its rows)."""
    return nexmark.PREFIX + query


def bench_profile(measure: str, quick: bool, *, seconds: float | None = None,
                  events: int | None = None) -> nexmark.Profile:
    """`benchmarks.nexmark`'s profile of `measure`, with `seconds` per latency run and `events`
    per full-speed run when given (the warm-up at most a third of the latency run)."""
    profile = nexmark.PROFILES[(measure, quick)]
    if seconds is not None:
        profile = replace(profile, seconds=seconds, warmup=min(profile.warmup, seconds / 3))
    if events is not None:
        profile = replace(profile, events=events)
    return profile


def _run(executor: str, query: Any, mode: str, bench: nexmark.Profile, config: Any, count: int,
         rate: float | None, anchor: float | None, *, trace: bool = False,
         profile: CostProfile | None = None) -> tuple[Any, Any]:
    """One run of the query's job: (its `JobResult`, its job graph). `profile`: predicted with it
    on the simulator; else run on `executor` (Ray: checkpoints to a local directory)."""
    from benchmarks.nexmark_job import build_job, make_env

    def run(storage: str | None) -> tuple[Any, Any]:
        env = make_env(mode, parallelism=bench.parallelism, interval=bench.interval,
                       alignment_timeout=bench.alignment_timeout, storage=storage)
        build_job(env, query, config, count, rate=rate, anchor=anchor)
        name = f"fidelity-{executor}-{query.name}-{mode}"
        graph = env.get_job_graph(name)
        if profile is not None:
            return predict(env, name, profile, trace_barriers=trace), graph
        if executor == "sim":
            return env.execute(name, executor="sim", seed=1, trace_barriers=trace), graph
        return env.execute(name, executor="ray", trace_barriers=trace, **SIMULATED_RAY_OPTIONS), graph

    if executor == "sim" or profile is not None:
        return run(None)
    with local_checkpoint_dir() as storage:
        return run(storage)


def calibrate_query(measure: str, query_name: str, bench: nexmark.Profile,
                    config: Any) -> tuple[CostProfile, dict[str, Any]]:
    """The query's profile fitted from its unaligned latency run on `measure` (see the module
    docstring) and the same job at full speed; (profile, what was run)."""
    from runtime.workloads.nexmark.queries import QUERIES as ALL

    query = ALL[query_name]
    rate = float(config.event_rate)
    seconds = bench.seconds if measure == "sim" else max(bench.seconds, CALIBRATION_SECONDS)
    count = int(rate * seconds)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    if measure == "sim":
        anchor = 0.0
        result, graph = _run(measure, query, "unaligned", bench, config, count, rate, anchor, trace=True)
    else:
        (result, graph), anchor = on_time(
            lambda at: _run(measure, query, "unaligned", bench, config, count, rate, at, trace=True),
            bench.lead, f"calibrate nexmark-{query_name}", result_of=lambda ran: ran[0])
    took = time.perf_counter() - started
    started = time.perf_counter()
    saturated, _ = _run(measure, query, "unaligned", bench, config, min(count, full_speed_records(result)), None, None)
    info = {"job": f"nexmark-{query_name}", "executor": measure, "seconds": round(took, 2),
            "load_average": round(load, 2), "cpus": os.cpu_count(), "records_in": result.metrics.records_in,
            "saturated_records": saturated.metrics.records_in,
            "saturated_seconds": round(time.perf_counter() - started, 2)}
    cores = len(os.sched_getaffinity(0)) if measure == "ray" else None
    profile = fit_profile(result, graph, cores=cores, calibrated=info, since=anchor + bench.warmup,
                          saturated=saturated)
    return profile, info


def with_finalize(row: dict[str, Any], finalize: float) -> dict[str, Any]:
    """`row` with `finalize` seconds (the coordinator's completion, which a simulated coordinator
    does at once) added to each checkpoint duration (ms) it has."""
    out = dict(row)
    for key in DURATIONS:
        if out.get(key) is not None:
            out[key] += finalize * 1e3
    return out


def predict_query(query_name: str, mode: str, bench: nexmark.Profile, profile: CostProfile, config: Any,
                  events: int) -> dict[str, Any]:
    """`nexmark.run_combination`'s row of (query, mode), simulated with `profile`."""
    from benchmarks.nexmark_job import summarise
    from runtime.workloads.nexmark.queries import QUERIES as ALL

    query = ALL[query_name]
    rate = float(config.event_rate)
    latency_events = int(rate * bench.seconds)
    latency_run, _ = _run("sim", query, mode, bench, config, latency_events, rate, 0.0, profile=profile)
    throughput_run, _ = _run("sim", query, mode, bench, config, events, None, None, profile=profile)
    combo = Combination("sim", scenario(query_name), mode, bench.parallelism)
    row = summarise(combo, latency_run, throughput_run, config=config, anchor=0.0, warmup=bench.warmup,
                    events=latency_events, rate=rate, throughput_events=events).row
    return with_finalize(row, profile.finalize)


def measure_query(measure: str, query_name: str, mode: str, bench: nexmark.Profile, config: Any,
                  events: int) -> dict[str, Any]:
    """The measured row of (query, mode) on `measure`: what `benchmarks.nexmark` runs, on Ray with
    the calibration's deployment (`SIMULATED_RAY_OPTIONS`: a worker actor per subtask)."""
    combo = Combination(measure, scenario(query_name), mode, bench.parallelism)
    return nexmark.run_combination(combo, bench, config, events, ray_options=SIMULATED_RAY_OPTIONS).row
