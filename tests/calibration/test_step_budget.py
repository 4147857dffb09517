"""The simulator's model of Ray's step pacer (`CostModel.step_budget`, `step_stretch`): a step ends
at its elapsed-time budget, steps shrink as contention stretches them, and without a budget the
simulation is what it was."""

from __future__ import annotations

import pytest

from runtime.calibration.profile import CostProfile, ProfileError
from runtime.core.step_pacing import STEP_TARGET
from runtime.sim.costs import CostModel
from tests.calibration.jobs import small_job

SOURCES = ("Source: generator[0]", "Source: generator[1]")


def run(costs: CostModel, records: int = 2000) -> object:
    return small_job(records=records, rate=None).execute("budget", executor="sim", seed=3, costs=costs)


def records_per_step(result: object, task: str) -> float:
    times = result.metrics.tasks[task]  # type: ignore[attr-defined]
    return times.records / times.steps


def test_a_step_ends_at_its_budget() -> None:
    # 0.1 ms a record: a 2 ms budget holds 20 records (the first step takes one, as on Ray: nothing
    # was measured yet; a step that fills the rest of an output buffer fewer); unpaced a source
    # reads what its output buffer of 64 records holds
    whole = run(CostModel(per_step=0.0, per_record=1e-4))
    paced = run(CostModel(per_step=0.0, per_record=1e-4, step_budget=STEP_TARGET))
    for task in SOURCES:
        assert records_per_step(whole, task) > 30
        assert 12 <= records_per_step(paced, task) <= 20
    counts, whole_counts = paced.metrics.tasks["count[0]"], whole.metrics.tasks["count[0]"]
    assert counts.records == whole_counts.records
    assert counts.steps > whole_counts.steps  # input buffers of 64 records cut into steps of 20
    assert sorted(r["n"] for r in paced.output("out")) == sorted(r["n"] for r in whole.output("out"))


def test_steps_shrink_as_contention_stretches_them() -> None:
    # 1 ms a step and 0.1 ms a record: unstretched a 2 ms step holds at most 10 records; stretched
    # 1.5x (elapsed over modelled time, as a calibration measures it) at most 3; each small step
    # pays the per-step cost again, so the job takes longer on the same cores
    costs = dict(per_step=1e-3, per_record=1e-4, step_budget=STEP_TARGET, cores=2)
    calm = run(CostModel(**costs))
    stretched = run(CostModel(step_stretch=1.5, **costs))
    for task in SOURCES:
        assert 4 <= records_per_step(calm, task) <= 10
        assert records_per_step(stretched, task) <= min(3.0, records_per_step(calm, task) / 2)
    assert stretched.metrics.duration > 1.5 * calm.metrics.duration
    assert sorted(r["n"] for r in stretched.output("out")) == sorted(r["n"] for r in calm.output("out"))


def test_without_a_budget_nothing_changes() -> None:
    # the stretch is only what the pacer sees: without a budget there is no pacer
    base = run(CostModel(per_record=1e-4))
    same = run(CostModel(per_record=1e-4, step_stretch=3.0))
    assert same.metrics.duration == base.metrics.duration
    assert {n: (t.steps, t.records, t.busy) for n, t in same.metrics.tasks.items()} == \
        {n: (t.steps, t.records, t.busy) for n, t in base.metrics.tasks.items()}
    assert same.output("out") == base.output("out")
    assert CostProfile().cost_model().step_budget == 0.0  # a profile without pacing: whole buffers


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="step_budget"):
        run(CostModel(step_budget=-1.0), records=100)


def test_the_profile_carries_the_pacing() -> None:
    profile = CostProfile(step_budget=0.002, step_stretch=2.5)
    doc = profile.to_json()
    assert doc["pacing"] == {"step_budget": 0.002, "step_stretch": 2.5}
    again = CostProfile.from_json(doc)
    costs = again.cost_model()
    assert (costs.step_budget, costs.step_stretch) == (0.002, 2.5)
    del doc["pacing"]  # a profile written before: no pacer
    assert (CostProfile.from_json(doc).step_budget, CostProfile.from_json(doc).step_stretch) == (0.0, 1.0)
    doc["pacing"] = {"step_budget": 0.002, "step_stretch": 0}
    with pytest.raises(ProfileError, match="pacing.step_stretch"):
        CostProfile.from_json(doc, "p.json")
