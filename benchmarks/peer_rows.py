"""The peers' shared job shape and their rows (`benchmarks.peers`): one place for the constants
the child processes and the driver agree on, and the row every peer run reports."""

from __future__ import annotations

import array
import glob
import os
import statistics
from typing import Any

from benchmarks.report import percentile

PARALLELISM = 2
INTERVAL_MS = 100
KEYS = 50
#: a child prints its result on one line after this mark
ROW_MARK = "BARRIERFLOW_PEER_ROW "
#: a row's per-checkpoint figures: Flink's from its REST API (`flink_rest.checkpoint_figures`),
#: barrierflow's from its own statistics; None when not read
FIGURE_FIELDS = ("alignment_time_p50", "alignment_time_p99", "alignment_time_max", "start_delay_p50", "start_delay_max",
               "persisted_bytes", "persisted_bytes_p50", "checkpointed_bytes_p50", "rest_checkpoints_completed",
               "rest_checkpoints_read", "checkpoints_in_files")


def row(executor: str, mode: str, *, status: str = "ok", throughput: float | None = None,
        latencies_ms: list[float] | None = None, latency_histogram: Any = None, records: int | None = None,
        checkpoints: dict[str, Any] | None = None, figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """`latencies_ms`: a peer's latencies in ms; `latency_histogram`: barrierflow's (seconds);
    `figures`: the per-checkpoint figures (`FIGURE_FIELDS`)."""
    lat = sorted(latencies_ms or [])

    def pct(q: float) -> float | None:
        if latency_histogram is None:
            return percentile(lat, q)
        value = latency_histogram.percentile(q)
        return None if value is None else value * 1e3

    cp = checkpoints or {}
    return {
        "executor": executor, "scenario": "uniform", "mode": mode, "parallelism": PARALLELISM,
        "status": status, "throughput": throughput,
        "latency_p50": pct(50), "latency_p90": pct(90), "latency_p99": pct(99), "latency_p99_9": pct(99.9),
        "latency_max": pct(100),
        "checkpoint_duration_p50": cp.get("p50"), "checkpoint_duration_p99": cp.get("p99"),
        "checkpoint_duration_max": cp.get("max"),
        **{name: (figures or {}).get(name) for name in FIGURE_FIELDS},
        "state_bytes": None,
        # Flink's own "checkpointed size" of the largest completed checkpoint: operator state plus,
        # for unaligned checkpoints, persisted in-flight data (the log does not split the two)
        "checkpoint_size_max": cp.get("bytes"),
        "checkpoints_completed": cp.get("completed"), "checkpoints_aborted": cp.get("aborted"),
        "abort_reasons": cp.get("reasons", {}),
        "rate": None, "records": records,
    }


def failed(executor: str, mode: str, why: str) -> dict[str, Any]:
    return row(executor, mode, status=f"failed: {why}"[:300])


def write_stamps(path: str, stamps: array.array) -> None:
    with open(path + ".part", "wb") as fh:
        stamps.tofile(fh)
    os.replace(path + ".part", path)


def stamp_row(executor: str, mode: str, stamp_dir: str, records: int,
              checkpoints: dict[str, Any] | None = None, figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """Row from `(created, done)` pairs (seconds since the epoch) written by the last operator."""
    stamps = array.array("d")
    for path in sorted(glob.glob(os.path.join(stamp_dir, "*.bin"))):
        with open(path, "rb") as fh:
            stamps.frombytes(fh.read())
    created, done = stamps[0::2], stamps[1::2]
    if len(created) != records:
        return failed(executor, mode, f"{len(created)} stamps came back for {records} records")
    span = max(done) - min(created)
    latencies = [(d - c) * 1e3 for c, d in zip(created, done)]
    return row(executor, mode, throughput=records / span, latencies_ms=latencies, records=records,
               checkpoints=checkpoints, figures=figures)


#: row fields a repeated row reports as the median over its repeats
MEDIAN_FIELDS = ("throughput", "latency_p50", "latency_p90", "latency_p99", "latency_p99_9", "latency_max",
                 "checkpoint_duration_p50", "checkpoint_duration_p99", "checkpoint_duration_max",
                 "alignment_time_p50", "alignment_time_p99", "start_delay_p50", "persisted_bytes_p50",
                 "checkpoint_size_max", "checkpoints_completed", "checkpoints_aborted")


def repeats_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of a variant's repeats: each `MEDIAN_FIELDS` value the median over the runs that
    have it, `runs` every repeat's values; failed if every repeat failed."""
    ok = [r for r in runs if r["status"] == "ok"]
    out = dict(ok[0] if ok else runs[0])
    for key in MEDIAN_FIELDS:
        values = [r[key] for r in ok if r.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    out["runs"] = [{"status": r["status"], **{k: r.get(k) for k in MEDIAN_FIELDS}} for r in runs]
    return out
