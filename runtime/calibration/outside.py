"""The CPU outside the steps for a profile fitted without it: derived from what it stored.

A profile whose steps hold no `outside_per_step` / `outside_per_record` (fitted from a single
run, or before `runtime.calibration.fit.fit_outside` existed) keeps the CPU its task processes
spent outside their steps only as `calibrated.background_cpu`: cores' worth over the calibration
run, taken from `cores` as a per-second background. That CPU comes with the steps (each wake-up of
a task: the data call that woke it, the hand-off to the work thread, the calls it sends), not with
time, so a full-speed prediction that leaves the steps the remaining cores runs faster than the
executor did whenever its steps are many. On Ray (NexMark q5, a calibration with its full-speed
run, `fit_outside` per task): 0.9-2.1 ms per step and 0-11 us per record. `outside_from_background`
turns the stored total into CPU per step: the calibration run's outside CPU (`background_cpu` x its
duration) over the steps every task took in that run (the same job replayed on the simulator), the
same for every task, since the stored total cannot be split between tasks or into per step and
per record; and gives the steps back every core measured.
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


def outside_from_background(profile: CostProfile, steps: Mapping[str, int]) -> CostProfile | None:
    """A copy of `profile` with its calibration's CPU outside the steps as `outside_per_step` on
    every steps entry and `cores` as measured (see the module docstring); `steps`: task name ->
    steps it took in the calibration run. None when the profile already has outside CPU or lacks
    what the derivation needs (the background, the cores measured, the run's duration)."""
    info = profile.calibrated
    background, cores = info.get("background_cpu"), info.get("cores_measured")
    duration = calibration_duration(info)
    taken = sum(steps.values())
    if has_outside(profile) or not background or not cores or duration is None or taken <= 0:
        return None
    per_step = float(background) * duration / taken
    derived = copy.deepcopy(profile)
    derived.steps = {name: StepCost(c.per_step, c.per_record, c.wait_per_record, per_step, 0.0)
                     for name, c in profile.steps.items()}
    derived.cores = int(cores)
    derived.calibrated["outside_cpu"] = (f"derived: background_cpu {background} cores x {duration:.3f} s over "
                                         f"{taken:,} steps = {per_step * 1e3:.3g} ms per step")
    return derived
