"""Predict a real Flink job's aligned and unaligned checkpoint durations.

    python -m benchmarks.flink_fidelity [--quick] [--repeat N] [--json PATH] [--out DIR] [--sample S] [--slow-us US]
    python -m benchmarks.flink_fidelity --aligned A.json --unaligned U.json   (recorded documents)

Runs `benchmarks/flink_java/PageView.java` backpressured (max rate; count subtask 1 busy-waits
`--slow-us` per record) on a local MiniCluster, aligned and unaligned (interleaved over
`--repeat` rounds), reads each run's REST document over `--sample` s after a 3 s warm-up
(`runtime.calibration.flink.collect_flink_rest`: rates over the sample, the checkpoints
triggered during it) and predicts that run's checkpoint duration on
the simulator from the document's profile (`profile_from_flink`): the slow subtask's cost per
record (its busy time per record), the barrier phases, and what a backpressured channel holds
ahead of an aligned barrier (the sources' `outputQueueSize` plus a buffer, in records of the
measured bytes per record). No input is a checkpoint duration. Measured: the median
`end_to_end_duration` of the completed checkpoints in the document. Target: within +-30 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

from benchmarks import checkpoint_modes as cm
from benchmarks.report import (
    add_output_arguments,
    add_sized_argument,
    at_least_one,
    output_of,
    parse_args,
    write_json,
)
from runtime.calibration.flink import collect_flink_rest, profile_from_flink
from runtime.calibration.predict import figures, predict
from runtime.sim.costs import StepCost

MODES = ("aligned", "unaligned")
PARALLELISM = 2
#: open-loop rate of the simulated source: far above the slow subtask, as Flink's unthrottled one
SIM_RATE = 200_000.0
#: simulated seconds of input per mode (the first `SIM_SINCE` s fill the queues and are left
#: out; an aligned checkpoint of the backpressured job takes ~1 s, an unaligned one ~30 ms)
SIM_SECONDS = {"aligned": 3.0, "unaligned": 1.2}
SIM_SINCE = 0.6
KEYED = "KeyedProcess -> Sink: Writer"


def measure(mode: str, records: int, slow_us: int, *, warmup: float = 3.0, sample: float = 10.0) -> dict[str, Any]:
    """Run the Java job in `mode` and return its REST document: rates over `sample` s from
    `warmup` s after it started, and the checkpoints triggered meanwhile (the job is then stopped)."""
    from benchmarks import flink_java, peers

    with tempfile.TemporaryDirectory(prefix="barrierflow-flink-fidelity-") as work:
        classpath = flink_java.build(flink_java.pyflink_lib(peers.interpreter_for("pyflink")), os.path.join(work, "c"))
        with flink_java.FlinkJavaJob(classpath, work, records=records, unaligned=mode == "unaligned",
                                     slow_subtask=1, slow_us=slow_us) as job:
            started = job.start()
            time.sleep(warmup)
            doc = collect_flink_rest(started["rest"], started["job"], sample=sample, during_sample=True)
    if not doc["checkpoints"]:
        raise RuntimeError(f"{mode} run: no checkpoint completed in the {sample:.0f} s sample")
    return doc


def measured_ms(doc: dict[str, Any]) -> float:
    return statistics.median(c["end_to_end_duration"] for c in doc["checkpoints"])


def predict_run(mode: str, doc: dict[str, Any], where: str = "") -> dict[str, Any]:
    """The predicted and measured checkpoint duration (ms) of the run `doc` records, in `mode`,
    and the model's inputs."""
    where = where or f"{mode} run"
    profile = profile_from_flink(doc, where)
    # the slow subtask's own entry when the fast one also ran enough records to have a cost
    step = profile.steps.get(f"{KEYED}[1]", profile.steps.get(KEYED))
    if step is None:
        raise ValueError(f"{where}: no per-record cost for {KEYED!r} (too few records in the sample)")
    if profile.in_flight_records <= 0:
        raise ValueError(f"{where}: no backpressured source with queue metrics (outputQueueSize): "
                         "nothing says what the channels hold")
    profile.steps = {"default": StepCost(0.0, 2e-6), "count[1]": StepCost(0.0, step.per_record)}
    combo = cm.Combination("sim", "backpressure", mode, PARALLELISM)
    bench = cm.PROFILES[("sim", True)]
    env = cm.make_env(combo, bench)
    cm.build_job(env, combo, bench, rate=SIM_RATE, count=int(SIM_SECONDS[mode] * SIM_RATE))
    predicted = figures(predict(env, f"flink-{mode}", profile), finalize=profile.finalize, since=SIM_SINCE)
    p, m = predicted["checkpoint_duration_p50"], measured_ms(doc)
    return {"mode": mode, "measured_ms": m, "predicted_ms": p, "error": None if p is None else p / m - 1,
            "slow_per_record_us": step.per_record * 1e6, "in_flight_records": profile.in_flight_records,
            "record_bytes": profile.calibrated.get("record_bytes"), "sim_buffer_size": env.buffer_size,
            "checkpoints": len(doc["checkpoints"])}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range of the measured and predicted durations and the errors of each mode."""
    out: dict[str, Any] = {}
    for mode in MODES:
        rows = [r for r in runs if r["mode"] == mode and r["predicted_ms"] is not None]
        if rows:
            out[mode] = {key: {"median": statistics.median(r[key] for r in rows), "min": min(r[key] for r in rows),
                               "max": max(r[key] for r in rows)} for key in ("measured_ms", "predicted_ms", "error")}
            out[mode]["within_30"] = sum(abs(r["error"]) <= 0.3 for r in rows)
            out[mode]["runs"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flink_fidelity", description=__doc__.split("\n\n")[0])
    add_output_arguments(parser, "flink_fidelity", quick_help="a shorter sample of each Flink run (5 s)")
    add_sized_argument(parser, "--sample", full=10.0, quick=5.0, type=float,
                       help="seconds of each Flink run the document covers (rates and checkpoints)")
    parser.add_argument("--records", type=int, default=5_000_000,
                        help="records of each Flink run (it is stopped once read; enough to outlast the sample)")
    parser.add_argument("--slow-us", type=int, default=25, help="busy wait per record of count subtask 1 (us)")
    parser.add_argument("--repeat", type=at_least_one, default=1, help="rounds of (aligned, unaligned) runs")
    parser.add_argument("--aligned", metavar="JSON", help="a recorded aligned document instead of a run")
    parser.add_argument("--unaligned", metavar="JSON", help="a recorded unaligned document instead of a run")
    parser.add_argument("--save", metavar="DIR", help="write the documents read from the runs here")
    args = parse_args(parser, argv)
    runs, loads = [], []
    for round_ in range(args.repeat if not (args.aligned or args.unaligned) else 1):
        for mode in MODES:
            path = getattr(args, mode)
            if path:
                with open(path) as fh:
                    doc = json.load(fh)
            elif args.aligned or args.unaligned:
                continue
            else:
                doc = measure(mode, args.records, args.slow_us, sample=args.sample)
                loads.append(os.getloadavg()[0])
                if args.save:
                    os.makedirs(args.save, exist_ok=True)
                    with open(os.path.join(args.save, f"{mode}-{round_}.json"), "w") as fh:
                        json.dump(doc, fh)
            run = predict_run(mode, doc, path or "")
            runs.append(run)
            error = "n/a" if run["error"] is None else f"{run['error']:+.0%}"
            print(f"{mode:9}  measured {run['measured_ms']:7.1f} ms  predicted {run['predicted_ms'] or float('nan'):7.1f} ms"
                  f"  error {error:>5}   (slow {run['slow_per_record_us']:.1f} us/record, "
                  f"{run['in_flight_records']:,.0f} records ahead per channel, {run['record_bytes']} B/record)",
                  flush=True)
    result = {"benchmark": "flink_fidelity", "runs": runs, "summary": summary(runs), "load_averages": loads,
              "cpus": os.cpu_count()}
    for mode, s in result["summary"].items():
        print(f"{mode:9}  median measured {s['measured_ms']['median']:.1f} ms [{s['measured_ms']['min']:.1f}-"
              f"{s['measured_ms']['max']:.1f}], predicted {s['predicted_ms']['median']:.1f} ms "
              f"[{s['predicted_ms']['min']:.1f}-{s['predicted_ms']['max']:.1f}], error {s['error']['median']:+.0%} "
              f"[{s['error']['min']:+.0%} to {s['error']['max']:+.0%}], {s['within_30']} of {s['runs']} within 30 %")
    if loads:
        print(f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    write_json(output_of(args, "flink_fidelity").json_path, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
