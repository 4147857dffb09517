"""Predict a real Flink job's aligned and unaligned checkpoint durations (issue 25 item 5).

    python -m benchmarks.flink_fidelity [--quick] [--json PATH] [--out DIR] [--records N] [--slow-us US]
    python -m benchmarks.flink_fidelity --aligned A.json --unaligned U.json   (recorded documents)

Runs `benchmarks/flink_java/PageView.java` backpressured (max rate; count subtask 1 busy-waits
`--slow-us` per record) on a local MiniCluster, aligned and then unaligned, reads each run's REST
document while it runs (`runtime.calibration.flink.collect_flink_rest`), and predicts both modes on
the simulator from the unaligned run's profile: the slow subtask's per-record cost (busy time per
record), the barrier phases, and the in-flight data the aligned barrier queues behind, which Flink
shows only in an unaligned checkpoint: its size beyond the aligned checkpoint's (operator state)
is the persisted channel state, divided by `BYTES_PER_RECORD`, spread over the slow subtask's
`PARALLELISM` input channels x `CREDITS` buffers. Measured: the median `end_to_end_duration` of the
completed checkpoints in each document. Target: within +-30 %.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from typing import Any

from benchmarks import checkpoint_modes as cm
from benchmarks.report import add_output_arguments, add_sized_argument, output_of, parse_args, write_json
from runtime.calibration.flink import collect_flink_rest, profile_from_flink
from runtime.calibration.predict import figures, predict
from runtime.sim.costs import StepCost

#: a (Integer key, Double created) record in Flink's serializer: 4 + 8 bytes and a 4-byte length
BYTES_PER_RECORD = 16
PARALLELISM = 2
CREDITS = 8
#: open-loop rate of the simulated source: far above the slow subtask, as Flink's unthrottled one
SIM_RATE = 200_000.0
KEYED = "KeyedProcess -> Sink: Writer"


def measure(mode: str, records: int, slow_us: int, wait: float = 6.0) -> dict[str, Any]:
    """Run the Java job in `mode` and return its REST document, read `wait` s after it started."""
    from benchmarks import flink_java, peers

    with tempfile.TemporaryDirectory(prefix="barrierflow-flink-fidelity-") as work:
        classpath = flink_java.build(flink_java.pyflink_lib(peers.interpreter_for("pyflink")), os.path.join(work, "c"))
        with flink_java.FlinkJavaJob(classpath, work, records=records, unaligned=mode == "unaligned",
                                     slow_subtask=1, slow_us=slow_us) as job:
            started = job.start()
            time.sleep(wait)
            doc = collect_flink_rest(started["rest"], started["job"])
            job.finish()
    return doc


def checkpoint_bytes(doc: dict[str, Any]) -> float:
    """Median over the document's checkpoints of the summed `checkpointed_size` of all subtasks."""
    return statistics.median(sum(s["checkpointed_size"] for subs in c["tasks"].values() for s in subs)
                             for c in doc["checkpoints"])


def measured_ms(doc: dict[str, Any]) -> float:
    return statistics.median(c["end_to_end_duration"] for c in doc["checkpoints"])


def predict_both(aligned_doc: dict[str, Any], unaligned_doc: dict[str, Any]) -> dict[str, Any]:
    """Predicted and measured checkpoint durations (ms) of both modes, and the model's inputs."""
    profile = profile_from_flink(unaligned_doc, "unaligned run")
    # the slow subtask's own entry when the fast one also ran enough records to have a cost
    step = profile.steps.get(f"{KEYED}[1]", profile.steps.get(KEYED))
    if step is None:
        raise ValueError(f"unaligned run: no per-record cost for {KEYED!r} (too few records in the sample)")
    slow = step.per_record
    profile.steps = {"default": StepCost(0.0, 2e-6), "count[1]": StepCost(0.0, slow)}
    in_flight = max(0.0, checkpoint_bytes(unaligned_doc) - checkpoint_bytes(aligned_doc)) / BYTES_PER_RECORD
    buffer = max(1, round(in_flight / (PARALLELISM * CREDITS)))
    bench = dataclasses.replace(cm.PROFILES[("sim", True)], buffer_size=buffer, backpressure_buffer_size=buffer,
                                credits=CREDITS, interval=0.1)
    out: dict[str, Any] = {"slow_per_record_us": slow * 1e6, "in_flight_records": in_flight, "buffer_size": buffer}
    for mode, doc in (("aligned", aligned_doc), ("unaligned", unaligned_doc)):
        combo = cm.Combination("sim", "backpressure", mode, PARALLELISM)
        env = cm.make_env(combo, bench)
        cm.build_job(env, combo, bench, rate=SIM_RATE, count=int(2 * SIM_RATE))
        predicted = figures(predict(env, f"flink-{mode}", profile), finalize=profile.finalize, since=0.3)
        p, m = predicted["checkpoint_duration_p50"], measured_ms(doc)
        out[mode] = {"measured_ms": m, "predicted_ms": p, "error": None if p is None else p / m - 1}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flink_fidelity", description=__doc__.split("\n\n")[0])
    add_output_arguments(parser, "flink_fidelity", quick_help="fewer records per Flink run (600,000)")
    add_sized_argument(parser, "--records", full=1_200_000, quick=600_000, help="records per Flink run")
    parser.add_argument("--slow-us", type=int, default=25, help="busy wait per record of count subtask 1 (us)")
    parser.add_argument("--aligned", metavar="JSON", help="a recorded aligned document instead of a run")
    parser.add_argument("--unaligned", metavar="JSON", help="a recorded unaligned document instead of a run")
    parser.add_argument("--save", metavar="DIR", help="write the documents read from the runs here")
    args = parse_args(parser, argv)
    docs = {}
    for mode in ("aligned", "unaligned"):
        path = getattr(args, mode)
        if path:
            with open(path) as fh:
                docs[mode] = json.load(fh)
        else:
            docs[mode] = measure(mode, args.records, args.slow_us)
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                with open(os.path.join(args.save, f"{mode}.json"), "w") as fh:
                    json.dump(docs[mode], fh)
    result = predict_both(docs["aligned"], docs["unaligned"])
    print(f"inputs: slow subtask {result['slow_per_record_us']:.1f} us/record, {result['in_flight_records']:,.0f} "
          f"records in flight -> buffers of {result['buffer_size']} x {CREDITS} credits per channel")
    for mode in ("aligned", "unaligned"):
        r = result[mode]
        error = "n/a" if r["error"] is None else f"{r['error']:+.0%}"
        print(f"{mode:9}  measured {r['measured_ms']:7.1f} ms  predicted {r['predicted_ms'] or float('nan'):7.1f} ms  "
              f"error {error}")
    result["load_average"] = os.getloadavg()[0]
    print(f"load average {result['load_average']:.1f} on {os.cpu_count()} cores")
    write_json(output_of(args, "flink_fidelity").json_path, {"benchmark": "flink_fidelity", **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
