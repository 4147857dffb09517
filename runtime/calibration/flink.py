"""A profile from a Flink job's REST API: checkpoint history and per-vertex metrics (issue 25).

`profile_from_flink(doc)` reads one JSON document assembled from Flink's REST responses
(`collect_flink_rest` fetches them from a running JobManager, e.g. the MiniCluster that
`benchmarks.peers` starts):

    {"vertices": [{"name": "count", "parallelism": 2,
                   "subtasks": [{"busyTimeMsPerSecond": 850, "numRecordsInPerSecond": 37000}, ...]}],
     "sources": ["Source: generator"],
     "checkpoints": [{"end_to_end_duration": 430,                 # ms (`/checkpoints` history)
                      "tasks": {"count": [<subtask details>]}}]}  # `/checkpoints/details/:id/subtasks/:vid`

Subtask details are Flink's (`start_delay`, `end_to_end_duration`, `checkpoint.sync`/`async`,
`alignment.duration`, `checkpointed_size`, all durations in ms). What the fit takes: per-record
CPU of each subtask = busy ms per second / records in per second (Flink exposes no per-buffer
cost: `per_step` is 0), the phase timings as in `runtime.calibration.fit`, and the transport as
the earliest non-source subtask's start delay beyond the sources' (the barrier's trip downstream
without queueing; uniform from 0 to twice its median).

Checked against live documents of `benchmarks/flink_java/PageView.java` (Flink 2.3 MiniCluster,
one slow key subtask; tests/calibration/fixtures): under backpressure an aligned barrier's wait
shows as the slow subtask's `start_delay` (hundreds of ms) with `alignment.duration` 0, and
Flink's `*PerSecond` meters average over 60 s (a run of a few seconds reads several times too
low), so `collect_flink_rest` measures the rates from the cumulative counters over `sample` s.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from typing import Any

from runtime.calibration.fit import OUTLIER, fit_line
from runtime.calibration.profile import CostProfile, ProfileError
from runtime.sim.costs import StepCost

#: records per second below which a subtask's busy time gives no per-record cost
MIN_RATE = 1000.0
#: cumulative subtask counters -> the rate `profile_from_flink` reads (per second of the sample)
COUNTERS = {"accumulateBusyTimeMs": "busyTimeMsPerSecond", "numRecordsIn": "numRecordsInPerSecond",
            "numRecordsOut": "numRecordsOutPerSecond"}


def profile_from_flink(doc: Any, where: str = "Flink REST document") -> CostProfile:
    """The profile of a Flink job (see the module docstring). Raises ProfileError naming the field."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    vertices = _list(doc, "vertices", where)
    sources = set(doc.get("sources", ()))
    steps: dict[str, StepCost] = {}
    for v, vertex in enumerate(vertices):
        name = vertex.get("name") if isinstance(vertex, dict) else None
        if not isinstance(name, str):
            raise ProfileError(f"{where}: field 'vertices[{v}].name' is missing")
        costs = []
        for i, sub in enumerate(_list(vertex, "subtasks", f"{where}: vertices[{v}]")):
            busy = _ms(sub, "busyTimeMsPerSecond", f"{where}: vertices[{v}].subtasks[{i}]")
            rate = _ms(sub, "numRecordsInPerSecond", f"{where}: vertices[{v}].subtasks[{i}]")
            if name in sources and rate == 0:  # a source reads no input: its output rate counts
                rate = _ms(sub, "numRecordsOutPerSecond", f"{where}: vertices[{v}].subtasks[{i}]")
            if rate >= MIN_RATE:  # a few records in the sample say nothing about their cost
                costs.append((i, busy / 1000 / rate))
        typical = statistics.median_low([c for _, c in costs]) if costs else 0.0
        steps[name] = StepCost(0.0, typical)
        for i, cost in costs:
            if abs(cost - typical) > OUTLIER * max(typical, 1e-12):
                steps[f"{name}[{i}]"] = StepCost(0.0, cost)
    steps["default"] = StepCost(0.0, statistics.median_low([s.per_record for s in steps.values()]) if steps else 0.0)
    triggers, acks, hops, finals, sizes, syncs, asyncs = [], [], [], [], [], [], []
    for c, checkpoint in enumerate(_list(doc, "checkpoints", where)):
        here = f"{where}: checkpoints[{c}]"
        tasks = checkpoint.get("tasks") if isinstance(checkpoint, dict) else None
        if not isinstance(tasks, dict):
            raise ProfileError(f"{here}: field 'tasks' must map vertex names to subtask details")
        source_starts, other_starts, latest = [], [], 0.0
        for vertex, subtasks in tasks.items():
            for i, sub in enumerate(subtasks):
                at = f"{here}.tasks.{vertex}[{i}]"
                start = _ms(sub, "start_delay", at) / 1e3
                sync = _ms(sub.get("checkpoint", {}), "sync", at + ".checkpoint") / 1e3
                write = _ms(sub.get("checkpoint", {}), "async", at + ".checkpoint") / 1e3
                align = _ms(sub.get("alignment", {}), "duration", at + ".alignment") / 1e3
                e2e = _ms(sub, "end_to_end_duration", at) / 1e3
                (source_starts if vertex in sources else other_starts).append(start)
                acks.append(max(0.0, e2e - start - align - sync - write))
                sizes.append(_ms(sub, "checkpointed_size", at))
                syncs.append(sync)
                asyncs.append(write)
                latest = max(latest, e2e)
        triggers.extend(source_starts)
        if source_starts and other_starts:
            # the fastest trip: a later barrier waited in a backpressured queue, which the simulator
            # produces itself (a live aligned run puts that wait in `start_delay`, not alignment)
            hops.append(max(0.0, min(other_starts) - min(source_starts)))
        if "end_to_end_duration" in checkpoint:
            finals.append(max(0.0, _ms(checkpoint, "end_to_end_duration", here) / 1e3 - latest))
    hop = statistics.median(hops) if hops else 0.0
    profile = CostProfile(steps=steps, cores=doc.get("cores"), latency_min=0.0, latency_max=2 * hop,
                          trigger_delay=_median(triggers), ack_delay=_median(acks), finalize=_median(finals),
                          calibrated={"executor": "flink", "job": doc.get("job", "")})
    profile.sync_latency, profile.sync_per_byte = fit_line(sizes, syncs)
    profile.write_latency, profile.write_per_byte = fit_line(sizes, asyncs)
    return profile


def collect_flink_rest(base_url: str, job_id: str, *, checkpoints: int = 10, timeout: float = 10.0,
                       sample: float = 3.0) -> dict[str, Any]:
    """The document `profile_from_flink` reads, fetched from a JobManager at `base_url`
    (e.g. http://localhost:8081): vertex metrics (rates over `sample` seconds of the running job,
    from two readings of the cumulative counters) and the subtask details of the latest
    completed checkpoints (at most `checkpoints`)."""
    def get(path: str) -> Any:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}{path}", timeout=timeout) as response:
            return json.load(response)

    def counters() -> dict[tuple[str, int], dict[str, float]]:
        read = {}
        for vertex in job["vertices"]:
            for i in range(vertex["parallelism"]):
                values = get(f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/{i}/metrics?get={','.join(COUNTERS)}")
                read[vertex["id"], i] = {m["id"]: float(m["value"]) for m in values}
        read[("", 0)] = {"at": time.monotonic()}
        return read

    job = get(f"/jobs/{job_id}")
    first = counters()
    time.sleep(sample)
    last = counters()
    seconds = last[("", 0)]["at"] - first[("", 0)]["at"]
    vertices, names, sources = [], {}, []
    for vertex in job["vertices"]:
        names[vertex["id"]] = vertex["name"]
        if vertex["name"].startswith("Source"):
            sources.append(vertex["name"])
        subtasks = []
        for i in range(vertex["parallelism"]):
            a, b = first[vertex["id"], i], last[vertex["id"], i]
            # the REST side fetches each metric on its own schedule: a pair of readings can be a
            # little inconsistent (a busy time above 1 s per s, a counter going back)
            rates = {rate: max(0.0, b.get(counter, 0.0) - a.get(counter, 0.0)) / seconds
                     for counter, rate in COUNTERS.items()}
            rates["busyTimeMsPerSecond"] = min(1000.0, rates["busyTimeMsPerSecond"])
            subtasks.append(rates)
        vertices.append({"name": vertex["name"], "parallelism": vertex["parallelism"], "subtasks": subtasks})
    history = [c for c in get(f"/jobs/{job_id}/checkpoints")["history"] if c["status"] == "COMPLETED"]
    details = []
    for checkpoint in history[:checkpoints]:
        tasks = {names[vid]: get(f"/jobs/{job_id}/checkpoints/details/{checkpoint['id']}/subtasks/{vid}")["subtasks"]
                 for vid in names}
        details.append({"end_to_end_duration": checkpoint["end_to_end_duration"], "tasks": tasks})
    return {"job": job.get("name", job_id), "vertices": vertices, "sources": sources, "checkpoints": details}


def _list(doc: Any, key: str, where: str) -> list[Any]:
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, list):
        raise ProfileError(f"{where}: field {key!r} must be a list, got {value!r}")
    return value


def _ms(doc: Any, key: str, where: str) -> float:
    value = doc.get(key) if isinstance(doc, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ProfileError(f"{where}: field {key!r}: expected a number >= 0, got {value!r}")
    return float(value)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
