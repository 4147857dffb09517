"""benchmarks.throughput's steady runs (issue 24): records stamped when due, the first `--warmup`
seconds left out of the latencies, and the control calls per checkpoint counted (on the simulator:
the same `Task` counts them on Ray)."""

from __future__ import annotations

import pytest

from benchmarks import throughput


@pytest.mark.parametrize("chaining,calls", [(True, 2 + 4 + 1), (False, 2 + 8 + 1)], ids=["chained", "unchained"])
def test_a_steady_run_is_due_stamped_warmed_up_and_counts_its_calls(chaining: bool, calls: int) -> None:
    row = throughput.run("sim", 3000, checkpoints=True, rate=1000.0, warmup=1.0, chaining=chaining)
    # one second of the three is warm-up (the first due stamp on: both sources start together here)
    assert 950 <= row["warmup_records"] <= 1050, row
    assert row["checkpoints"] >= 10
    # a trigger per source, an acknowledgement per task, one global commit; no notification calls
    assert row["calls_per_checkpoint"] == calls, row


def test_a_max_rate_run_measures_every_record() -> None:
    row = throughput.run("sim", 1000, checkpoints=True, warmup=5.0)  # no rate: no warm-up
    assert row["warmup_records"] == 0 and row["latency_p99_ms"] is not None


def test_a_warm_up_as_long_as_the_run_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        throughput.main(["--executor", "sim", "--quick", "--steady-seconds", "2", "--warmup", "2"])
    assert "--warmup" in capsys.readouterr().err
