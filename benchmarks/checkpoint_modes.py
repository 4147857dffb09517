"""Checkpoint modes compared: none, aligned, unaligned, aligned with timeout, at-least-once, and
aligned and unaligned with buffer debloating.

    python -m benchmarks.checkpoint_modes [--quick] [--executor sim|ray|all] [--scenario NAME ...]
                                          [--modes MODE ...] [--repeat N] [--json PATH] [--out DIR]
                                          [--peers]
    barrierflow bench ...   (the same)

Theory of operation
-------------------
Every (executor, scenario, mode) combination runs the page-view shaped job

    generator -> map "parse" -> key_by(key) -> keyed count "count" -> CollectSink "bench"

twice:

* a **latency run**: an open-loop generator at a target rate. Each record is stamped with the
  time it was *due* (`ScheduledGenerator`), not the time the source got round to reading it, so a
  source held back by backpressure does not hide the wait (no coordinated omission). The count
  step (chained with the sink) stamps when it took the record; latency is the difference. The
  first `warmup` seconds are left out of every statistic (records created and checkpoints
  triggered then): on Ray actors are still starting and a backlog builds that has nothing to do
  with checkpointing; on the simulator the backpressure queues are still filling.
* a **throughput run**: the same job reading as fast as it can (max rate); throughput is the
  rate records were counted in the middle of the run (the first and last fifth left out: start-up,
  and the drain of whatever queued in front of a slow subtask), comparable across executors.
  In `backpressure` the throughput run checkpoints every `backpressure_throughput_interval` (1 s),
  longer than any mode's checkpoints take there, so every mode completes about as many
  checkpoints and the throughput columns compare what a mode costs, not how often it ran: at the
  100 ms interval checkpoints run back to back, and a mode whose checkpoints end sooner (unaligned,
  debloating) runs several times as many, each with its fixed cost (on Ray ~20 ms of CPU).

On Ray, checkpoints go to a fresh local directory per run (as `barrierflow demo` does); on the
simulator they stay in memory and writes are charged virtual time.

Scenarios: `uniform` keys; `skewed` keys (Zipf); `slow-channel` (the generator gets one more
subtask, reading a thin split — 0.25 % of the records — over a slow link, `link_delay` late: its
barriers arrive late while the job has headroom, so aligned checkpoints block the other channels
meanwhile and the other modes do not); `backpressure` (keyed subtask 1 is slow per record: a
`CostModel` slowdown on the simulator, a sleeping keyed function on Ray; the open-loop rate is
above what that subtask can take, so the job runs backpressured; the `*-debloat` modes run here
only); `scale` (parallelism 1, 2, 4 and, without --quick, 8; uniform keys); `windowed-join`
(uniform keys; a window join between the stream's even and odd records in 100 ms tumbling
event-time windows before the count step, `benchmarks.windowed_join`: state that grows with the
window, and latency that includes the wait for it to close). Executors: `sim` (virtual time:
noise-free and deterministic, the same combination gives the same row every time) and `ray` (wall
clock). A combination that fails gives a row with `status` saying why, never made-up numbers.

Output (see `FIELDS` and `UNITS`): one JSON row per combination (with the per-subtask phases of
every checkpoint), a Markdown table (printed and saved as `checkpoint_modes.md`), target lines
(`benchmarks.targets`), PNG plots (`benchmarks.plots`) and `report.html` (`benchmarks.html_report`)
of the figures `benchmarks.figures` defines: latency CDFs, checkpoint durations over time, the
barrier timeline and the phase Gantt of one checkpoint per mode (the latency runs record barrier
arrivals per channel, snapshots and acknowledgements with `trace_barriers=True`: virtual time on
the simulator, wall time on Ray).

Repeats (`--repeat N`): on this kind of machine one Ray run of a combination moves by 10-30 %
between runs minutes apart, enough to flip a target's verdict. With N > 1 the whole Ray matrix
runs N times, one repeat after the other (so the modes a target compares run side by side), each
row holds the median run's numbers (`merge_runs`), the JSON keeps every run (`runs`), and each
target line says in how many repeats it was met on that repeat's rows alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.modes_table import UNITS, render_table, write_outputs
from benchmarks.progress_lines import ProgressLines
from benchmarks.report import (
    abort_reasons,
    add_output_arguments,
    at_least_one,
    local_checkpoint_dir,
    output_of,
    parse_args,
    percentile,
)
from benchmarks.targets import target_checks, targets  # noqa: F401  (part of this module's interface)
from benchmarks.windowed_join import add_windowed_join
from checkpoint.modes import parse_mode
from checkpoint.options import InvalidOptionError
from operators import KeyedProcessFunction
from operators.sources import GeneratorSource, GeneratorSplitReader, SourceSplit

MODES = ("none", "aligned", "unaligned", "aligned-timeout", "at-least-once", "aligned-debloat", "unaligned-debloat")
#: the debloating modes run in these scenarios only (elsewhere nothing queues for them to shrink)
DEBLOAT_SCENARIOS = ("backpressure",)
SCENARIOS = ("uniform", "skewed", "slow-channel", "backpressure", "scale", "windowed-join")
EXECUTORS = ("sim", "ray")
SINK = "bench"

#: row fields, in table order (units in `UNITS`)
FIELDS = (
    "executor", "scenario", "mode", "parallelism", "status",
    "throughput",
    "latency_p50", "latency_p90", "latency_p99", "latency_p99_9", "latency_max",
    "checkpoint_duration_p50", "checkpoint_duration_p99", "checkpoint_duration_max",
    "alignment_time_p50", "alignment_time_max",
    "persisted_bytes", "persisted_bytes_p50", "state_bytes",
    "checkpoints_completed", "checkpoints_aborted", "abort_reasons",
    "debloated_buffer_size",
    "rate", "records", "repeats",
    "load_average", "other_cpu_share", "contended", "cores",
)


# ---------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """How big the runs are for one executor.

    Attributes:
        rate: open-loop rate, records/s over all sources (latency run).
        duration: length of the latency run (records = rate * duration), warm-up included.
        warmup: seconds at its start left out of the statistics.
        max_rate_records: records of the throughput run.
        parallelism: parallelism of every scenario but `scale`.
        scale: parallelisms of the `scale` scenario.
        interval: checkpoint interval (seconds).
        alignment_timeout: the `aligned-timeout` mode's alignment timeout (seconds).
        keys: number of distinct keys.
        zipf_s: exponent of the `skewed` scenario's Zipf distribution.
        slowdown: `backpressure` on sim: CostModel slowdown of the slow keyed subtask.
        slow_delay: `backpressure` on Ray: seconds the slow keyed subtask sleeps per record.
        backpressure_rate: open-loop rate of the `backpressure` scenario (above the slow
            subtask's capacity).
        buffer_size, credits, buffer_timeout: network settings of the job.
        backpressure_buffer_size: buffer size of the `backpressure` scenario, if different.
        backpressure_throughput_interval: checkpoint interval of the `backpressure` scenario's
            throughput run (seconds; None: `interval`).
        scenarios: the only scenarios this profile runs (None: every one asked for).
    """

    rate: float
    duration: float
    max_rate_records: int
    #: seconds at the start of the latency run its statistics leave out (actors starting, first
    #: calls, queues filling): records created and checkpoints triggered before then
    warmup: float = 0.0
    parallelism: int = 2
    scale: tuple[int, ...] = (1, 2, 4, 8)
    interval: float = 0.1
    alignment_timeout: float = 0.01
    keys: int = 128
    zipf_s: float = 1.2
    slowdown: float = 20.0
    slow_delay: float = 2e-4
    backpressure_rate: float = 100_000.0
    buffer_size: int = 256
    credits: int = 8
    buffer_timeout: float = 0.005
    #: buffer size of the `backpressure` scenario (None: `buffer_size`)
    backpressure_buffer_size: int | None = None
    #: checkpoint interval of the `backpressure` throughput run: above every mode's checkpoint
    #: duration there (aligned ~0.6 s on Ray), so the modes complete about as many checkpoints
    backpressure_throughput_interval: float | None = 1.0
    #: the scenarios this profile runs (None: all that were asked for)
    scenarios: tuple[str, ...] | None = None
    #: checkpoint to a fresh local directory per run (else in memory; the simulator charges
    #: virtual write time either way)
    local_storage: bool = False
    #: target of the `*-debloat` modes (seconds of throughput in flight; `runtime.core.debloat`); the
    #: simulator's 10 ms: its credit round trip is ~2 ms of network delay and costs no CPU
    debloat_target: float = 0.01
    #: `slow-channel`: seconds the link to the remote split adds to everything it sends: another
    #: region's distance, and well above the base p99 of a loaded Ray (~25-60 ms), so the wait
    #: it causes stands out
    link_delay: float = 0.08
    #: `slow-channel`: share of the records in the remote split (kept small, so its own late
    #: records stay out of the p99 of every mode)
    remote_share: float = 0.0025
    #: `slow-channel`: open-loop rate, if not `rate` (the scenario needs headroom)
    slow_channel_rate: float | None = None


PROFILES: dict[tuple[str, bool], Profile] = {
    # (executor, quick)
    # backpressure: twice what the slow subtask takes (~50k rec/s), so the queues in front of it
    # fill within the first 0.2 s and the checkpoints measure the steady state
    ("sim", True): Profile(rate=50_000, duration=0.7, warmup=0.2, max_rate_records=60_000, backpressure_rate=100_000,
                           scale=(1, 2, 4)),  # p8 shows the same trend at a third of the matrix's time
    ("sim", False): Profile(rate=50_000, duration=2.2, warmup=0.2, max_rate_records=300_000,
                            backpressure_rate=100_000),
    # quick on Ray: only the targets' scenarios (uniform, slow-channel, backpressure); every Ray
    # run costs seconds of actor start-up and teardown, ~10 minutes a repeat.
    # Ray: the first 1.5 s are start-up (actors still starting take no input: 0.5-1 s of backlog,
    # longer on a loaded machine). slow-channel runs at 5k rec/s: it needs headroom, and on 2
    # cores at 20k rec/s the CPU that checkpoints every 100 ms take (snapshots, sink commits)
    # gave every mode a 100-200 ms tail, at-least-once's as much as aligned's.
    # Debloating on Ray targets 70 ms: a credit round trip is Ray calls and thread hand-offs,
    # tens of ms on a loaded machine, and 10-40 ms targets starved the slow subtask (35-70 %
    # less throughput); its backpressure buffers (250 records) hold ~0.6 s of its work in flight.
    # Measured idle (load < 3, --repeat 3, throughput runs at equal checkpoint rates): 100 ms gave
    # aligned checkpoints 4.9x shorter for 7.0 % throughput, 70 ms 5.1x for 4.7 % (per-run
    # spreads overlap: the margins to the 5x / 5 % targets are thin either way)
    ("ray", True): Profile(rate=20_000, duration=3.5, warmup=1.5, max_rate_records=60_000, backpressure_rate=20_000,
                           buffer_size=1000, backpressure_buffer_size=250, debloat_target=0.07, slow_channel_rate=5_000,
                           scenarios=("uniform", "slow-channel", "backpressure"), local_storage=True),
    ("ray", False): Profile(rate=20_000, duration=6.0, warmup=1.5, max_rate_records=400_000, backpressure_rate=20_000,
                            buffer_size=1000, backpressure_buffer_size=250, debloat_target=0.07, slow_channel_rate=5_000,
                            local_storage=True),
}


# ---------------------------------------------------------------------------- the job


class KeyedRecords:
    """`fn(i)` of the generator: `{"i": i, "key": "k<n>"}`, keys uniform or Zipf(s) over `keys`.

    The key is a pure function of `i` (a hashed uniform draw mapped through the Zipf CDF), so a
    replayed record gets the same key and both executors see the same stream.
    """

    def __init__(self, keys: int, zipf_s: float | None = None) -> None:
        if keys < 1:
            raise ValueError(f"keys must be >= 1, got {keys!r}")
        self.keys = keys
        self.zipf_s = zipf_s
        self.names = [f"k{n}" for n in range(keys)]
        cdf: list[float] = []
        if zipf_s is not None:
            weights = [1.0 / (n + 1) ** zipf_s for n in range(keys)]
            total, acc = sum(weights), 0.0
            for w in weights:
                acc += w
                cdf.append(acc / total)
        self.cdf = cdf

    def __call__(self, i: int) -> dict[str, Any]:
        h = (i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
        h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
        if not self.cdf:
            return {"i": i, "key": self.names[h % self.keys]}
        u = h / 2.0**64
        return {"i": i, "key": self.names[min(self.keys - 1, bisect_right(self.cdf, u))]}


class ScheduledGenerator(GeneratorSource):
    """A `GeneratorSource` whose `created_at` is each record's *due* time under the rate (the
    open-loop schedule, `stamp="due"`), so time spent waiting to be read counts as latency; at
    max rate (no rate, no schedule) when it was read."""

    def __init__(self, *, rate: float | None = None, **options: Any) -> None:
        super().__init__(rate=rate, stamp="read" if rate is None else "due", **options)


class RemoteSplitGenerator(ScheduledGenerator):
    """A `ScheduledGenerator` whose last split is thin: it holds `remote_share` of the records
    (and of the rate), the other splits share the rest evenly (`slow-channel`: the last subtask
    reads a remote partition over a slow link)."""

    def __init__(self, *, remote_share: float, **options: Any) -> None:
        super().__init__(**options)
        if not 0 < remote_share < 1 or self.num_splits < 2:
            raise ValueError(f"RemoteSplitGenerator: remote_share must be in (0, 1) and splits >= 2, got "
                             f"{remote_share!r} and {self.num_splits!r}")
        self.remote_share = remote_share

    def _shares(self) -> list[float]:
        even = (1 - self.remote_share) / (self.num_splits - 1)
        return [even] * (self.num_splits - 1) + [self.remote_share]

    def splits(self) -> list[SourceSplit]:
        total = self.total_records()
        if total is None:
            return super().splits()
        remote = max(1, round(total * self.remote_share))
        counts = [len(range(i, total - remote, self.num_splits - 1)) for i in range(self.num_splits - 1)] + [remote]
        return [SourceSplit(f"{self.name}-{i}", i, 0, n) for i, n in enumerate(counts)]

    def reader(self, split: Any, clock: Any) -> GeneratorSplitReader:
        reader = GeneratorSplitReader(self, split, clock)
        if self.rate is not None:  # this split's own pace (the base class divides the rate evenly)
            reader._rate = self.rate * self._shares()[split.index]
        return reader


def parse(record: dict[str, Any]) -> dict[str, Any]:
    """The stateless step: keeps `created_at` so the sink can measure latency."""
    return {"key": record["key"], "i": record["i"], "created_at": record["created_at"]}


class CountKeepStamp(KeyedProcessFunction):
    """Running count per key; forwards `created_at` and stamps `processed_at` (for throughput).

    Args:
        slow_subtask: the subtask that sleeps `delay` seconds per record (Ray backpressure), or None.
        delay: seconds per record on `slow_subtask`; sleeps are batched into >= 1 ms naps.
    """

    def __init__(self, slow_subtask: int | None = None, delay: float = 0.0) -> None:
        self.slow_subtask = slow_subtask
        self.delay = delay
        self._debt = 0.0

    def process_element(self, record: dict[str, Any], ctx: Any) -> Iterable[dict[str, Any]]:
        count = ctx.value_state("count", default=0)
        n = count.value() + 1
        count.update(n)
        if self.slow_subtask is not None and ctx.subtask == self.slow_subtask:
            self._debt += self.delay
            if self._debt >= 1e-3:
                time.sleep(self._debt)
                self._debt = 0.0
        yield {"key": ctx.key, "count": n, "created_at": record["created_at"], "processed_at": ctx.now()}


# ---------------------------------------------------------------------------- one combination


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


def plan(executors: Sequence[str], scenarios: Sequence[str], modes: Sequence[str],
         quick: bool) -> list[Combination]:
    """Every combination to run, in run order (executor, scenario, parallelism, mode)."""
    combos = []
    for executor in executors:
        profile = PROFILES[(executor, quick)]
        for scenario in scenarios:
            if profile.scenarios is not None and scenario not in profile.scenarios:
                continue
            parallelisms = profile.scale if scenario == "scale" else (profile.parallelism,)
            for p in parallelisms:
                combos.extend(Combination(executor, scenario, mode, p) for mode in modes
                              if not mode.endswith("-debloat") or scenario in DEBLOAT_SCENARIOS)
    return combos


def make_env(combo: Combination, profile: Profile, storage: str | None = None,
             interval: float | None = None) -> Any:
    """A `StreamEnvironment` with the combination's checkpointing mode (checkpoints in `storage`,
    None: in memory; every `interval` seconds, None: the profile's)."""
    from runtime import StreamEnvironment

    buffer_size = profile.buffer_size
    if combo.scenario == "backpressure" and profile.backpressure_buffer_size is not None:
        buffer_size = profile.backpressure_buffer_size
    env = StreamEnvironment(parallelism=combo.parallelism, buffer_size=buffer_size,
                            credits=profile.credits, buffer_timeout=profile.buffer_timeout)
    mode = parse_mode(combo.mode, accepted=MODES)
    if mode.debloat:
        env.set_buffer_debloating(target=profile.debloat_target)
    if mode.enabled:
        env.enable_checkpointing(
            interval=profile.interval if interval is None else interval,
            **mode.checkpointing(profile.alignment_timeout),
            tolerable_failures=1_000_000,
            storage=storage,
        )
    return env


def build_job(env: Any, combo: Combination, profile: Profile, *, rate: float | None, count: int | None) -> None:
    """The page-view shaped job. `slow-channel`: the generator gets one more subtask, which reads
    a thin split (`remote_share` of the records) over a slow link (`link_delays`)."""
    from operators import CollectSink

    keys = KeyedRecords(profile.keys, profile.zipf_s if combo.scenario == "skewed" else None)
    if combo.scenario == "slow-channel":
        source: GeneratorSource = RemoteSplitGenerator(count=count, rate=rate, fn=keys, splits=combo.parallelism + 1,
                                                       name="generator", remote_share=profile.remote_share)
        stream = env.from_source(source).set_parallelism(combo.parallelism + 1) \
            .map(parse, name="parse").set_parallelism(combo.parallelism + 1)
    else:
        source = ScheduledGenerator(count=count, rate=rate, fn=keys, splits=combo.parallelism, name="generator")
        stream = env.from_source(source).map(parse, name="parse")
    if combo.scenario == "windowed-join":
        stream = add_windowed_join(env, stream)
    slow = combo.scenario == "backpressure" and combo.executor == "ray" and combo.parallelism > 1
    function = CountKeepStamp(slow_subtask=1 if slow else None, delay=profile.slow_delay)
    stream.key_by("key").process(function, name="count").sink_to(CollectSink(SINK))


def link_delays(combo: Combination, profile: Profile) -> dict[str, float]:
    """The slow links of a combination's job (task name -> seconds): `slow-channel`'s remote split."""
    if combo.scenario != "slow-channel":
        return {}
    return {f"Source: generator[{combo.parallelism}]": profile.link_delay}


def execute(combo: Combination, profile: Profile, *, rate: float | None, count: int | None,
            trace_barriers: bool = False, interval: float | None = None) -> Any:
    """Run the job once (checkpoints every `interval`, None: the profile's); returns the `JobResult`."""
    kw = {"rate": rate, "count": count, "trace_barriers": trace_barriers, "interval": interval}
    if combo.executor == "sim" or not profile.local_storage:
        return _execute(combo, profile, storage=None, **kw)
    with local_checkpoint_dir() as storage:
        return _execute(combo, profile, storage=storage, **kw)


def _execute(combo: Combination, profile: Profile, *, rate: float | None, count: int | None,
             trace_barriers: bool, storage: str | None, interval: float | None) -> Any:
    env = make_env(combo, profile, storage, interval)
    build_job(env, combo, profile, rate=rate, count=count)
    links = link_delays(combo, profile)
    if combo.executor == "sim":
        from runtime.sim.executor import CostModel, NetworkOptions

        # the slow subtask's user function is expensive per record (as the sleeping one on Ray);
        # its per-buffer overhead is that of any task
        slow = {"count[1]": profile.slowdown} if combo.scenario == "backpressure" and combo.parallelism > 1 else {}
        return env.execute(combo.label.replace("/", "-"), executor="sim", seed=1, costs=CostModel(slow_records=slow),
                           network=NetworkOptions(link_delays=links), trace_barriers=trace_barriers)
    return env.execute(combo.label.replace("/", "-"), executor="ray", trace_barriers=trace_barriers,
                       **({"link_delays": links} if links else {}))


def open_loop_rate(combo: Combination, profile: Profile) -> float:
    if combo.scenario == "backpressure":
        return profile.backpressure_rate
    if combo.scenario == "slow-channel" and profile.slow_channel_rate is not None:
        return profile.slow_channel_rate
    return profile.rate


def run_combination(combo: Combination, profile: Profile) -> Outcome:
    """Latency run + throughput run of one combination, summarised as a row (see `FIELDS`)."""
    started = time.perf_counter()
    rate = open_loop_rate(combo, profile)
    records = int(rate * profile.duration)
    # traced: a few tuples per checkpoint and task, no measurable cost on either executor
    latency_run = execute(combo, profile, rate=rate, count=records, trace_barriers=True)
    since = measured_since(latency_run, profile.warmup)
    max_records, interval = profile.max_rate_records, None
    if combo.scenario == "backpressure":  # the slow subtask caps throughput: keep the run short
        max_records, interval = min(max_records, records), profile.backpressure_throughput_interval
    throughput_run = execute(combo, profile, rate=None, count=max_records, interval=interval)
    outcome = summarise(combo, latency_run, throughput_run, rate=rate, records=records, since=since)
    outcome.timeline = barrier_timeline(latency_run, since)
    outcome.phases = checkpoint_phases(latency_run, since)
    outcome.wall_s = time.perf_counter() - started
    return outcome


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


# ---------------------------------------------------------------------------- the matrix


def run_matrix(combos: Sequence[Combination], quick: bool, *, repeat: int = 1, show_progress: bool = True,
               on_outcome: Callable[[Outcome], None] | None = None,
               changes: dict[str, Any] | None = None) -> list[Outcome]:
    """Run every combination (Ray started once for the Ray ones), with a rich progress bar.

    `repeat` > 1 runs the Ray combinations that many times, the whole matrix once per repeat, so
    the modes compared by a target run side by side and machine drift hits them alike (each
    repeat starts a scenario's modes at another one, `_rotated`); each combination's outcome is
    then `merge_runs` of its runs. Simulator combinations run once: they are deterministic, a
    repeat would give the same row. `on_outcome` sees every single run. `changes` replaces fields
    of every executor's profile (e.g. `debloat_target`).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
    schedule = [(r, c) for r in range(repeat) for c in _rotated(combos, r) if r == 0 or c.executor != "sim"]
    runs: dict[Combination, list[Outcome]] = {c: [] for c in combos}
    ray_started = False
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # a terminal gets the live bar; a log or pipe a plain line at least every PROGRESS_EVERY seconds
    live = show_progress and sys.stdout.isatty()
    lines = ProgressLines(len(schedule), every=PROGRESS_EVERY) if show_progress and not live else None
    with Progress(*columns, disable=not live, transient=False) as progress, lines or contextlib.nullcontext():
        bar = progress.add_task("checkpoint modes", total=len(schedule))
        ray_error: BaseException | None = None
        by_key: dict[tuple[int, str, str, str, int], Outcome] = {}
        try:
            for r, combo in schedule:
                suffix = f" #{r + 1}" if repeat > 1 and combo.executor != "sim" else ""
                progress.update(bar, description=f"{combo.label + suffix:<44}")
                if lines is not None:
                    lines.step(f"{combo.label} (repeat {r + 1}/{repeat if combo.executor != 'sim' else 1})")
                if combo.executor == "ray" and not ray_started and ray_error is None:
                    try:
                        from runtime.ray.cluster import ensure_ray

                        ray_started = ensure_ray()
                    except Exception as exc:  # reported per row, never faked
                        ray_error = exc
                same = by_key.get((r, combo.executor, "uniform", combo.mode, combo.parallelism))
                try:
                    if combo.executor == "ray" and ray_error is not None:
                        raise ray_error
                    if combo.scenario == "scale" and same is not None:
                        # scale at the default parallelism is the uniform scenario: same job, same row
                        outcome = replace(same, row={**same.row, "scenario": combo.scenario_label})
                    else:
                        with measured_load(combo) as machine:
                            outcome = run_combination(combo, replace_profile(combo.executor, quick, **(changes or {})))
                        outcome.row.update(load_fields(machine.result if machine is not None else None))
                except Exception as exc:
                    if os.environ.get("BARRIERFLOW_BENCH_DEBUG"):
                        traceback.print_exc()
                    outcome = failed_outcome(combo, exc)
                runs[combo].append(outcome)
                by_key[(r, combo.executor, combo.scenario, combo.mode, combo.parallelism)] = outcome
                if on_outcome is not None:
                    on_outcome(outcome)
                progress.advance(bar)
                if lines is not None:
                    lines.step_done()
        finally:
            if ray_started:
                import ray

                ray.shutdown()
    return [merge_runs(runs[c]) for c in combos]


#: seconds between two progress lines at most, when the output is not a terminal
PROGRESS_EVERY = 5.0


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


def _rotated(combos: Sequence[Combination], r: int) -> list[Combination]:
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


def payload_of(outcomes: Sequence[Outcome], args: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: rows, units, the plot series and how it was run."""
    series = {
        "/".join((o.row["executor"], o.row["scenario"], o.row["mode"])): {
            "latency_cdf": o.latency_cdf, "checkpoints": o.checkpoints, "timeline": o.timeline,
            "phases": o.phases,
        }
        for o in outcomes
    }
    return {
        "benchmark": "checkpoint_modes",
        "rows": [o.row for o in outcomes],
        # per combination (in `rows` order), the row of each repeat: more than one with --repeat
        "runs": [o.runs or [o.row] for o in outcomes],
        "units": UNITS,
        "series": series,
        "wall_s": {"/".join((o.row["executor"], o.row["scenario"], o.row["mode"])): round(o.wall_s, 3)
                   for o in outcomes},
        "args": args,
        "profiles": {f"{e}{'-quick' if q else ''}": _profile_json(p) for (e, q), p in PROFILES.items()},
    }


def _profile_json(profile: Profile) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in profile.__dict__.items()}


#: wall seconds one Ray combination took with --quick on 2 cores (load average 3, uniform 19 s,
#: backpressure 32-38 s: its throughput run reads at the slow subtask's pace); without --quick the
#: runs are longer (6 s instead of 3.5 s, 400,000 records at max rate instead of 60,000)
RAY_SECONDS = {(True, "backpressure"): 35.0, (True, None): 20.0, (False, "backpressure"): 50.0, (False, None): 30.0}


def ray_estimate(combos: Sequence[Combination], quick: bool, repeat: int = 1) -> float:
    """Wall seconds the Ray combinations of `combos` take, about (`RAY_SECONDS`, each repeat)."""
    return repeat * sum(RAY_SECONDS.get((quick, c.scenario), RAY_SECONDS[(quick, None)])
                        for c in combos if c.executor == "ray")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    quick_ray = ray_estimate(plan(["ray"], SCENARIOS, MODES, True), True)
    full_ray = ray_estimate(plan(["ray"], SCENARIOS, MODES, False), False)
    add_output_arguments(parser, "checkpoint_modes",
                         quick_help="small runs (the simulator's matrix in about a minute on 2 cores)")
    parser.add_argument("--executor", choices=[*EXECUTORS, "all"], default="sim",
                        help="sim (default: the deterministic simulator only), ray (the same matrix on a local Ray: "
                             f"about {quick_ray / 60:.0f} minutes with --quick, measured on 2 cores at load 3, "
                             f"roughly {full_ray / 60:.0f} without; longer on a busier machine) or all (both)")
    parser.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS), metavar="SCENARIO",
                        help=f"scenarios to run ({', '.join(SCENARIOS)}); default all")
    parser.add_argument("--modes", nargs="+", type=_mode_name, default=list(MODES), metavar="MODE",
                        help=f"modes to run ({', '.join(MODES)}); default all")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots and the HTML report")
    parser.add_argument("--peers", action="store_true",
                        help="also run PyFlink and Bytewax (optional extra: pip install -e .[peers])")
    parser.add_argument("--no-progress", action="store_true",
                        help=f"no progress bar (on a terminal) and no progress lines (otherwise: one at least every "
                             f"{PROGRESS_EVERY:g} s)")
    parser.add_argument("--repeat", type=at_least_one, default=1, metavar="N",
                        help="run the Ray combinations N times, the matrix once per repeat, and report "
                             "medians (sim runs once: it is deterministic); default 1")
    parser.add_argument("--debloat-target", type=_debloat_target, default=None, metavar="S",
                        help="target of the *-debloat modes, seconds of throughput in flight (default: the "
                             "profile's, 0.01 on sim, 0.07 on Ray)")


def _mode_name(text: str) -> str:
    try:
        return parse_mode(text, accepted=MODES, option="--modes").name
    except InvalidOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None


def _debloat_target(text: str) -> float:
    from runtime.core.debloat import BufferDebloatConfig, BufferDebloatError

    try:
        value = float(text)
        BufferDebloatConfig(target=value).validate()
    except (ValueError, BufferDebloatError):
        raise argparse.ArgumentTypeError(f"--debloat-target must be a number of seconds > 0, got {text!r}") from None
    return value



def run_from_args(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    executors = list(EXECUTORS) if args.executor == "all" else [args.executor]
    combos = plan(executors, args.scenario, args.modes, args.quick)
    for executor in executors:
        only = PROFILES[(executor, args.quick)].scenarios
        skipped = [s for s in args.scenario if only is not None and s not in only]
        if skipped:
            print(f"note: {executor}{' --quick' if args.quick else ''} runs only {', '.join(only)}; "
                  f"skipped {', '.join(skipped)} (run without --quick for them)")
    ray = ray_estimate(combos, args.quick, args.repeat)
    if ray:
        runs = sum(c.executor == "ray" for c in combos) * args.repeat
        print(f"note: {runs} Ray run(s) of a combination take about {ray / 60:.0f} minutes on 2 cores (measured at "
              "load 3; longer on a busier machine)", flush=True)
    json_path = output_of(args, "checkpoint_modes").json_path
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    changes = {} if args.debloat_target is None else {"debloat_target": args.debloat_target}
    outcomes = run_matrix(combos, args.quick, repeat=args.repeat, show_progress=not args.no_progress, changes=changes)
    if args.peers:
        from benchmarks.peers import run_peers

        outcomes += [Outcome(row=row) for row in run_peers(quick=args.quick, console=console, repeat=args.repeat)]
    settings = {k: v for k, v in vars(args).items() if k != "func"}
    payload = payload_of(outcomes, settings)
    payload["total_wall_s"] = round(time.perf_counter() - started, 3)
    payload["load_average"] = f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end " \
                              f"(1-minute, {os.cpu_count()} cores)"
    files = write_outputs(payload, json_path, args.out, plots=not args.no_plots)
    print(render_table(payload["rows"]))  # plain print: rich would wrap the wide table
    lines = targets(payload["rows"], payload["runs"])
    if lines:
        print("\ntargets:\n" + "\n".join(f"  {line}" for line in lines))
    runs = f" ({args.repeat} repeats of the Ray ones)" if args.repeat > 1 else ""
    print(f"\n{len(combos)} combinations{runs} in {payload['total_wall_s']:.1f} s (load average "
          f"{payload['load_average']}); wrote {', '.join(files)}")
    failed = [o.row for o in outcomes if o.row["status"] != "ok"]
    if failed:
        print(f"{len(failed)} combination(s) failed (see the status column)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint_modes",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run_from_args(parse_args(parser, argv))


def replace_profile(executor: str, quick: bool, **changes: Any) -> Profile:
    """A copy of a built-in profile with `changes` (tests and experiments)."""
    return replace(PROFILES[(executor, quick)], **changes)


if __name__ == "__main__":
    # run the copy imported under the package name, so the job's classes pickle by reference
    # (Ray workers import `benchmarks.checkpoint_modes`, they cannot import `__main__`)
    from benchmarks.checkpoint_modes import main as _main

    sys.exit(_main())
