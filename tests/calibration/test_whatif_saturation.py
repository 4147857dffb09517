"""`whatif` recognises a variant that cannot keep up from the simulated run's own figures, stops
it early in virtual time and names it and the saturated resource; the other variants report."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.calibration.predict import predict
from runtime.calibration.profile import CostProfile
from runtime.calibration.whatif import table, variants, what_if
from runtime.jobmaster.result import JobFailedError
from runtime.sim.costs import StepCost
from runtime.sim.saturation import Sample, SaturationError, SaturationMonitor
from tests.calibration.jobs import small_job

#: 40 us of CPU per record on one shared core, 0.125 s of control-path CPU per checkpoint (the
#: busy machine's profile): every 0.5 s the job keeps up, every 5 ms it cannot
TIGHT = CostProfile(steps={"default": StepCost(2e-5, 40e-6)}, cores=1, checkpoint_cpu=0.125)


def _job(records: int = 30_000):
    return small_job(records=records, rate=5000, unaligned=False, interval=0.5)  # 6 s of records


def _stopped_at(failure: str) -> float:
    return float(re.search(r"stopped at virtual ([0-9.]+) s", failure).group(1))


@pytest.mark.slow
def test_the_saturated_variants_are_named_with_their_resource_and_the_others_report() -> None:
    predictions = what_if(_job, "tight", TIGHT, variants(interval=0.005, slow={"count[1]": 20}))
    by = {p.variant.name: p for p in predictions}
    assert list(by) == ["baseline", "interval=0.005s", "slow count[1]x20"]
    assert by["baseline"].failure is None and by["baseline"].figures["throughput"] == pytest.approx(5000, rel=0.01)
    control, slow = by["interval=0.005s"], by["slow count[1]x20"]
    assert control.saturated == "the control path's CPU" and control.figures["throughput"] is None
    assert "the sources fell behind their rate, further in each of the last 4 windows" in control.failure
    assert "the 1 shared core(s) were 100% busy: the control path took 0.6" in control.failure, control.failure
    assert slow.saturated == "task count[1]'s CPU"
    # stopped within a few windows, long before the simulator's hour of virtual time
    assert _stopped_at(control.failure) < 20 and _stopped_at(slow.failure) < 20
    rows = {row[0]: row[1:] for row in table(predictions)}
    assert rows["outcome"] == ["finished", "cannot keep up: the control path's CPU",
                               "cannot keep up: task count[1]'s CPU"]


def test_a_slow_link_is_named_when_no_core_or_task_is_busy() -> None:
    with pytest.raises(JobFailedError) as failed:
        predict(_job(), "link", CostProfile(), link_delays={"Source: generator[0]": 0.5}, stop_when_saturated=True)
    assert isinstance(failed.value.cause, SaturationError)
    assert failed.value.cause.resource == "the links out of Source: generator[0]"
    assert "out of credit in 100% of the samples while count[0], count[1] were busy at most 0%" in str(failed.value)


@pytest.mark.slow
def test_a_run_that_keeps_up_is_not_stopped_and_replays_the_same_figures() -> None:
    plain = predict(_job(10_000), "ok", TIGHT)
    watched = predict(_job(10_000), "ok", TIGHT, stop_when_saturated=True)
    assert watched.metrics.records_in == plain.metrics.records_in == 10_000
    assert watched.metrics.duration == plain.metrics.duration  # watching changes nothing


JOB = '''
from tests.calibration.jobs import small_job


def build():
    return small_job(records=30_000, rate=5000, unaligned=False, interval=0.5)
'''


@pytest.mark.slow
def test_whatif_cli_names_the_variant_and_the_resource(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.cli import main

    (tmp_path / "tight_job.py").write_text(JOB)
    replace(TIGHT, calibrated={"target": "tight_job:build"}).save(tmp_path / "tight.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["whatif", "--profile", "tight.json", "--interval", "0.005", "--json", "w.json"]) == 0
    out = capsys.readouterr().out
    assert "variant 'interval=0.005s': job 'build' cannot keep up: the sources fell behind their rate" in out
    assert "saturated: the control path's CPU" in out
    rows = json.loads((tmp_path / "w.json").read_text())
    assert [(r["variant"], r["saturated"]) for r in rows] == [("baseline", None),
                                                              ("interval=0.005s", "the control path's CPU")]


def _sample(now: float, *, lag: float | None, cpu: dict[str, float], busy: dict[str, float] | None = None,
            control: float = 0.0, backpressured: frozenset[str] = frozenset(), read: int = 0,
            left: int | None = None) -> Sample:
    return Sample(now=now, busy=busy if busy is not None else cpu, cpu=cpu, control_cpu=control,
                  lags={"Source: s[0]": lag} if lag is not None else {}, backpressured=backpressured,
                  records_read=read, records_left=left, downstream={"Source: s[0]": ("count[0]",)})


def _feed(monitor: SaturationMonitor, samples) -> SaturationError | None:
    verdict = None
    for sample in samples:
        verdict = monitor.observe(sample) or verdict
    return verdict


def test_the_monitor_needs_every_window_to_fall_further_behind() -> None:
    def run(lags: list[float]) -> SaturationError | None:
        monitor = SaturationMonitor(1.0, windows=3)
        return _feed(monitor, [_sample(i / 10, lag=lags[i // 10], cpu={"count[0]": i / 10})
                               for i in range(10 * len(lags))] + [_sample(len(lags), lag=lags[-1] + 0.05,
                                                                          cpu={"count[0]": len(lags)})])

    assert run([0.5, 1.5, 2.5, 3.5]) is not None  # a task busy all the time, the lag growing
    assert run([0.5, 1.5, 1.2, 3.5]) is None  # it caught up once: not monotonic
    assert run([0.0, 0.1, 0.2, 0.3]) is None  # growing, but less than a window behind: keeps up


def test_the_monitor_names_a_busy_task_without_shared_cores() -> None:
    monitor = SaturationMonitor(1.0, windows=2)
    samples = [_sample(t / 10, lag=0.6 * t / 10 + 0.01, cpu={"count[0]": t / 20, "sink[0]": 0.0},
                       busy={"count[0]": t / 10, "sink[0]": 0.0}) for t in range(31)]
    error = _feed(monitor, samples)
    assert error is not None and error.resource == "task count[0]'s time"
    assert "busy 100% of virtual time (50% CPU, 50% off-CPU)" in str(error)


def test_the_monitor_stops_an_unthrottled_run_that_cannot_finish_in_time() -> None:
    monitor = SaturationMonitor(1.0, windows=2, max_time=90.0)
    samples = [_sample(t / 10, lag=None, cpu={"count[0]": t / 10}, read=t * 10, left=10_000 - t * 10)
               for t in range(31)]  # 100 records per virtual second, 9,700 left at 3 s
    error = _feed(monitor, samples)
    assert error is not None and "at 100 records per virtual second the 9,700 records left need 97 more virtual " \
        "seconds, beyond the run's 90" in str(error)
    monitor = SaturationMonitor(1.0, windows=2, max_time=1000.0)
    assert _feed(monitor, samples) is None
