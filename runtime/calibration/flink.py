"""A profile from a Flink job's REST API: checkpoint history and per-vertex metrics.

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
cost: `per_step` is 0), the phase timings as in `runtime.calibration.fit`, the transport as
the earliest non-source subtask's start delay beyond the sources' (the barrier's trip downstream
without queueing; uniform from 0 to twice its median), and the snapshot writes' spread: a
uniform latency whose draws reproduce the median fastest and slowest `async` duration (less its
per-byte part) of a checkpoint's subtasks (a checkpoint waits for its slowest subtask; on a
loaded machine the writes of one checkpoint range from 2 to 30 ms, and their median alone
predicts it ~40 % short).

The channels (`CostProfile.in_flight_records`): what a backpressured channel holds ahead of an
aligned barrier. Flink queues it in the producer's subpartition (`outputQueueSize`: the bytes of
its finished, unconsumed buffers; a local channel has no receiver queue of its own) plus about
one buffer more: the barrier finishes the partly written buffer, and the receiver is part way
through another (`segment_size` bytes together). It is taken over the producer subtasks that are
backpressured (`backPressuredTimeMsPerSecond` >= `BACKPRESSURED`; a skewed job backpressures one
channel of each, where the queued buffers are) and divided by the bytes per record on the wire
(`numBytesOutPerSecond` / `numRecordsOutPerSecond` of the same subtasks: Flink's records carry
a tag and a timestamp, 25 bytes for the (int, double) of the Java job, not the 12 of its fields).

Checked against live documents of `benchmarks/flink_java/PageView.java` (Flink 2.3 MiniCluster,
one slow key subtask; tests/calibration/fixtures): under backpressure an aligned barrier's wait
shows as the slow subtask's `start_delay` (hundreds of ms) with `alignment.duration` 0, and
Flink's `*PerSecond` meters average over 60 s (a run of a few seconds reads several times too
low), so `collect_flink_rest` measures the rates from the cumulative counters over `sample` s.
The queue gauges are the median of `GAUGE_READINGS` readings over the sample. In an unaligned
run the queues hold fewer bytes (every barrier finishes the buffers being written, ~10 a second),
so a profile predicts the aligned duration from an aligned run's queues.
"""

from __future__ import annotations

import json
import re
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
#: the fields of a checkpoint's `/checkpoints` history entry the document keeps
CHECKPOINT_FIELDS = ("id", "checkpoint_type", "end_to_end_duration", "checkpointed_size", "alignment_buffered",
                     "processed_data", "persisted_data")
COUNTERS = {"accumulateBusyTimeMs": "busyTimeMsPerSecond", "numRecordsIn": "numRecordsInPerSecond",
            "numRecordsOut": "numRecordsOutPerSecond", "numBytesIn": "numBytesInPerSecond",
            "numBytesOut": "numBytesOutPerSecond", "accumulateBackPressuredTimeMs": "backPressuredTimeMsPerSecond",
            "accumulateIdleTimeMs": "idleTimeMsPerSecond"}
#: the subtask's network queue gauges -> the name in the document (median of the readings)
GAUGES = {"Shuffle.Netty.Output.Buffers.outputQueueSize": "outputQueueSize",
          "Shuffle.Netty.Output.Buffers.outputQueueLength": "outputQueueLength",
          "Shuffle.Netty.Output.Buffers.outPoolUsage": "outPoolUsage",
          "Shuffle.Netty.Input.Buffers.inputQueueSize": "inputQueueSize",
          "Shuffle.Netty.Input.Buffers.inputQueueLength": "inputQueueLength",
          "Shuffle.Netty.Input.Buffers.inPoolUsage": "inPoolUsage"}
#: readings of the gauges over the sample
GAUGE_READINGS = 5
#: backpressured ms per second from which a producer subtask's output queue counts as full
BACKPRESSURED = 500.0
#: Flink's defaults of the settings the document records (`taskmanager.memory.segment-size`,
#: `execution.buffer-timeout`), when the cluster configuration does not set them
DEFAULT_SEGMENT_SIZE = 32 * 1024
DEFAULT_BUFFER_TIMEOUT_MS = 100.0


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
    groups: list[range] = []  # each checkpoint's entries in sizes/asyncs
    for c, checkpoint in enumerate(_list(doc, "checkpoints", where)):
        first = len(asyncs)
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
        groups.append(range(first, len(asyncs)))
        triggers.extend(source_starts)
        if source_starts and other_starts:
            # the fastest trip: a later barrier waited in a backpressured queue, which the simulator
            # produces itself (a live aligned run puts that wait in `start_delay`, not alignment)
            hops.append(max(0.0, min(other_starts) - min(source_starts)))
        if "end_to_end_duration" in checkpoint:
            finals.append(max(0.0, _ms(checkpoint, "end_to_end_duration", here) / 1e3 - latest))
    hop = statistics.median(hops) if hops else 0.0
    in_flight, record_bytes = _channels(doc, vertices, where)
    timeout = _ms(doc, "buffer_timeout_ms", where) / 1e3 if "buffer_timeout_ms" in doc else 0.0
    calibrated = {"executor": "flink", "job": doc.get("job", "")}
    if record_bytes:
        calibrated.update(record_bytes=round(record_bytes, 2), segment_size=doc["segment_size"])
    profile = CostProfile(steps=steps, cores=doc.get("cores"), latency_min=0.0, latency_max=2 * hop,
                          trigger_delay=_median(triggers), ack_delay=_median(acks), finalize=_median(finals),
                          in_flight_records=in_flight, buffer_timeout=timeout, calibrated=calibrated)
    profile.sync_latency, profile.sync_per_byte = fit_line(sizes, syncs)
    _, profile.write_per_byte = fit_line(sizes, asyncs)
    rest = [max(0.0, a - profile.write_per_byte * size) for a, size in zip(asyncs, sizes, strict=True)]
    profile.write_latency, profile.write_latency_max = _write_spread([[rest[i] for i in g] for g in groups if g])
    return profile


def _write_spread(checkpoints: list[list[float]]) -> tuple[float, float]:
    """(low, high) of a uniform write latency whose n draws per checkpoint have the median
    smallest and largest write of the checkpoints (`checkpoints`: each one's writes less their
    per-byte part); high 0 when they do not spread. The spread within a checkpoint, not across
    them: a stall of the machine slows every write of one checkpoint together, and pooled with
    the others it would make every simulated checkpoint wait for it."""
    if not checkpoints:
        return 0.0, 0.0
    n = statistics.median_low(len(c) for c in checkpoints)
    low, high = statistics.median(min(c) for c in checkpoints), statistics.median(max(c) for c in checkpoints)
    if n < 2 or high <= low:
        return statistics.median(w for c in checkpoints for w in c), 0.0
    # n uniform draws on [a, b]: the smallest lies (b - a) / (n + 1) above a on average, the largest as far below b
    width = (high - low) * (n + 1) / (n - 1)
    return max(0.0, low - width / (n + 1)), high + width / (n + 1)


def _channels(doc: dict[str, Any], vertices: list[Any], where: str) -> tuple[float, float]:
    """(records a backpressured channel holds ahead of an aligned barrier, bytes per record), see
    the module docstring; (0, 0) when the document has no queue metrics or nothing is backpressured."""
    held, sizes = [], []
    for v, vertex in enumerate(vertices):
        for i, sub in enumerate(vertex["subtasks"]):
            at = f"{where}: vertices[{v}].subtasks[{i}]"
            if not isinstance(sub, dict) or "outputQueueSize" not in sub:  # recorded without queue metrics
                continue
            queued = _ms(sub, "outputQueueSize", at)
            records = _ms(sub, "numRecordsOutPerSecond", at)
            if _ms(sub, "backPressuredTimeMsPerSecond", at) < BACKPRESSURED or records < MIN_RATE:
                continue
            held.append(queued)
            sizes.append(_ms(sub, "numBytesOutPerSecond", at) / records)
    if not held:
        return 0.0, 0.0
    record = statistics.median(sizes)
    if record <= 0:
        raise ProfileError(f"{where}: backpressured subtasks sent records but no bytes ('numBytesOutPerSecond' is 0)")
    return (statistics.median(held) + _ms(doc, "segment_size", where)) / record, record


def collect_flink_rest(base_url: str, job_id: str, *, checkpoints: int = 10, timeout: float = 10.0,
                       sample: float = 3.0, during_sample: bool = False) -> dict[str, Any]:
    """The document `profile_from_flink` reads, fetched from a JobManager at `base_url`
    (e.g. http://localhost:8081): vertex metrics (rates over `sample` seconds of the running job,
    from two readings of the cumulative counters; queue gauges, the median of `GAUGE_READINGS`
    readings), the cluster's buffer size and timeout, and the subtask details of the latest
    completed checkpoints (at most `checkpoints`; `during_sample`: only those triggered during
    the sample, so the rates and the checkpoints saw the same load)."""
    def get(path: str) -> Any:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}{path}", timeout=timeout) as response:
            return json.load(response)

    def read() -> dict[tuple[str, int], dict[str, float]]:
        names = ",".join([*COUNTERS, *GAUGES])
        readings = {}
        for vertex in job["vertices"]:
            for i in range(vertex["parallelism"]):
                values = get(f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/{i}/metrics?get={names}")
                readings[vertex["id"], i] = {m["id"]: float(m["value"]) for m in values}
        readings[("", 0)] = {"at": time.monotonic()}
        return readings

    job = get(f"/jobs/{job_id}")
    sample_start_ms = time.time() * 1e3
    readings = [read()]
    for _ in range(GAUGE_READINGS - 1):
        time.sleep(sample / (GAUGE_READINGS - 1))
        readings.append(read())
    first, last = readings[0], readings[-1]
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
            for per_second in ("busyTimeMsPerSecond", "backPressuredTimeMsPerSecond", "idleTimeMsPerSecond"):
                rates[per_second] = min(1000.0, rates[per_second])
            for gauge, name in GAUGES.items():
                values = [r[vertex["id"], i][gauge] for r in readings if gauge in r[vertex["id"], i]]
                if values:
                    rates[name] = statistics.median(values)
            subtasks.append(rates)
        vertices.append({"name": vertex["name"], "parallelism": vertex["parallelism"], "subtasks": subtasks})
    config = {entry["key"]: entry["value"] for entry in get(f"/jobs/{job_id}/jobmanager/config")}
    history = [c for c in get(f"/jobs/{job_id}/checkpoints")["history"] if c["status"] == "COMPLETED"
               and (not during_sample or c.get("trigger_timestamp", 0) >= sample_start_ms)]
    details = []
    for checkpoint in history[:checkpoints]:
        tasks = {names[vid]: get(f"/jobs/{job_id}/checkpoints/details/{checkpoint['id']}/subtasks/{vid}")["subtasks"]
                 for vid in names}
        summary = {key: checkpoint[key] for key in CHECKPOINT_FIELDS if key in checkpoint}
        details.append({**summary, "tasks": tasks})
    return {"job": job.get("name", job_id), "vertices": vertices, "sources": sources, "checkpoints": details,
            "segment_size": memory_bytes(config.get("taskmanager.memory.segment-size"), DEFAULT_SEGMENT_SIZE),
            "buffer_timeout_ms": duration_ms(config.get("execution.buffer-timeout"), DEFAULT_BUFFER_TIMEOUT_MS)}


#: units of Flink's memory sizes and durations (lower case, as in "32 kb", "100 ms")
MEMORY_UNITS = {"b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
                "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
DURATION_UNITS = {"ms": 1.0, "milli": 1.0, "millis": 1.0, "s": 1e3, "sec": 1e3, "secs": 1e3, "min": 60e3}


def memory_bytes(value: str | None, default: float) -> float:
    """Flink's memory size ("32 kb", "1mb", "4096") in bytes; `default` when unset."""
    return _quantity(value, default, MEMORY_UNITS, "a memory size")


def duration_ms(value: str | None, default: float) -> float:
    """Flink's duration ("100 ms", "1 s", "100") in ms; `default` when unset."""
    return _quantity(value, default, DURATION_UNITS, "a duration")


def _quantity(value: str | None, default: float, units: dict[str, float], what: str) -> float:
    if value is None:
        return default
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-z]*)\s*", value.lower())
    if match is None or (match.group(2) and match.group(2) not in units):
        raise ProfileError(f"Flink configuration: cannot read {value!r} as {what}")
    return float(match.group(1)) * (units[match.group(2)] if match.group(2) else 1.0)


def _list(doc: Any, key: str, where: str) -> list[Any]:
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, list):
        raise ProfileError(f"{where}: field {key!r} must be a list, got {value!r}")
    return value


def _ms(doc: Any, key: str, where: str) -> float:
    if not isinstance(doc, dict) or key not in doc:
        raise ProfileError(f"{where}: field {key!r} is missing")
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ProfileError(f"{where}: field {key!r}: expected a number >= 0, got {value!r}")
    return float(value)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
