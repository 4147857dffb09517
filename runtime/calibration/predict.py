"""Calibrate a job (run it for real, fit a profile) and predict runs of it on the simulator.

`calibrate` runs the job once with unaligned exactly-once checkpoints and the barrier trace on
(on Ray with one worker actor per task, the structure the simulator models:
`SIMULATED_RAY_OPTIONS`; unaligned barriers overtake queued data, so their transit times measure the transport, see
`runtime.calibration.fit`), then, when its sources read at a rate, briefly at full speed (the
same job, its generators unthrottled: `at_full_speed`), and fits the profile from both. Around
both runs it watches the machine (`runtime.calibration.machine_load`) and records in the profile
whether other processes contended with the measurement, and which of the fitted costs the job
could not keep up with (`runtime.calibration.feasibility`), both as `calibrated.warnings`.
`predict` runs a job on the simulator with a profile's cost model; `figures` summarises any run
the same way for both.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from collections.abc import Mapping
from typing import Any

from operators.sources import GeneratorSource
from runtime.calibration.feasibility import TaskRate, cannot_keep_up, task_rates
from runtime.calibration.fit import fit_profile
from runtime.calibration.machine_load import LoadSampler, MachineLoad
from runtime.calibration.profile import CostProfile
from runtime.jobmaster.registry import get_executor

#: wall seconds a calibration run may take on Ray before it is failed as too long
CALIBRATION_LIMIT = 60.0
#: Ray options of a calibration run: one worker actor per task, the structure the simulator models
#: (each channel a hop between processes, each acknowledgement a call of its own); Ray's default
#: packs a pipeline into one worker, whose in-process channels and batched acknowledgements the
#: simulator does not model
SIMULATED_RAY_OPTIONS: dict[str, Any] = {"slots_per_worker": 1}
#: checkpoint interval of a calibration run when the job sets none (seconds)
CALIBRATION_INTERVAL = 0.05
#: seconds' worth of the calibration run's records (at its rate) that its full-speed run reads
SATURATED_SECONDS = 5.0
#: credits per channel of a prediction whose profile measured `in_flight_records`
SIM_CREDITS = 8
#: buffers a backpressured channel of the simulator holds ahead of an aligned barrier at
#: `SIM_CREDITS` credits and a `SIM_BUFFER_TIMEOUT` buffer timeout, independent of the buffer
#: size (measured on `benchmarks.checkpoint_modes`' backpressure job: 7.33 and 7.39 buffers for
#: buffers of 655 and 1,310 records; the barrier flushes partly filled buffers, so the credited
#: ones are ~3/4 full; with a 5 ms timeout the buffers are cut by time and the ratio is not constant)
SIM_BUFFERS_AHEAD = 7.4
#: buffer timeout of a prediction whose profile measured `in_flight_records` but no timeout
SIM_BUFFER_TIMEOUT = 0.1
#: the figures `figures` reports, in print order
METRICS = ("throughput", "latency_p50", "latency_p99", "checkpoint_duration_p50", "checkpoint_duration_p99",
           "alignment_time_p50", "persisted_bytes")


def calibration_env(env: Any) -> Any:
    """`env` with unaligned exactly-once checkpoints (its own interval, else
    `CALIBRATION_INTERVAL`): the checkpoints whose barriers measure the transport."""
    from vocabulary.options import CheckpointingMode

    config = env.checkpoint_config
    env.checkpoint_config = dataclasses.replace(
        config, interval=config.interval if config.enabled else CALIBRATION_INTERVAL,
        mode=CheckpointingMode.EXACTLY_ONCE, unaligned=True, alignment_timeout=None)
    env.checkpoint_config.validate()
    return env


def calibrate(env: Any, job_name: str, *, executor: str = "ray", cores: int | None = None, warmup: float | None = None,
              calibrated: dict[str, Any] | None = None, **options: Any) -> tuple[CostProfile, Any]:
    """Run the job `env` built on `executor` once (see the module docstring) and fit a profile.

    Args:
        cores: cores the tasks share (None: this machine's CPUs on Ray; `options["costs"].cores`
            on the simulator).
        warmup: seconds after the first checkpoint's trigger whose checkpoints are left out
            (None: 1 s on Ray, where actors are still starting; 0 on the simulator).
        options: passed to `env.execute` (the simulator's `costs`/`network`, Ray's `address`...).

    Returns:
        (profile, the calibration run's `JobResult`).
    """
    calibration_env(env)
    graph = env.get_job_graph(job_name)
    if executor == "ray":
        options.setdefault("max_duration", CALIBRATION_LIMIT)
        for key, value in SIMULATED_RAY_OPTIONS.items():
            options.setdefault(key, value)
        cores = cores if cores is not None else len(os.sched_getaffinity(0))
    elif cores is None and options.get("costs") is not None:
        cores = options["costs"].cores
    load = os.getloadavg()[0]
    with LoadSampler() as sampler:
        started = time.perf_counter()
        result = env.execute(job_name, executor=executor, trace_barriers=True, **options)
        seconds = time.perf_counter() - started
        full = at_full_speed(graph, full_speed_records(result))
        saturated = None
        if full is not None:
            started = time.perf_counter()
            saturated = get_executor(executor)(full, **options)
            saturated_seconds = time.perf_counter() - started
    first = min((c.trigger_time for c in result.checkpoints), default=0.0)
    since = first + (warmup if warmup is not None else (1.0 if executor == "ray" else 0.0))
    info = {"job": job_name, "executor": executor, "parallelism": env.parallelism,
            "interval": env.checkpoint_config.interval, "records_in": result.metrics.records_in,
            "seconds": round(seconds, 3), "load_average": round(load, 2), "cpus": os.cpu_count()}
    if saturated is not None:
        info.update(saturated_records=saturated.metrics.records_in, saturated_seconds=round(saturated_seconds, 3))
    info.update(calibrated or {})
    profile = fit_profile(result, graph, cores=cores, calibrated=info, since=since,
                          link_delays=options.get("link_delays"), saturated=saturated)
    judge(profile, sampler.result, interval=env.checkpoint_config.interval, rates=task_rates(result, graph))
    return profile, result


def judge(profile: CostProfile, machine: MachineLoad | None, *, interval: float | None,
          rates: Mapping[str, TaskRate]) -> CostProfile:
    """Record in `profile.calibrated` how busy the machine was while it was measured
    (`machine_load`, `contended`) and every warning: the contention's causes and the cost terms the
    job cannot keep up with (`runtime.calibration.feasibility`), in `warnings`. Returns `profile`."""
    warnings = []
    if machine is not None:
        profile.calibrated["machine_load"] = machine.to_json()
        profile.calibrated["contended"] = machine.contended
        warnings += [f"contended measurement: {w}; the profile's costs include theirs (calibrate on an otherwise "
                     "idle machine)" for w in machine.warnings()]
    warnings += [f"cannot keep up: {w}" for w in cannot_keep_up(profile, interval=interval, rates=rates)]
    profile.calibrated["warnings"] = warnings
    return profile


def full_speed_records(result: Any) -> int:
    """Records the full-speed run of a calibration reads: `SATURATED_SECONDS` of `result`'s rate
    (at least 1,000)."""
    metrics = result.metrics
    rate = metrics.records_in / metrics.duration if metrics.duration > 0 else 0.0
    return max(1000, round(rate * SATURATED_SECONDS))


def at_full_speed(graph: Any, records: int) -> Any:
    """A copy of `graph` whose rate-limited generators read as fast as they can, at most `records`
    in all (or what they would have read, if fewer); None when no source reads at a rate or one
    that does is not a `GeneratorSource` (nothing to unthrottle)."""
    limited = [v for v in graph.vertices if v.is_rate_limited]
    if not limited or not all(isinstance(v.source, GeneratorSource) for v in limited):
        return None
    vertices = []
    for vertex in graph.vertices:
        if vertex.is_rate_limited:
            source = copy.copy(vertex.source)
            total = source.total_records()
            source.count = min(records, total) if total is not None else records
            source.rate, source.duration, source.stamp = None, None, "read"
            vertex = dataclasses.replace(vertex, source=source)
        vertices.append(vertex)
    return dataclasses.replace(graph, vertices=vertices)


def apply_channels(env: Any, profile: CostProfile) -> Any:
    """`env` with buffers that hold `profile.in_flight_records` per backpressured channel ahead of
    an aligned barrier (`SIM_BUFFERS_AHEAD` buffers of `SIM_CREDITS` credits) and the profile's
    buffer timeout; unchanged when the profile did not measure them. Returns `env`."""
    if profile.in_flight_records > 0:
        env.buffer_timeout = profile.buffer_timeout or SIM_BUFFER_TIMEOUT
        env.credits = SIM_CREDITS
        env.buffer_size = max(1, round(profile.in_flight_records / SIM_BUFFERS_AHEAD))
    return env


def predict(env: Any, job_name: str, profile: CostProfile, *, seed: int = 1, slow: dict[str, float] | None = None,
            link_delays: dict[str, float] | None = None, **options: Any) -> Any:
    """Run the job `env` built on the simulator with `profile`'s cost model (and its channels,
    `apply_channels`); `slow`: task or vertex name -> slowdown of its step costs (what-if);
    returns the `JobResult`."""
    apply_channels(env, profile)
    costs = profile.cost_model(slow_tasks=dict(slow or {}))
    network = profile.network(link_delays=dict(link_delays or {}))
    return env.execute(job_name, executor="sim", seed=seed, costs=costs, network=network, **options)


def figures(result: Any, *, finalize: float = 0.0, since: float = float("-inf")) -> dict[str, float | None]:
    """The run's figures (`METRICS`): throughput in records/s from the first record's creation
    to the last one's arrival, latencies in ms, checkpoint durations and alignment in ms (of the
    completed checkpoints triggered from `since`; `finalize` seconds added to each duration: a
    simulated coordinator completes at once), persisted (channel-state) bytes per checkpoint."""
    done = [c for c in result.checkpoints if c.completed and c.trigger_time >= since]
    durations = sorted((c.duration + finalize) * 1e3 for c in done)
    alignments = sorted(c.alignment_time * 1e3 for c in done)
    persisted = sorted(float(c.persisted_bytes) for c in done)
    metrics = result.metrics
    p50, p99 = metrics.latency_percentile(50), metrics.latency_percentile(99)
    return {
        "throughput": metrics.end_to_end_throughput,
        "latency_p50": None if p50 is None else p50 * 1e3,
        "latency_p99": None if p99 is None else p99 * 1e3,
        "checkpoint_duration_p50": _percentile(durations, 50),
        "checkpoint_duration_p99": _percentile(durations, 99),
        "alignment_time_p50": _percentile(alignments, 50),
        "persisted_bytes": _percentile(persisted, 50),
    }


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values) + 0.5) - 1))]
