"""A benchmark combination's measured outcome: the row and plot series summarised from its runs
(`summarise`), the per-subtask checkpoint phases and barrier timeline, and the median over
repeated runs (`merge_runs`). Used by `benchmarks.checkpoint_modes` and `benchmarks.nexmark`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.report import abort_reasons, percentile

SINK = "bench"

#: row fields, in table order (units in `UNITS`)
FIELDS = (
    "executor", "scenario", "mode", "parallelism", "status",
    "throughput",
    "latency_p50", "latency_p90", "latency_p99", "latency_p99_9", "latency_max",
    "checkpoint_duration_p50", "checkpoint_duration_p99", "checkpoint_duration_max",
    "alignment_time_p50", "alignment_time_p99", "alignment_time_max",
    "persisted_bytes", "persisted_bytes_p50", "state_bytes",
    "checkpoints_completed", "checkpoints_aborted", "abort_reasons",
    "debloated_buffer_size",
    "rate", "records", "repeats",
    "load_average", "other_cpu_share", "contended", "cores",
)


@dataclass(frozen=True)
class Combination:
    executor: str
    scenario: str
    mode: str
    parallelism: int

    @property
    def label(self) -> str:
        scenario = self.scenario if self.scenario != "scale" else f"scale-p{self.parallelism}"
        return f"{self.executor}/{scenario}/{self.mode}"

    @property
    def scenario_label(self) -> str:
        return self.scenario if self.scenario != "scale" else f"scale-p{self.parallelism}"


@dataclass
class Outcome:
    """A combination's row plus the series the plots need."""

    row: dict[str, Any]
    latency_cdf: list[tuple[float, float]] = field(default_factory=list)  # (latency ms, fraction)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    timeline: dict[str, Any] | None = None
    #: the per-subtask phases of the timeline's checkpoint (`checkpoint_phases`)
    phases: dict[str, Any] | None = None
    wall_s: float = 0.0
    #: the row of each repeat, in run order (one entry unless `--repeat`)
    runs: list[dict[str, Any]] = field(default_factory=list)


def _ms(values: Iterable[float]) -> list[float]:
    return [v * 1e3 for v in values]


def _pct(values: list[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else round(value, 6)


#: share of a max-rate run's records, by the time they were counted, its throughput leaves out at
#: either end: start-up, and the drain of whatever queued in front of a slow subtask
THROUGHPUT_TRIM = 0.2


def throughput_of(result: Any) -> float | None:
    """Records counted per second in the middle of a max-rate run (`THROUGHPUT_TRIM` of the
    records left out at each end), so neither the start-up nor the final drain of a backlog
    (which depends on how much was queued, not on how fast the job runs) counts."""
    counted = sorted(r["processed_at"] for r in result.output(SINK))
    if len(counted) < 10:
        return None
    first, last = int(len(counted) * THROUGHPUT_TRIM), int(len(counted) * (1 - THROUGHPUT_TRIM))
    span = counted[last] - counted[first]
    return (last - first) / span if span > 0 else None


def measured_since(result: Any, warmup: float) -> float:
    """The clock time the statistics of a latency run start: `warmup` after its first record."""
    output = result.output(SINK)
    return (min(r["created_at"] for r in output) if output else 0.0) + warmup


def latencies_ms(result: Any, since: float) -> list[float]:
    """End-to-end latencies (ms, sorted) of the records created at or after `since`: the job
    stamps each record's due time and when the count step (chained with the sink) took it."""
    return sorted((r["processed_at"] - r["created_at"]) * 1e3 for r in result.output(SINK) if r["created_at"] >= since)


def summarise(combo: Combination, latency_run: Any, throughput_run: Any, *, rate: float, records: int,
              since: float = float("-inf")) -> Outcome:
    """The row and plot series of one combination; statistics of the latency run cover the
    records created and the checkpoints triggered from `since` on (after the warm-up), but for
    the final checkpoint: taken once every source read its input, it is aligned in every mode."""
    latencies = latencies_ms(latency_run, since)
    p50, p90, p99, p99_9, p100 = (_pct(latencies, q) for q in (50, 90, 99, 99.9, 100))
    final = max((c.id for c in latency_run.checkpoints if c.completed), default=None)
    measured = [c for c in latency_run.checkpoints if c.trigger_time >= since and c.id != final]
    done = [c for c in measured if c.completed]
    aborted = [c for c in measured if not c.completed]
    durations = _ms(c.duration for c in done)
    alignments = _ms(c.alignment_time for c in done)
    throughput = throughput_of(throughput_run)
    row: dict[str, Any] = {
        "executor": combo.executor,
        "scenario": combo.scenario_label,
        "mode": combo.mode,
        "parallelism": combo.parallelism,
        "status": "ok",
        "throughput": None if throughput is None else round(throughput, 3),
        "latency_p50": p50,
        "latency_p90": p90,
        "latency_p99": p99,
        "latency_p99_9": p99_9,
        "latency_max": p100,
        "checkpoint_duration_p50": _pct(durations, 50),
        "checkpoint_duration_p99": _pct(durations, 99),
        "checkpoint_duration_max": _pct(durations, 100),
        "alignment_time_p50": _pct(alignments, 50),
        "alignment_time_p99": _pct(alignments, 99),
        "alignment_time_max": _pct(alignments, 100),
        "persisted_bytes": sum(c.persisted_bytes for c in done),
        "persisted_bytes_p50": percentile([c.persisted_bytes for c in done], 50),
        "state_bytes": max((c.state_bytes for c in done), default=0),
        "checkpoints_completed": len(done),
        "checkpoints_aborted": len(aborted),
        "abort_reasons": abort_reasons(aborted),
        "debloated_buffer_size": min(latency_run.metrics.buffer_sizes.values(), default=None),
        "rate": rate,
        "records": records,
        "repeats": 1,
    }
    n = len(latencies)
    cdf = [(round(latencies[min(n - 1, int(round(q * (n - 1) / 200)))], 6), q / 200) for q in range(201)] if n else []
    timeline_points = [
        {"id": c.id, "trigger_time": c.trigger_time, "duration": c.duration * 1e3, "completed": c.completed,
         "failure_reason": c.failure_reason.value if c.failure_reason else None, "unaligned": c.unaligned,
         "alignment_time": c.alignment_time * 1e3, "persisted_bytes": c.persisted_bytes,
         "subtasks": subtask_phases(c)}
        for c in sorted(measured, key=lambda c: c.id)
    ]
    return Outcome(row=row, latency_cdf=cdf, checkpoints=timeline_points)


def failed_outcome(combo: Combination, error: BaseException) -> Outcome:
    row = {f: None for f in FIELDS}
    row.update(executor=combo.executor, scenario=combo.scenario_label, mode=combo.mode,
               parallelism=combo.parallelism, status=f"failed: {type(error).__name__}: {error}"[:300],
               abort_reasons={}, repeats=1)
    return Outcome(row=row)


#: per-subtask checkpoint fields (`SubtaskCheckpointStats`) given in ms in the JSON: the phases
#: and the write's CPU
PHASE_DURATIONS = ("start_delay", "alignment_duration", "sync_duration", "async_duration", "end_to_end_duration",
                   "async_cpu")


def subtask_phases(checkpoint: Any) -> list[dict[str, Any]]:
    """A checkpoint's per-subtask stats for the JSON: durations in ms, sizes in bytes; `source`:
    the subtask reads a source (no input channels: every source vertex is named "Source: ..."),
    so its `alignment_duration` is its barrier waiting in its output, not an alignment."""
    rows = []
    for sub in checkpoint.subtasks.values():
        row = sub.to_json()
        for name in PHASE_DURATIONS:
            row[name] = round(row[name] * 1e3, 6)
        row["source"] = sub.task.startswith("Source: ")
        rows.append(row)
    return rows


def _chosen_checkpoint(result: Any, since: float) -> Any:
    """The checkpoint the timeline and the phase plot show: the middle one completed among
    those triggered from `since` on."""
    done = [c for c in result.checkpoints if c.completed and c.trigger_time >= since]
    return done[len(done) // 2] if done else None


def checkpoint_phases(result: Any, since: float = float("-inf")) -> dict[str, Any] | None:
    """`{"checkpoint_id", "trigger_time", "duration" (ms), "unaligned", "subtasks": [...]}` of the
    chosen checkpoint (see `subtask_phases`); None when no checkpoint completed."""
    chosen = _chosen_checkpoint(result, since)
    if chosen is None:
        return None
    return {"checkpoint_id": chosen.id, "trigger_time": chosen.trigger_time, "duration": chosen.duration * 1e3,
            "unaligned": chosen.unaligned, "subtasks": subtask_phases(chosen)}


def barrier_timeline(result: Any, since: float = float("-inf")) -> dict[str, Any] | None:
    """The barrier events of one completed checkpoint (the middle one) from a traced sim run.

    Returns:
        `{"checkpoint_id", "trigger_time", "end_time", "unaligned", "events": [[time, kind, task,
        detail], ...]}` with kind `barrier-in` (detail: input channel), `snapshot` (detail: the
        synchronous snapshot time; the event time is when the upload started) or `ack`; None
        when no checkpoint completed.
    """
    chosen = _chosen_checkpoint(result, since)
    if chosen is None:
        return None
    events = [
        [event[0], event[1], event[3], event[4] if len(event) > 4 else None]
        for event in result.trace
        if len(event) > 3 and event[1] in ("barrier-in", "snapshot", "ack") and event[2] == chosen.id
    ]
    return {"checkpoint_id": chosen.id, "trigger_time": chosen.trigger_time, "end_time": chosen.end_time,
            "unaligned": chosen.unaligned, "events": events}


#: row fields that `merge_runs` does not take a median of
_LABELS = ("executor", "scenario", "mode", "parallelism", "status", "abort_reasons", "rate", "records", "repeats",
           "load_average", "other_cpu_share", "contended", "cores")


def merge_runs(outcomes: Sequence[Outcome]) -> Outcome:
    """One outcome for repeated runs of a combination: each number is the median run's
    (`statistics.median_low`, so always a value some run measured), aborted checkpoints per
    reason likewise; the plot series are those of the run with the median p99 latency; `runs`
    keeps every run's row. Failed runs are left out of the medians and named in `status`."""
    from statistics import median_low

    rows = [o.row for o in outcomes]
    ok = [o for o in outcomes if o.row["status"] == "ok"]
    if len(outcomes) == 1 or not ok:
        first = outcomes[0]
        return replace(first, row={**first.row, "repeats": len(outcomes)}, runs=rows,
                       wall_s=sum(o.wall_s for o in outcomes))
    row = dict(ok[0].row)
    for name in FIELDS:
        if name in _LABELS:
            continue
        values = [o.row[name] for o in ok if o.row.get(name) is not None]
        row[name] = median_low(values) if values else None
    reasons = {reason for o in ok for reason in (o.row.get("abort_reasons") or {})}
    medians = {reason: median_low([(o.row.get("abort_reasons") or {}).get(reason, 0) for o in ok])
               for reason in sorted(reasons)}
    row["abort_reasons"] = {reason: n for reason, n in medians.items() if n}
    row["repeats"] = len(outcomes)
    # the machine at its busiest over the repeats: a row is contended when any of its runs was
    for name in ("load_average", "other_cpu_share"):
        values = [o.row[name] for o in ok if o.row.get(name) is not None]
        row[name] = max(values) if values else None
    marks = [o.row.get("contended") for o in ok if o.row.get("contended") is not None]
    row["contended"] = any(marks) if marks else None
    row["cores"] = next((o.row["cores"] for o in ok if o.row.get("cores")), None)
    failed = [o.row["status"] for o in outcomes if o.row["status"] != "ok"]
    if failed:
        row["status"] = f"ok in {len(ok)} of {len(outcomes)} runs; {failed[0]}"[:300]
    p99 = row["latency_p99"]
    series = next((o for o in ok if o.row["latency_p99"] == p99), ok[0])
    return replace(series, row=row, runs=rows, wall_s=sum(o.wall_s for o in outcomes))


def measured_load(combo: Combination) -> Any:
    """Around a combination measured in wall time (not the simulator's: virtual time does not
    care), a `runtime.calibration.machine_load.LoadSampler`; else a context giving None."""
    if combo.executor == "sim":
        return contextlib.nullcontext()
    from runtime.calibration.machine_load import LoadSampler

    return LoadSampler()


def load_fields(machine: Any) -> dict[str, Any]:
    """The row fields of the machine's load while a combination ran (None on the simulator):
    `load_average` (the highest 1-minute load average), `other_cpu_share` (the share of the
    machine's CPU other processes took) and `contended` (`MachineLoad.contended`: others took a
    quarter of the CPU, or the load beyond the run's own CPU exceeded the cores)."""
    if machine is None:
        return {"load_average": None, "other_cpu_share": None, "contended": None, "cores": None}
    share = machine.other_share
    return {"load_average": round(max(machine.load_before, machine.load_max, machine.load_after), 2),
            "other_cpu_share": None if share is None else round(share, 3), "contended": machine.contended,
            "cores": machine.cores}


def rotated(combos: Sequence[Combination], r: int) -> list[Combination]:
    """`combos` with each run of combinations of one (executor, scenario, parallelism) rotated by
    `r`: repeat `r` starts that group's modes at another one, so no mode always runs first (on a
    shared machine the first run after a quiet spell, or the last before a busy one, differs)."""
    out: list[Combination] = []
    group: list[Combination] = []
    for combo in [*combos, None]:
        if group and (combo is None or (combo.executor, combo.scenario, combo.parallelism)
                      != (group[0].executor, group[0].scenario, group[0].parallelism)):
            shift = r % len(group)
            out.extend(group[shift:] + group[:shift])
            group = []
        if combo is not None:
            group.append(combo)
    return out
