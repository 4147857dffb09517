"""The VOPR's "expected" verdicts: their reasons are the project's own words, printed whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.io.tools import CheckpointToolError, load_checkpoint
from runtime.jobmaster.restore.state_assignment import CommittedOutputAheadError
from runtime.verify.judging import EXPECTED_ERRORS, classify
from runtime.verify.swarm import Verdict
from runtime.verify.swarm_config import SwarmConfig
from runtime.verify.vopr import sweep_line
from runtime.workloads.scenarios import relay_job
from vocabulary.fault_plan import TornWrite


def test_the_reasons_cite_nothing_outside_the_repository() -> None:
    for expected in EXPECTED_ERRORS:
        assert "DESIGN" not in expected.why and "§" not in expected.why, expected.why
        assert len(expected.why) > 80  # says why, not a pointer to somewhere else


def test_an_expected_verdict_gives_the_reason_and_the_error_and_the_sweep_prints_them_whole() -> None:
    config = SwarmConfig(seed=5, faults=(TornWrite(task="count[0]", nth=2),))
    error = CommittedOutputAheadError("job 'job': restoring checkpoint 3 would mean falling back past committed "
                                      "output of checkpoint 4 " + "(transaction count[0]/4) " * 20)
    kind, detail = classify(config, error)
    assert kind == "expected"
    assert detail.startswith("a torn write corrupted a checkpoint whose transactions the sinks had already committed")
    assert str(error) in detail
    line = sweep_line(Verdict(config, kind, detail))
    assert len(line) > 600 and detail in line and line.endswith(Verdict(config, kind).replay)


def test_a_finished_job_whose_every_retained_checkpoint_is_torn_restores_as_expected(tmp_path: Path) -> None:
    """A torn write reports success, so it can be the last checkpoint a job completes: restoring the
    finished job's directory then fails naming the torn file. With torn writes in the plan that is
    the expected limitation (as the failover's `NoValidCheckpointError` is); without, a violation."""
    storage = tmp_path / "chk"
    relay_job(storage=str(storage), retained=1).execute("job", executor="sim", seed=0)
    (keyed,) = sorted(storage.glob("job/chk-*/taskowned/count[[]0].keyed"))
    keyed.write_bytes(keyed.read_bytes()[: keyed.stat().st_size // 2])  # what a TornWrite leaves
    with pytest.raises(CheckpointToolError, match="no valid checkpoint of") as restoring:
        load_checkpoint(str(storage))
    torn = SwarmConfig(seed=5, faults=(TornWrite(task="count[0]", nth=2),))
    kind, detail = classify(torn, restoring.value)
    assert kind == "expected" and "torn writes corrupted every retained checkpoint" in detail, (kind, detail)
    assert classify(SwarmConfig(seed=5), restoring.value)[0] == "error"
