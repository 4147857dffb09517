"""Fidelity: does the calibrated simulator predict the real executor?

    python -m benchmarks.fidelity [--quick] [--json PATH] [--out DIR] [--measure ray|sim]
                                  [--scenario NAME ...] [--query Q ...] [--modes MODE ...] [--repeat N]
    python -m benchmarks.fidelity --predict-from SAVED.json [--json PATH] [--out DIR]

Theory of operation
-------------------
For each scenario of `benchmarks.checkpoint_modes` (uniform, skewed, slow-channel,
backpressure; `--quick`: the quick Ray profile's three) the job is **calibrated** (on a
wall-clock executor once per round, see `--repeat`; on the simulator once): its
unaligned latency run on the measured executor (`--measure`, default Ray), with the barrier
trace on, and a short run of it at full speed (5 s of its records, as `calibrate` does) are
fitted into a `CostProfile` (`runtime.calibration.fit`). Then every mode (none,
aligned, unaligned, at-least-once) runs twice in the same process: measured — the combination
exactly as `benchmarks.checkpoint_modes` runs it — and predicted — the same job on the
simulator with the scenario's profile (no other knob: the slow subtask of `backpressure` and
the slow link of `slow-channel` are whatever the calibration measured, plus the link delay the
job declares). Both are summarised by `modes_outcome.summarise` (same warm-up, same
windows); predicted checkpoint durations add the profile's coordinator `finalize` time.

NexMark q5 (sliding-window hot items) and q8 (window join of new persons and auctions) are
cells too (`--query`, scenarios `nexmark-q5`, `nexmark-q8`): each query's job as
`benchmarks.nexmark` runs it, calibrated, measured and predicted the same way
(`benchmarks.fidelity_nexmark`; on Ray with a worker actor per subtask, as the other
scenarios); `--duration` and `--max-rate-records` size its latency and full-speed runs too.

Per (scenario, mode, metric) cell: measured, predicted and the relative error
(predicted / measured - 1). `within_25pct_fraction` is the share of cells within +-25 %
(a cell whose measured value is 0 is within when the prediction is 0 too, or below 1 ms / 1 KB).
`order_agreement` is the share of (scenario, metric) pairs where the simulator orders the modes
as the measurement does: every pair of modes whose measured values differ by more than
`TIE` (relative) must be ordered the same way by the prediction (closer pairs are noise).
`order_agreement_separated` judges only the pairs Ray itself orders in every repeat (no run of
one mode on the other side of any run of the other): on Ray run-to-run noise reorders modes that
differ by more than `TIE` (two runs of the same code, one used as the other's prediction,
agreed on the order with median 0.938 and 1.0 in 13 of 42 pairs of runs).
`--repeat N` runs N rounds and compares the per-cell medians. On Ray each round calibrates
every job again, predicts with that round's profile and measures: a calibration is a wall-clock
sample too (two calibrations of NexMark q5 minutes apart fitted step costs 5-35 % apart, and
moved the score by six of 26 cells), so the predicted value is the median of the rounds'
predictions (`predicted_runs`; the JSON keeps every round's profile in `round_profiles`, and
`profiles` holds the first). The simulator's predictions are deterministic, so on `--measure
sim` it calibrates once.
`--measure sim` measures on the simulator's default cost model instead: a fast self-check of
the whole loop (calibration should then reproduce it closely).

`--predict-from SAVED.json` measures nothing: it reads a fidelity JSON (`benchmarks.fidelity_saved`),
predicts every saved cell again with the saved profiles at the saved sizes (the simulator is
deterministic) and compares with the saved measurements: the same table and scores, for work on
the cost model without a Ray run (the JSON gains `predicted_from`). With `--refit` each profile's
step costs and cores are first fitted again from the per-task step tallies its calibration kept
(`calibrated.task_steps`), so a change to how CPU is fitted is judged without a Ray run too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from benchmarks import checkpoint_modes as cm
from benchmarks import fidelity_nexmark as fn
from benchmarks import fidelity_saved
from benchmarks.report import add_output_arguments, at_least_one, markdown_table, output_of, parse_args
from runtime.calibration.fit import CalibrationError, fit_profile, refit_cpu
from runtime.calibration.predict import full_speed_records, predict
from runtime.calibration.profile import CostProfile

MODES = ("none", "aligned", "unaligned", "at-least-once")
SCENARIOS = ("uniform", "skewed", "slow-channel", "backpressure")
#: row fields compared (`modes_outcome.FIELDS` names)
METRICS = ("throughput", "latency_p50", "latency_p99", "checkpoint_duration_p50", "checkpoint_duration_p99",
           "alignment_time_p50", "persisted_bytes_p50")
#: seconds of a calibration run (warm-up included): the step-cost fit splits CPU into per step and
#: per record by least squares, noisy on a few seconds of a low-rate job (the quick latency runs
#: are 3.5 s; slow-channel's 5,000 rec/s then gave per-record costs 3.5 and 5.5 us in two runs)
CALIBRATION_SECONDS = 10.0
#: relative difference under which two modes' measured values count as a tie (not ranked)
TIE = 0.10
WITHIN = 0.25
#: below these a measured 0 and a predicted value agree (ms, bytes)
ZERO = {"persisted_bytes_p50": 1024.0}
ZERO_MS = 1.0


def calibrate_scenario(measure: str, scenario: str, bench: cm.Profile) -> tuple[CostProfile, dict[str, Any]]:
    """Fit the scenario's profile from its unaligned latency run on `measure`, `CALIBRATION_SECONDS`
    long (or the latency runs' duration if longer)."""
    bench = replace(bench, duration=max(bench.duration, CALIBRATION_SECONDS))
    combo = cm.Combination(measure, scenario, "unaligned", bench.parallelism)
    rate = cm.open_loop_rate(combo, bench)
    records = int(rate * bench.duration)
    env = cm.make_env(combo, bench)
    cm.build_job(env, combo, bench, rate=rate, count=records)
    graph = env.get_job_graph(combo.label.replace("/", "-"))
    load = os.getloadavg()[0]
    started = time.perf_counter()
    result = cm.execute(combo, bench, rate=rate, count=records, trace_barriers=True)
    seconds = time.perf_counter() - started
    cores = len(os.sched_getaffinity(0)) if measure == "ray" else None
    # the same job at full speed, as `calibrate` runs it (`at_full_speed`): its steps fitted with these
    started = time.perf_counter()
    saturated = cm.execute(combo, bench, rate=None, count=min(records, full_speed_records(result)))
    info = {"job": combo.label, "executor": measure, "seconds": round(seconds, 2), "load_average": round(load, 2),
            "cpus": os.cpu_count(), "records_in": result.metrics.records_in,
            "saturated_records": saturated.metrics.records_in,
            "saturated_seconds": round(time.perf_counter() - started, 2)}
    profile = fit_profile(result, graph, cores=cores, calibrated=info, since=cm.measured_since(result, bench.warmup),
                          link_delays=cm.link_delays(combo, bench), saturated=saturated)
    return profile, info


def predict_combination(combo: cm.Combination, bench: cm.Profile, profile: CostProfile) -> dict[str, Any]:
    """`checkpoint_modes.run_combination`'s row for `combo`, simulated with `profile`."""
    sim = replace(combo, executor="sim")  # the job without Ray's sleeping subtask: the profile has its cost
    rate = cm.open_loop_rate(combo, bench)
    records = int(rate * bench.duration)
    links = cm.link_delays(combo, bench)

    def run(rate: float | None, count: int, trace: bool) -> Any:
        env = cm.make_env(sim, bench)
        cm.build_job(env, sim, bench, rate=rate, count=count)
        return predict(env, sim.label.replace("/", "-"), profile, link_delays=links, trace_barriers=trace)

    latency_run = run(rate, records, True)
    since = cm.measured_since(latency_run, bench.warmup)
    max_records = min(bench.max_rate_records, records) if combo.scenario == "backpressure" else bench.max_rate_records
    throughput_run = run(None, max_records, False)
    row = cm.summarise(sim, latency_run, throughput_run, rate=rate, records=records, since=since).row
    return fn.with_finalize(row, profile.finalize)


def relative_error(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or predicted is None:
        return None
    if measured == 0:
        return 0.0 if predicted == 0 else None
    return predicted / measured - 1


def within(metric: str, measured: float | None, predicted: float | None) -> bool | None:
    """Whether a cell is within +-25 % (None: nothing to compare)."""
    if measured is None or predicted is None:
        return None
    zero = ZERO.get(metric, ZERO_MS)
    if abs(measured) < zero and abs(predicted) < zero:
        return True
    error = relative_error(measured, predicted)
    return error is not None and abs(error) <= WITHIN


def order_agrees(measured: dict[str, float | None], predicted: dict[str, float | None],
                 runs: dict[str, list[float]] | None = None) -> bool | None:
    """Whether the prediction orders every clearly different pair of modes as measured (None:
    no pair to judge); with `runs` (mode -> its repeats' values) only the pairs whose repeats
    do not overlap are judged."""
    judged = agree = 0
    modes = [m for m in measured if measured[m] is not None and predicted.get(m) is not None]
    for i, a in enumerate(modes):
        for b in modes[i + 1:]:
            ma, mb = measured[a], measured[b]
            if abs(ma - mb) <= TIE * max(abs(ma), abs(mb)):  # type: ignore[operator]
                continue
            if runs is not None and _overlap(runs.get(a, []), runs.get(b, [])):
                continue
            judged += 1
            agree += (ma < mb) == (predicted[a] < predicted[b])  # type: ignore[operator]
    return None if judged == 0 else agree == judged


def _overlap(a: list[float], b: list[float]) -> bool:
    """Whether two modes' repeats interleave (a run of one reaches past a run of the other)."""
    return not a or not b or not (max(a) < min(b) or max(b) < min(a))


def compare(measured_rows: dict[tuple[str, str], list[dict[str, Any]]],
            predicted_rows: Mapping[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    """Cells, `within_25pct_fraction` and `order_agreement` of the median measured rows against
    the median predicted rows (one per calibration)."""
    cells = []
    for (scenario, mode), runs in measured_rows.items():
        rounds = predicted_rows[(scenario, mode)]
        for metric in METRICS:
            values = [r[metric] for r in runs if r.get(metric) is not None]
            measured = statistics.median(values) if values else None
            spread = (min(values), max(values)) if values else None
            guesses = [p[metric] for p in rounds if p.get(metric) is not None]
            predicted = statistics.median(guesses) if guesses else None
            cell = {"scenario": scenario, "mode": mode, "metric": metric, "measured": measured,
                    "measured_runs": [r.get(metric) for r in runs], "measured_spread": spread,
                    "predicted": predicted, "relative_error": relative_error(measured, predicted),
                    "within_25pct": within(metric, measured, predicted)}
            if len(rounds) > 1:
                cell["predicted_runs"] = [p.get(metric) for p in rounds]
            cells.append(cell)
    judged = [c for c in cells if c["within_25pct"] is not None]
    orders = []
    for scenario in dict.fromkeys(s for s, _ in measured_rows):
        for metric in METRICS:
            mine = [c for c in cells if c["scenario"] == scenario and c["metric"] == metric]
            measured, predicted = {c["mode"]: c["measured"] for c in mine}, {c["mode"]: c["predicted"] for c in mine}
            runs = {c["mode"]: [v for v in c["measured_runs"] if v is not None] for c in mine}
            orders.append({"scenario": scenario, "metric": metric, "agrees": order_agrees(measured, predicted),
                           "agrees_separated": order_agrees(measured, predicted, runs)})
    ranked = [o for o in orders if o["agrees"] is not None]
    separated = [o for o in orders if o["agrees_separated"] is not None]
    worst = sorted((c for c in cells if c["relative_error"] is not None), key=lambda c: -abs(c["relative_error"]))[:8]
    return {
        "cells": cells,
        "within_25pct_fraction": sum(c["within_25pct"] for c in judged) / len(judged) if judged else None,
        "order_agreement": sum(o["agrees"] for o in ranked) / len(ranked) if ranked else None,
        "order_agreement_separated": sum(o["agrees_separated"] for o in separated) / len(separated) if separated
        else None,
        "orders": orders,
        "worst_cells": worst,
    }


def predict_modes(measure: str, scenario: str, query: str | None, modes: Sequence[str], profile: CostProfile,
                  bench: cm.Profile, nexmark_bench: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """The predicted row of every mode of `scenario` (a NexMark `query`'s when given) with `profile`."""
    from runtime.workloads.nexmark.config import NexmarkConfig

    predicted = {}
    for mode in modes:
        started = time.perf_counter()
        if query is None:
            predicted[(scenario, mode)] = predict_combination(cm.Combination(measure, scenario, mode,
                                                                             bench.parallelism), bench, profile)
        else:
            predicted[(scenario, mode)] = fn.predict_query(query, mode, nexmark_bench, profile, NexmarkConfig(),
                                                           nexmark_bench.events)
        print(f"  predicted {measure}/{scenario}/{mode} in {time.perf_counter() - started:.1f} s", flush=True)
    return predicted


def predict_from(path: str, refit: bool = False) -> dict[str, Any]:
    """The payload of a saved fidelity run (`benchmarks.fidelity_saved`) with every prediction
    made again from its saved profiles and sizes, compared with its saved measurements (`refit`:
    each profile's steps and cores fitted again from the tallies its calibration kept,
    `runtime.calibration.fit.refit_cpu`)."""
    saved = fidelity_saved.load(path)
    profiles = saved.round_profiles
    if refit:
        try:
            profiles = {name: [refit_cpu(p) for p in ps] for name, ps in profiles.items()}
        except CalibrationError as exc:
            raise fidelity_saved.SavedRunError(f"{path}: {exc}") from exc
    predicted: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for scenario, rounds in profiles.items():
        for profile in rounds:
            for key, row in predict_modes(saved.measure, scenario, saved.query(scenario), saved.modes[scenario],
                                          profile, saved.bench, saved.nexmark_bench).items():
                predicted.setdefault(key, []).append(row)
    doc = saved.doc
    payload = {"measure": saved.measure, "quick": saved.quick, "repeat": saved.repeat, "predicted_from": saved.path,
               "refitted": refit,
               "bench_profile": doc["bench_profile"], "nexmark_profile": doc.get("nexmark_profile"),
               "load_average_before": doc.get("load_average_before"),
               "load_average_after": doc.get("load_average_after"),
               **profiles_json({name: [p.to_json() for p in ps] for name, ps in profiles.items()})}
    payload.update(compare(saved.measured, predicted))
    return payload


def run(measure: str, scenarios: Sequence[str], modes: Sequence[str], quick: bool, repeat: int,
        bench: cm.Profile | None = None, queries: Sequence[str] = (),
        nexmark_bench: Any = None) -> dict[str, Any]:
    """Calibrate per scenario and NexMark query, measure and predict every mode; the JSON payload
    (`nexmark_bench`: the queries' `benchmarks.nexmark` profile, default `measure`'s)."""
    from runtime.workloads.nexmark.config import NexmarkConfig

    bench = bench or cm.PROFILES[(measure, quick)]
    nexmark_bench = nexmark_bench or fn.bench_profile(measure, quick)
    config = NexmarkConfig()
    if bench.scenarios is not None:
        scenarios = [s for s in scenarios if s in bench.scenarios]
    load_before = os.getloadavg()
    profiles: dict[str, list[dict[str, Any]]] = {}
    measured: dict[tuple[str, str], list[dict[str, Any]]] = {}
    predicted: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def calibrated(name: str, query: str | None, profile: CostProfile, info: dict[str, Any]) -> None:
        profiles.setdefault(name, []).append(profile.to_json())
        print(f"calibrated {name} on {measure} in {info['seconds']} s (load {info['load_average']})", flush=True)
        for key, row in predict_modes(measure, name, query, modes, profile, bench, nexmark_bench).items():
            predicted.setdefault(key, []).append(row)

    for r in range(repeat):
        if r == 0 or measure != "sim":  # a wall-clock calibration is a sample: one per round
            for scenario in scenarios:
                calibrated(scenario, None, *calibrate_scenario(measure, scenario, bench))
            for query in queries:
                calibrated(fn.scenario(query), query, *fn.calibrate_query(measure, query, nexmark_bench, config))
        for scenario in scenarios:
            for mode in modes:
                combo = cm.Combination(measure, scenario, mode, bench.parallelism)
                row = cm.run_combination(combo, bench).row
                measured.setdefault((scenario, mode), []).append(row)
                print(f"  measured {combo.label} (repeat {r + 1}/{repeat})", flush=True)
        for query in queries:
            for mode in modes:
                row = fn.measure_query(measure, query, mode, nexmark_bench, config, nexmark_bench.events)
                measured.setdefault((fn.scenario(query), mode), []).append(row)
                print(f"  measured {measure}/{fn.scenario(query)}/{mode} (repeat {r + 1}/{repeat})", flush=True)
    payload = {"measure": measure, "quick": quick, "repeat": repeat, "bench_profile": cm._profile_json(bench),
               "nexmark_profile": vars(nexmark_bench) if queries else None,
               "load_average_before": load_before, "load_average_after": os.getloadavg(), **profiles_json(profiles)}
    payload.update(compare(measured, predicted))
    return payload


def profiles_json(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The JSON fields of the profiles of every round per scenario: `profiles` (the first round's)
    and, when some scenario was calibrated more than once, `round_profiles` (every round's)."""
    out: dict[str, Any] = {"profiles": {name: ps[0] for name, ps in rounds.items()}}
    if any(len(ps) > 1 for ps in rounds.values()):
        out["round_profiles"] = rounds
    return out


def render(payload: dict[str, Any]) -> str:
    rows = [{"scenario": c["scenario"], "mode": c["mode"], "metric": c["metric"], "measured": _round(c["measured"]),
             "predicted": _round(c["predicted"]),
             "error": None if c["relative_error"] is None else f"{c['relative_error']:+.0%}",
             "within 25%": c["within_25pct"]} for c in payload["cells"]]
    fraction, order = payload["within_25pct_fraction"], payload["order_agreement"]
    separated = payload.get("order_agreement_separated")
    before, after = payload.get("load_average_before"), payload.get("load_average_after")
    load = f", load average {before[0]:.1f} before, {after[0]:.1f} after" if before and after else ""
    again = (f"; predicted again from {payload['predicted_from']}" + (", profiles fitted again" if payload.get("refitted")
                                                                     else "")) if payload.get("predicted_from") else ""
    summary = (f"\nwithin_25pct_fraction: {fraction if fraction is None else round(fraction, 3)}; "
               f"order_agreement: {order if order is None else round(order, 3)}; "
               f"order_agreement_separated: {separated if separated is None else round(separated, 3)} "
               f"(measured on {payload['measure']}{load}{again})")
    return markdown_table(rows) + "\n" + summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser, "fidelity", quick_help="the quick profile of benchmarks.checkpoint_modes")
    parser.add_argument("--measure", choices=["ray", "sim"], default="ray",
                        help="the executor measured: ray (default) or sim (a self-check of the loop)")
    parser.add_argument("--scenario", nargs="*", choices=SCENARIOS, default=list(SCENARIOS),
                        help="scenarios of benchmarks.checkpoint_modes (none: only the NexMark queries)")
    parser.add_argument("--query", nargs="*", choices=fn.QUERIES, default=list(fn.QUERIES),
                        help="NexMark queries (benchmarks.nexmark's jobs; none: only the scenarios)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="checkpoint modes")
    parser.add_argument("--repeat", type=at_least_one, default=1,
                        help="rounds, each measuring every cell once (on Ray each also calibrates and predicts "
                             "again); the medians are compared (default 1)")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds of each latency run, NexMark's too (default: the benchmark profiles')")
    parser.add_argument("--max-rate-records", type=int, default=None,
                        help="records (NexMark: events) of each throughput run (default: the benchmark profiles')")
    parser.add_argument("--predict-from", metavar="PATH", default=None,
                        help="measure nothing: predict again, with the profiles and sizes saved in a fidelity JSON, "
                             "and compare with its measured cells (the other run options are the JSON's)")
    parser.add_argument("--refit", action="store_true",
                        help="with --predict-from: fit each saved profile's step costs and cores again, with "
                             "this version's rules, from the per-task tallies its calibration kept")
    args = parse_args(parser, argv)
    if args.refit and args.predict_from is None:
        parser.error("--refit needs --predict-from (it fits a saved run's profiles again)")
    if args.predict_from is not None:
        try:
            payload = predict_from(args.predict_from, refit=args.refit)
        except fidelity_saved.SavedRunError as exc:
            parser.error(f"--predict-from: {exc}")
        return _write(args, payload)
    bench = cm.PROFILES[(args.measure, args.quick)]
    if args.duration is not None:
        bench = replace(bench, duration=args.duration, warmup=min(bench.warmup, args.duration / 3))
    if args.max_rate_records is not None:
        bench = replace(bench, max_rate_records=args.max_rate_records)
    if args.measure == "ray":
        from runtime.ray.cluster import ensure_ray

        ensure_ray()
    nexmark_bench = fn.bench_profile(args.measure, args.quick, seconds=args.duration, events=args.max_rate_records)
    payload = run(args.measure, args.scenario, args.modes, args.quick, args.repeat, bench, args.query, nexmark_bench)
    return _write(args, payload)


def _write(args: argparse.Namespace, payload: dict[str, Any]) -> int:
    table = render(payload)
    print(table)
    for path in output_of(args, "fidelity").write(payload, table):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
