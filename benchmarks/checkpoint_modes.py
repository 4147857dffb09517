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

On Ray, checkpoints go to a fresh local directory per run (as `barrierflow demo` does) and every
task has a worker actor of its own (`slots_per_worker=1`, not Ray's default of one per pipeline):
the structure the simulator models, so the two executors' rows run the same job the same way; on
the simulator they stay in memory and writes are charged virtual time.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.modes_job import CountKeepStamp, KeyedRecords, RemoteSplitGenerator, ScheduledGenerator, parse
from benchmarks.modes_outcome import (
    SINK,
    Combination,
    Outcome,
    barrier_timeline,
    checkpoint_phases,
    failed_outcome,
    load_fields,
    measured_load,
    measured_since,
    merge_runs,
    rotated,
    summarise,
)
from benchmarks.modes_table import UNITS, render_table, write_outputs
from benchmarks.progress_lines import ProgressLines
from benchmarks.report import (
    add_output_arguments,
    at_least_one,
    local_checkpoint_dir,
    output_of,
    parse_args,
)
from benchmarks.targets import target_checks, targets  # noqa: F401  (part of this module's interface)
from benchmarks.windowed_join import add_windowed_join
from checkpoint.modes import parse_mode
from operators.sources import GeneratorSource
from runtime.calibration.predict import SIMULATED_RAY_OPTIONS
from vocabulary.options import InvalidOptionError

MODES = ("none", "aligned", "unaligned", "aligned-timeout", "at-least-once", "aligned-debloat", "unaligned-debloat")
#: the debloating modes run in these scenarios only (elsewhere nothing queues for them to shrink)
DEBLOAT_SCENARIOS = ("backpressure",)
SCENARIOS = ("uniform", "skewed", "slow-channel", "backpressure", "scale", "windowed-join")
EXECUTORS = ("sim", "ray")
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
    #: target of the `*-debloat` modes (seconds of throughput in flight; `vocabulary.debloat`); the
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


# ---------------------------------------------------------------------------- one combination


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
        from runtime.sim.costs import CostModel
        from runtime.sim.network import NetworkOptions

        # the slow subtask's user function is expensive per record (as the sleeping one on Ray);
        # its per-buffer overhead is that of any task
        slow = {"count[1]": profile.slowdown} if combo.scenario == "backpressure" and combo.parallelism > 1 else {}
        return env.execute(combo.label.replace("/", "-"), executor="sim", seed=1, costs=CostModel(slow_records=slow),
                           network=NetworkOptions(link_delays=links), trace_barriers=trace_barriers)
    return env.execute(combo.label.replace("/", "-"), executor="ray", trace_barriers=trace_barriers,
                       **SIMULATED_RAY_OPTIONS, **({"link_delays": links} if links else {}))


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
    schedule = [(r, c) for r in range(repeat) for c in rotated(combos, r) if r == 0 or c.executor != "sim"]
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
    from vocabulary.debloat import BufferDebloatConfig, BufferDebloatError

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
