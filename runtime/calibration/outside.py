"""The CPU outside the steps for a profile fitted without it: derived from what it stored.

A profile whose steps hold no `outside_per_step` / `outside_per_record` (fitted from a single
run, or before `runtime.calibration.fit.fit_outside` existed) keeps the CPU its task processes
spent outside their steps only as `calibrated.background_cpu`: cores' worth over the calibration
run, taken from `cores` as a per-second background. That CPU comes with the records the
processes move (serialisation, calls), not with time, so a full-speed prediction that leaves
the steps all the remaining cores runs several times faster than the executor did.
`outside_from_background` turns the stored total into a CPU cost per record handled: the
calibration run's outside CPU (`background_cpu` x its duration) over the records every task
handled in that run (the same job replayed: a job's records per task do not depend on the
executor), the same for every task, since the stored total cannot be split between tasks; and
gives the steps back every core measured. A calibration with a full-speed run fits the split per
task and per step instead (`fit_outside`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from runtime.calibration.predict import SATURATED_SECONDS
from runtime.calibration.profile import CostProfile
from runtime.sim.costs import StepCost


def has_outside(profile: CostProfile) -> bool:
    """Whether the profile's steps carry CPU outside the steps."""
    return any(c.outside_per_step or c.outside_per_record for c in profile.steps.values())


def calibration_duration(calibrated: Mapping[str, object]) -> float | None:
    """Seconds of the calibration run (`JobMetrics.duration`): stored as `duration`, else read
    back from the full-speed run's size, which is `SATURATED_SECONDS` of the run's rate
    (`predict.full_speed_records`) unless capped by the job's records or the 1,000 floor."""
    stored = calibrated.get("duration")
    if isinstance(stored, int | float) and stored > 0:
        return float(stored)
    read, saturated = calibrated.get("records_in"), calibrated.get("saturated_records")
    if not isinstance(read, int) or not isinstance(saturated, int) or not 1000 < saturated < read:
        return None
    return SATURATED_SECONDS * read / saturated


def outside_from_background(profile: CostProfile, records: Mapping[str, int]) -> CostProfile | None:
    """A copy of `profile` with its calibration's CPU outside the steps as `outside_per_record`
    on every steps entry and `cores` as measured (see the module docstring); `records`: task
    name -> records its steps handled in the calibration run. None when the profile already has
    outside CPU or lacks what the derivation needs (the background, the cores measured, the
    run's duration)."""
    info = profile.calibrated
    background, cores = info.get("background_cpu"), info.get("cores_measured")
    duration = calibration_duration(info)
    handled = sum(records.values())
    if has_outside(profile) or not background or not cores or duration is None or handled <= 0:
        return None
    per_record = float(background) * duration / handled
    derived = copy.deepcopy(profile)
    derived.steps = {name: StepCost(c.per_step, c.per_record, c.wait_per_record, 0.0, per_record)
                     for name, c in profile.steps.items()}
    derived.cores = int(cores)
    derived.calibrated["outside_cpu"] = (f"derived: background_cpu {background} cores x {duration:.3f} s over "
                                         f"{handled:,} records handled = {per_record * 1e6:.3g} us per record")
    return derived
