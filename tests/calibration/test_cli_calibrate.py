"""`barrierflow calibrate` and `barrierflow whatif` as a user runs them (on the simulator): a
profile file, the variants side by side, and bad input as one error line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.cli import main

JOB = '''
from tests.calibration.jobs import small_job


def build():
    return small_job(records=1500, rate=5000, unaligned=False)
'''


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("whatif")
    (folder / "fidelity_cli_job.py").write_text(JOB)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.syspath_prepend(str(folder))
        assert main(["calibrate", "fidelity_cli_job:build", "--executor", "sim", "-o", "profile.json"]) == 0
    return folder


def test_calibrate_writes_a_profile_naming_its_job(calibrated: Path) -> None:
    doc = json.loads((calibrated / "profile.json").read_text())
    assert doc["calibrated"]["target"] == "fidelity_cli_job:build"
    assert doc["calibrated"]["executor"] == "sim"
    assert doc["steps"]["count"]["per_record"] == pytest.approx(2e-6, rel=0.1)  # the default CostModel's
    assert doc["transport"]["latency_max"] > doc["transport"]["latency_min"] > 0
    assert doc["calibrated"]["saturated_records"] == 1500  # and once at full speed


@pytest.mark.slow
def test_whatif_prints_each_variant_next_to_the_baseline(calibrated: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(calibrated)
    monkeypatch.syspath_prepend(str(calibrated))
    code = main(["whatif", "--profile", "profile.json", "--mode", "unaligned", "--interval", "0.05",
                 "--json", "w.json"])
    assert code == 0
    rows = json.loads((calibrated / "w.json").read_text())
    assert [r["variant"] for r in rows] == ["baseline", "mode=unaligned", "interval=0.05s"]
    baseline, unaligned, _ = rows
    assert baseline["persisted_bytes"] == 0 and unaligned["persisted_bytes"] > 0  # only unaligned persists
    assert all(r["seconds"] < 5 for r in rows)  # a variant within the 5 s
    assert "baseline" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["whatif", "--profile", "profile.json", "--slow", "count[1]"], "argument --slow: expected TASK=FACTOR"),
    (["whatif", "--profile", "missing.json"], "whatif: --profile: missing.json: cannot read the profile"),
    (["whatif", "--profile", "bad.json"], "bad.json: field 'transport.latency_min': expected a number >= 0"),
    (["calibrate", "fidelity_cli_job:build"], "the following arguments are required: -o/--output"),
    (["calibrate", "fidelity_cli_job:build", "-o", "p.json", "--executor", "sim", "--address", "127.0.0.1:6379"],
     "calibrate: --address 127.0.0.1:6379 joins a Ray cluster: it needs --executor ray"),
])
def test_bad_input_is_one_error_line(calibrated: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    monkeypatch.chdir(calibrated)
    doc = json.loads((calibrated / "profile.json").read_text())
    doc["transport"]["latency_min"] = -1
    (calibrated / "bad.json").write_text(json.dumps(doc))
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own errors exit from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("barrierflow: error: ") and err.count("\n") == 1
    assert message in err


def test_calibrate_from_a_recorded_flink_document(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fixture = Path(__file__).parent / "fixtures" / "flink_java_backpressure_unaligned.json"
    out = tmp_path / "flink.json"
    assert main(["calibrate", "--from-flink", str(fixture), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["calibrated"]["executor"] == "flink"
    # the slow subtask spins 25 us a record (recorded on a loaded machine: ~130 us of busy time)
    assert 25e-6 <= doc["steps"]["KeyedProcess -> Sink: Writer[1]"]["per_record"] <= 300e-6
    assert doc["channels"]["in_flight_records"] > 1000 and doc["channels"]["buffer_timeout"] == 0.1


@pytest.mark.parametrize(("argv", "says"), [
    (["--from-flink", "http://127.0.0.1:8081/overview"], "expected http://HOST:PORT/jobs/JOB_ID"),
    (["--from-flink", "no-such-flink.json"], "cannot read no-such-flink.json"),
    ([], "expected MODULE:FUNCTION, or --from-flink FILE|URL"),
])
def test_calibrate_from_flink_bad_input_is_one_error_line(argv: list[str], says: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    assert main(["calibrate", *argv, "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("barrierflow: error: calibrate: ") and says in err and err.count("\n") == 1
