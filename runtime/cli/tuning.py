"""`barrierflow calibrate` (fit the simulator's cost model to a real run, or to a Flink job's REST
document) and `barrierflow whatif` (predict the calibrated job under other settings)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from runtime.cli.options import UsageError, console
from runtime.cli.run import build_env, check_address


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Run the job briefly for real and write the fitted profile (`runtime.calibration`)."""
    from runtime.calibration.predict import calibrate

    if args.from_flink is not None:
        return calibrate_from_flink(args.from_flink, args.output)
    if args.target is None:
        raise UsageError("calibrate: expected MODULE:FUNCTION, or --from-flink FILE|URL")
    check_address(args, "calibrate")
    build = build_env(args.target, "calibrate")
    env = build()
    if args.interval is not None:
        env.enable_checkpointing(interval=args.interval)
    options: dict[str, Any] = {}
    if args.address:
        options["address"] = args.address
    profile, result = calibrate(env, args.target.partition(":")[2], executor=args.executor, cores=args.cores,
                                calibrated={"target": args.target}, **options)
    profile.save(args.output)
    info = profile.calibrated
    full = (f", then {info['saturated_records']:,} at full speed in {info['saturated_seconds']} s"
            if "saturated_records" in info else "")
    console.print(f"calibrated {args.target} on {args.executor}: {info['records_in']:,} records in "
                  f"{info['seconds']} s{full}, {len(result.completed_checkpoints)} checkpoints, load average "
                  f"{info['load_average']}; profile written to {args.output}", soft_wrap=True)
    for warning in info.get("warnings", ()):
        console.print(f"warning: {warning}", soft_wrap=True, highlight=False, markup=False, style="yellow")
    return 0


def calibrate_from_flink(source: str, output: str) -> int:
    """A profile from a Flink job: a REST document file, or a running job's REST URL
    (http://HOST:PORT/jobs/JOB_ID), read by `runtime.calibration.flink`."""
    import json
    import re
    import urllib.error

    from runtime.calibration.flink import collect_flink_rest, profile_from_flink
    from runtime.calibration.profile import ProfileError

    try:
        if source.startswith(("http://", "https://")):
            match = re.fullmatch(r"(https?://[^/]+)/jobs/([0-9a-f]{32})/?", source)
            if match is None:
                raise UsageError(f"calibrate: --from-flink: expected http://HOST:PORT/jobs/JOB_ID (a 32-digit hex "
                                 f"job id), got {source!r}")
            doc = collect_flink_rest(match.group(1), match.group(2))
        else:
            with open(source) as fh:
                doc = json.load(fh)
        profile = profile_from_flink(doc, source)
    except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
        if isinstance(exc, ProfileError):
            raise UsageError(f"calibrate: --from-flink: {exc}") from exc
        raise UsageError(f"calibrate: --from-flink: cannot read {source}: {exc}") from exc
    profile.save(output)
    console.print(f"calibrated Flink job {doc.get('job', '')!r} from {source}: {len(doc['checkpoints'])} checkpoints, "
                  f"{len(doc['vertices'])} vertices; profile written to {output}", soft_wrap=True, markup=False)
    return 0


def cmd_whatif(args: argparse.Namespace) -> int:
    """Predict the calibrated job under other settings, next to its baseline."""
    import json

    from runtime.calibration.profile import CostProfile, ProfileError
    from runtime.calibration.whatif import table, variants, what_if

    try:
        profile = CostProfile.load(args.profile)
    except ProfileError as exc:
        raise UsageError(f"whatif: --profile: {exc}") from exc
    target = args.job or profile.calibrated.get("target")
    if not target:
        raise UsageError(f"whatif: {args.profile} does not name the job it calibrated ('calibrated.target'); "
                         "give it with --job MODULE:FUNCTION")
    asked = variants(modes=args.mode or (), unaligned=args.unaligned, alignment_timeout=args.alignment_timeout,
                     debloat_target=args.debloat_target, parallelism=args.parallelism, interval=args.interval,
                     slow=dict(args.slow or ()))
    predictions = what_if(build_env(target, "whatif"), target.partition(":")[2], profile, asked, seed=args.seed)
    rows = table(predictions)
    out = Table(title=f"what if: {target} (profile {args.profile}, simulated)")
    for i, name in enumerate(rows[0]):
        out.add_column(name, justify="left" if i == 0 else "right")
    for row in rows[1:]:
        out.add_row(*row)
    console.print(out)
    for prediction in predictions:
        if prediction.failure is not None:
            console.print(f"variant {prediction.variant.name!r}: {prediction.failure}", soft_wrap=True,
                          highlight=False, markup=False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"variant": p.variant.name, "seconds": p.seconds, **p.figures, "failure": p.failure,
                        "saturated": p.saturated} for p in predictions], f, indent=2)
    return 1 if any(p.failure is not None and p.saturated is None for p in predictions) else 0
