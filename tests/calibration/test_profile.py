"""`CostProfile`: JSON round trip, the simulator's terms, clear errors naming file and field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.calibration.profile import CostProfile, ProfileError
from runtime.sim.costs import StepCost


def sample() -> CostProfile:
    return CostProfile(steps={"default": StepCost(1e-5, 2e-6), "count[1]": StepCost(1e-5, 2e-6, 3e-4, 1.3e-5, 4e-3)},
                       cores=2, latency_min=1e-4, latency_max=3e-3, trigger_delay=4e-3, ack_delay=5e-3,
                       finalize=6e-3, sync_latency=7e-4, sync_per_byte=1e-9, write_latency=2e-3,
                       write_latency_max=9e-3, write_per_byte=1e-8, in_flight_records=5000.0, buffer_timeout=0.1,
                       source_pacing=0.005, step_target=0.002, checkpoint_cpu=0.02, ack_delay_quantiles=[1e-3, 4e-3, 6e-2],
                       trigger_delay_quantiles=[2e-3, 3e-3], machine_cores=4.0, background_cores=1.5,
                       saturated_background_cores=1.2, calibrated={"job": "x:y"})


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    sample().save(path)
    assert CostProfile.load(path) == sample()
    doc = json.loads(path.read_text())
    assert doc["transport"] == {"latency_min": 1e-4, "latency_max": 3e-3}
    assert doc["steps"]["count[1]"]["wait_per_record"] == 3e-4 and doc["steps"]["count[1]"]["per_emitted"] == 1.3e-5
    assert doc["steps"]["count[1]"]["timer_lateness"] == 4e-3
    assert doc["channels"] == {"in_flight_records": 5000.0, "buffer_timeout": 0.1, "source_pacing": 0.005,
                               "step_target": 0.002}
    assert doc["machine"] == {"machine_cores": 4.0, "background_cores": 1.5, "saturated_background_cores": 1.2}
    assert doc["control"]["ack_delay_quantiles"] == [1e-3, 4e-3, 6e-2] and doc["control"]["checkpoint_cpu"] == 0.02


def test_a_profile_without_the_newer_groups_reads_with_them_off() -> None:
    doc = sample().to_json()
    del doc["channels"]
    del doc["machine"]
    del doc["snapshot"]["write_latency_max"]
    del doc["steps"]["count[1]"]["per_emitted"]
    del doc["steps"]["count[1]"]["timer_lateness"]
    for newer in ("ack_delay_quantiles", "trigger_delay_quantiles", "checkpoint_cpu"):
        del doc["control"][newer]
    profile = CostProfile.from_json(doc)
    assert (profile.in_flight_records, profile.buffer_timeout, profile.write_latency_max) == (0.0, 0.0, 0.0)
    assert profile.steps["count[1]"].per_emitted == 0.0  # a window firing costs its step alone
    assert profile.steps["count[1]"].timer_lateness == 0.0  # its timers fire when due
    assert profile.source_pacing == 0.0 and profile.cost_model().source_pacing == 0.0  # sources read when due
    assert profile.step_target == 0.0 and profile.cost_model().step_target == 0.0  # steps take whole buffers
    costs = profile.cost_model()
    assert (costs.machine_cores, costs.background_cores) == (None, 0.0)  # steps share the steps' cores alone
    assert costs.saturated_background_cores is None  # at full speed too
    assert (profile.checkpoint_cpu, profile.ack_delay_quantiles, profile.trigger_delay_quantiles) == (0.0, [], [])
    assert profile.network().write_latency_max is None  # every write takes write_latency
    assert profile.network().ack_delay_quantiles == ()  # every acknowledgement takes ack_delay


def test_simulator_terms() -> None:
    profile = sample()
    costs, network = profile.cost_model(), profile.network(link_delays={"a": 1.0})
    assert (costs.per_step, costs.per_record, costs.cores) == (1e-5, 2e-6, 2)
    assert costs.task_costs == {"count[1]": StepCost(1e-5, 2e-6, 3e-4, 1.3e-5, 4e-3)}
    assert (costs.sync_latency, costs.sync_per_byte) == (7e-4, 1e-9)
    assert (network.delay_min, network.delay_max, network.control_delay, network.ack_delay) == (1e-4, 3e-3, 4e-3, 5e-3)
    assert network.write_bandwidth == pytest.approx(1e8)
    assert (network.write_latency, network.write_latency_max) == (2e-3, 9e-3)
    assert network.link_delays == {"a": 1.0}
    assert network.ack_delay_quantiles == (1e-3, 4e-3, 6e-2)
    assert network.trigger_delay_quantiles == (2e-3, 3e-3)
    assert costs.checkpoint_cpu == 0.02
    assert costs.source_pacing == 0.005
    assert costs.step_target == 0.002
    assert (costs.machine_cores, costs.background_cores, costs.saturated_background_cores) == (4.0, 1.5, 1.2)
    assert replace(profile, saturated_background_cores=0.0).cost_model().saturated_background_cores is None
    assert costs.timer_lateness == 0.0  # the default entry's timers fire when due
    late = replace(profile, steps={**profile.steps, "default": StepCost(1e-5, 2e-6, timer_lateness=2e-3)})
    assert late.cost_model().timer_lateness == 2e-3


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["transport"].update(latency_min="fast"), "'transport.latency_min': expected a number >= 0, got 'fast'"),
    (lambda d: d["snapshot"].update(write_latency=-1), "'snapshot.write_latency': expected a number >= 0"),
    (lambda d: d["control"].update(finalise=1), "unknown field 'control.finalise'"),
    (lambda d: d.update(core=2), "unknown field 'core'"),
    (lambda d: d.update(cores=0), "field 'cores': expected a whole number >= 1 or null, got 0"),
    (lambda d: d["steps"]["count[1]"].pop("per_record"), "field 'steps.count[1].per_record' is missing"),
    (lambda d: d["steps"]["default"].update(wait_per_record=1.0), "steps.default.wait_per_record"),
    (lambda d: d["transport"].update(latency_max=1e-5), "'transport.latency_max' (1e-05) is below"),
    (lambda d: d.update(format="other/2"), "field 'format'"),
    (lambda d: d["snapshot"].update(write_latency_max=1e-3), "'snapshot.write_latency_max' (0.001) is below"),
    (lambda d: d["channels"].update(in_flight_records=-5), "'channels.in_flight_records': expected a number >= 0"),
    (lambda d: d["machine"].update(machine_cores=0.5), "'machine.machine_cores': expected 0 (the steps' cores) or a "
                                                       "number >= 1, got 0.5"),
    (lambda d: d["machine"].update(background_cores=-1), "'machine.background_cores': expected a number >= 0"),
    (lambda d: d["machine"].update(saturated_background_cores="high"),
     "'machine.saturated_background_cores': expected a number >= 0, got 'high'"),
    (lambda d: d["control"].update(ack_delay_quantiles=[0.01, 0.002]), "'control.ack_delay_quantiles': the quantiles "
                                                                       "must be ascending"),
    (lambda d: d["control"].update(ack_delay_quantiles=0.01), "'control.ack_delay_quantiles': expected a list"),
    (lambda d: d["control"].update(ack_delay_quantiles=[0.001, "x"]), "'control.ack_delay_quantiles': expected a number"),
])
def test_bad_fields_are_named_with_the_file(tmp_path: Path, edit: object, message: str) -> None:
    doc = sample().to_json()
    edit(doc)  # type: ignore[operator]
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileError) as info:
        CostProfile.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_unreadable_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="missing.json: cannot read the profile"):
        CostProfile.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ProfileError, match="bad.json: not JSON"):
        CostProfile.load(tmp_path / "bad.json")
