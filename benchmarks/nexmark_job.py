"""One NexMark benchmark run: the job around a query, and its row.

The job: `ScheduledNexmarkSource` (the NexMark events, per-split watermarks on `date_time`) ->
the query's `build` (`runtime.workloads.nexmark.queries.QUERIES`) -> `StampedSink`.

* **Event creation.** In the latency run the source emits at `config.event_rate` events per
  second of the clock, on one schedule for every split, anchored at a time the driver chose
  (`anchor`): the event of time `t` is due at `anchor + (t - config.base_time) / 1000` s, as a
  NexMark event stream whose event time is the wall clock. A reader started after the anchor
  catches up, and the wait counts as latency (no coordinated omission); the first `warmup`
  seconds after the anchor are left out of every statistic. On Ray the anchor must come after
  the job's deployment, or the run starts with a backlog it reads at full speed: measured with
  Ray up and a worker actor per subtask, q5's tasks ran 5.0-5.1 s after submission and q8's 7.5
  s, against a 3 s lead. `on_time` runs a paced run again, once, with the lead it measured
  (and keeps that lead for the next run of the same job).
* **Committed output.** `StampedSink` keeps each output row's record timestamp (the event time of
  the event it came from: a map keeps its input's, a keyed function's output gets the element's or
  the timer's) and stages rows per checkpoint as `CollectSink` does; a row is visible once the
  checkpoint of its transaction completes (`end_time`). Latency = that completion - the creation of
  the row's event time. Rows committed only at the end of input (no checkpoint after them) and rows
  of a timer set beyond the last event (fired by the final watermark) are left out.
* **Throughput** (run at full speed): events / (the last output row's arrival - the earliest
  opening of a sink subtask, about when the sources start reading). The span ends with the
  output, so a query whose rows come from timers (q4, q9: every auction still open closes when
  the final watermark arrives) is timed until its last row, not its last input.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.modes_outcome import Combination, Outcome, subtask_phases
from benchmarks.report import abort_reasons, percentile
from checkpoint.modes import parse_mode
from operators import CollectSink
from operators.sources import GeneratorSplitReader, SourceSplit
from operators.timestamps import TIMESTAMP_FIELD
from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.source import NexmarkSource
from runtime.workloads.nexmark.source import event_time as nexmark_event_time

SINK = "nexmark"
EVENT_TIME, ARRIVED_AT, OPENED_AT = "event_time", "arrived_at", "opened_at"
#: seconds between a paced run's measured start and its anchor when `on_time` sets the lead
LEAD_MARGIN = 1.0
#: job name -> the lead `on_time` measured for it (the longest so far)
_measured_leads: dict[str, float] = {}


class LateStartError(RuntimeError):
    """A paced run whose tasks started after its first event was due, even with the measured lead."""


def on_time(run: Callable[[float], Any], lead: float, job: str,
            result_of: Callable[[Any], Any] = lambda ran: ran) -> tuple[Any, float]:
    """`run(anchor)` (a paced Ray run whose first event is due at `anchor`) with its tasks started
    before that: (what it returned, the anchor); `result_of` finds the run's `JobResult` in what
    `run` returns (by default that is the result). The anchor is `lead` seconds after submission, or the
    lead measured for `job` before if longer; a run that started late (`JobMetrics.running_since`
    after the anchor) is run again once with the lead it took plus `LEAD_MARGIN`.

    Raises:
        LateStartError: the second run started late too (naming the job, both leads, the lag).
    """
    ran, anchor, took = _paced(run, max(lead, _measured_leads.get(job, 0.0)), result_of)
    if took is None:
        return ran, anchor
    lead = _measured_leads[job] = max(_measured_leads.get(job, 0.0), took + LEAD_MARGIN)
    ran, anchor, took = _paced(run, lead, result_of)
    if took is None:
        return ran, anchor
    raise LateStartError(f"{job}: the paced run's tasks started {took:.1f} s after submission, "
                         f"{took - lead:.1f} s after its first event was due, with a {lead:.1f} s lead "
                         "measured on the run before: the machine is too busy to pace it")


def _paced(run: Callable[[float], Any], lead: float,
           result_of: Callable[[Any], Any]) -> tuple[Any, float, float | None]:
    """`run` with its anchor `lead` seconds from now: (what it returned, the anchor, the seconds
    from submission to its tasks' start if that was after the anchor, else None)."""
    submitted = time.time()
    anchor = submitted + lead
    ran = run(anchor)
    started = result_of(ran).metrics.running_since
    return ran, anchor, None if started is None or started <= anchor else started - submitted


class ScheduledNexmarkSource(NexmarkSource):
    """A `NexmarkSource` whose every split runs on one schedule from `anchor` (clock seconds):
    position `p` is due at `anchor + p / rate`; None: each reader's own start (the base rule)."""

    def __init__(self, config: NexmarkConfig, count: int, *, anchor: float | None = None, **options: Any) -> None:
        super().__init__(config, count, **options)
        self.anchor = anchor

    def reader(self, split: SourceSplit, clock: Any) -> GeneratorSplitReader:
        reader = super().reader(split, clock)
        if self.anchor is not None and self.rate is not None:
            # split j's record k is position j + k * n: due at anchor + (j + k * n) / rate
            reader._started_at = self.anchor + split.index / self.rate
        return reader


class StampedSink(CollectSink):
    """A `CollectSink` whose rows keep their event time (`event_time`), their arrival at the
    sink (`arrived_at`, the task clock) and when the sink subtask opened (`opened_at`)."""

    accepts_columns = False

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self._opened_at = ctx.clock.now()

    def process_batch(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        now = self.ctx.clock.now()
        rows = []
        for record in records:
            row = {k: v for k, v in record.items() if k != TIMESTAMP_FIELD}
            row[EVENT_TIME] = record.get(TIMESTAMP_FIELD)
            row[ARRIVED_AT] = now
            row[OPENED_AT] = self._opened_at
            rows.append(row)
        return super().process_batch(rows)


def build_job(env: Any, query: Any, config: NexmarkConfig, events: int, *, rate: float | None,
              anchor: float | None) -> None:
    source = ScheduledNexmarkSource(config, events, splits=env.parallelism, rate=rate, anchor=anchor)
    strategy = nexmark_event_time(config.max_out_of_orderness_ms)
    query.build(env.from_source(source, watermark_strategy=strategy)).sink_to(StampedSink(SINK))


def make_env(mode: str, *, parallelism: int, interval: float, alignment_timeout: float,
             storage: str | None) -> Any:
    from runtime import StreamEnvironment

    env = StreamEnvironment(parallelism=parallelism, buffer_size=256, credits=8, buffer_timeout=0.005)
    profile = parse_mode(mode)
    if profile.enabled:
        env.enable_checkpointing(interval=interval, **profile.checkpointing(alignment_timeout),
                                 tolerable_failures=1_000_000, storage=storage)
    return env


def committed_rows(result: Any) -> list[tuple[int, dict[str, Any]]]:
    """(checkpoint id, row) of every committed row under a checkpoint (end-of-input ones left out)."""
    out = []
    for txn in result.committer.transactions(SINK):
        last = txn.rpartition("/")[2]
        if last.isdigit():
            out.extend((int(last), row) for row in result.committer.records(SINK, txn))
    return out


def created_at(config: NexmarkConfig, anchor: float, event_time: float) -> float:
    return anchor + (event_time - config.base_time) / 1000.0


def commit_latencies_ms(result: Any, config: NexmarkConfig, anchor: float, since: float, last_event: int) -> list[float]:
    """Sorted latencies (ms) from each committed row's event creation to its checkpoint's completion."""
    done = {c.id: c.end_time for c in result.checkpoints if c.completed}
    out = []
    for checkpoint, row in committed_rows(result):
        t = row.get(EVENT_TIME)
        if t is None or t > last_event or checkpoint not in done:
            continue
        created = created_at(config, anchor, t)
        if created >= since:
            out.append((done[checkpoint] - created) * 1e3)
    return sorted(out)


def event_throughput(result: Any, events: int) -> float | None:
    """`events` over the span from the earliest sink opening to the last output row (None: no rows)."""
    rows = result.output(SINK)
    if not rows:
        return None
    span = max(r[ARRIVED_AT] for r in rows) - min(r[OPENED_AT] for r in rows)
    return events / span if span > 0 else None


def last_event_time(config: NexmarkConfig, events: int) -> int:
    """The event time (ms) of the last of `events` events."""
    return config.base_time + (events - 1) * 1000 // config.event_rate


def _pct(values: list[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else round(value, 6)


def summarise(combo: Combination, latency_run: Any, throughput_run: Any, *, config: NexmarkConfig, anchor: float,
              warmup: float, events: int, rate: float, throughput_events: int) -> Outcome:
    last_event = last_event_time(config, events)
    since = anchor + warmup
    latencies = commit_latencies_ms(latency_run, config, anchor, since, last_event)
    measured = [c for c in latency_run.checkpoints if c.trigger_time >= since]
    done = [c for c in measured if c.completed]
    aborted = [c for c in measured if not c.completed]
    durations = [c.duration * 1e3 for c in done]
    alignments = [c.alignment_time * 1e3 for c in done]
    throughput = event_throughput(throughput_run, throughput_events)
    row: dict[str, Any] = {
        "executor": combo.executor, "scenario": combo.scenario, "mode": combo.mode,
        "parallelism": combo.parallelism, "status": "ok",
        "throughput": None if throughput is None else round(throughput, 3),
        "latency_p50": _pct(latencies, 50), "latency_p90": _pct(latencies, 90), "latency_p99": _pct(latencies, 99),
        "latency_p99_9": _pct(latencies, 99.9), "latency_max": _pct(latencies, 100),
        "checkpoint_duration_p50": _pct(durations, 50), "checkpoint_duration_p99": _pct(durations, 99),
        "checkpoint_duration_max": _pct(durations, 100),
        "alignment_time_p50": _pct(alignments, 50), "alignment_time_p99": _pct(alignments, 99),
        "alignment_time_max": _pct(alignments, 100),
        "persisted_bytes": sum(c.persisted_bytes for c in done),
        "persisted_bytes_p50": percentile([c.persisted_bytes for c in done], 50),
        "state_bytes": max((c.state_bytes for c in done), default=0),
        "state_bytes_p50": percentile([c.state_bytes for c in done], 50),
        "checkpoints_completed": len(done), "checkpoints_aborted": len(aborted),
        "abort_reasons": abort_reasons(aborted), "debloated_buffer_size": None,
        "rate": rate, "records": events, "output_rows": len(latency_run.output(SINK)), "repeats": 1,
    }
    n = len(latencies)
    cdf = [(round(latencies[min(n - 1, int(round(q * (n - 1) / 200)))], 6), q / 200) for q in range(201)] if n else []
    points = [{"id": c.id, "trigger_time": c.trigger_time, "duration": c.duration * 1e3, "completed": c.completed,
               "failure_reason": c.failure_reason.value if c.failure_reason else None, "unaligned": c.unaligned,
               "alignment_time": c.alignment_time * 1e3, "persisted_bytes": c.persisted_bytes,
               "state_bytes": c.state_bytes, "subtasks": subtask_phases(c)}
              for c in sorted(measured, key=lambda c: c.id)]
    return Outcome(row=row, latency_cdf=cdf, checkpoints=points)


def query_output(result: Any) -> list[dict[str, Any]]:
    """A run's committed rows without the benchmark's stamps (what the query itself produced)."""
    return [{k: v for k, v in row.items() if k not in (EVENT_TIME, ARRIVED_AT, OPENED_AT)} for row in result.output(SINK)]
