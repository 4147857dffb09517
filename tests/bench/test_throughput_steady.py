"""benchmarks.throughput's steady runs: records stamped when due, the first `--warmup`
seconds left out of the latencies, the control messages per checkpoint counted (on the simulator:
the same `Task` counts them on Ray), and the job into either sink."""

from __future__ import annotations

import pytest

from benchmarks import throughput
from checkpoint.stats import CheckpointStats, SubtaskCheckpointStats


@pytest.mark.slow
@pytest.mark.parametrize("chaining,calls", [(True, 2 + 4 + 1), (False, 2 + 8 + 1)], ids=["chained", "unchained"])
def test_a_steady_run_is_due_stamped_warmed_up_and_counts_its_calls(chaining: bool, calls: int) -> None:
    row = throughput.run("sim", 3000, checkpoints=True, rate=1000.0, warmup=1.0, chaining=chaining)
    # one second of the three is warm-up (the first due stamp on: both sources start together here)
    assert 950 <= row["warmup_records"] <= 1050, row
    assert row["checkpoints"] >= 10
    # a trigger per source, an acknowledgement per task, one global commit; no notification calls
    assert row["messages_per_checkpoint"] == calls, row


def test_a_max_rate_run_measures_every_record() -> None:
    row = throughput.run("sim", 1000, checkpoints=True, warmup=5.0)  # no rate: no warm-up
    assert row["warmup_records"] == 0 and row["latency_p99_ms"] is not None
    assert row["write_cpu_us_per_record"] == 0.0  # the simulator measures no CPU
    assert throughput.run("sim", 1000, checkpoints=False)["write_cpu_us_per_record"] is None


def test_the_write_cpu_per_record_sums_every_subtask_of_the_completed_checkpoints() -> None:
    def subtask(task: str, cpu: float) -> SubtaskCheckpointStats:
        return SubtaskCheckpointStats(task, 0.0, 0.0, 0.0, 2 * cpu, 0, 0, 0.01, 100, async_cpu=cpu)

    completed = [CheckpointStats(1, True, None, 0.0, 0.1, subtasks={"count[0]": subtask("count[0]", 0.002),
                                                                    "count[1]": subtask("count[1]", 0.003)}),
                 CheckpointStats(2, True, None, 0.2, 0.1, subtasks={"count[0]": subtask("count[0]", 0.005)})]
    assert throughput.write_cpu_per_record(completed, 10_000) == pytest.approx(1.0)  # 10 ms over 10,000 records
    assert throughput.write_cpu_per_record([], 10_000) == 0.0


def test_both_sinks_run_interleaved_and_only_the_collecting_one_keeps_output(tmp_path) -> None:
    """`--sink collect discard`: a summary per sink; the discarding runs commit nothing, yet
    every record was counted (the run checks the keyed counts), and their checkpoints complete."""
    import json

    assert throughput.main(["--executor", "sim", "--quick", "--records", "2000", "--steady-seconds", "1",
                            "--warmup", "0", "--sink", "collect", "discard", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "throughput_sim.json").read_text())
    assert [s["sink"] for s in saved["summaries"]] == ["collect", "discard"]
    assert all(s["aligned_write_cpu_us_per_record"] == 0.0 for s in saved["summaries"])
    runs = {(r["sink"], r["run"]): r for r in saved["runs"]}
    assert len(runs) == 6, sorted(runs)  # max rate aligned and off, steady aligned, per sink
    assert runs["discard", "max rate aligned"]["checkpoints"] > 0 and runs["discard", "max rate aligned"]["records_per_s"] > 0
    # a trigger per source and an acknowledgement per task; the global commit only with something to commit
    assert runs["collect", "max rate aligned"]["messages_per_checkpoint"] == 2 + 4 + 1
    assert runs["discard", "max rate aligned"]["messages_per_checkpoint"] == 2 + 4


def test_a_warm_up_as_long_as_the_run_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        throughput.main(["--executor", "sim", "--quick", "--steady-seconds", "2", "--warmup", "2"])
    assert "--warmup" in capsys.readouterr().err


def test_run_queue_rows_subtract_group_and_leave_out_threads_not_read_twice() -> None:
    from benchmarks.run_queue import ThreadSample, run_queue_rows

    before = {(1, 10): ThreadSample("TaskActor", "work", 1_000, 2_000, 10),
              (1, 11): ThreadSample("TaskActor", "work", 0, 0, 0),
              (2, 20): ThreadSample("other", "x", 0, 0, 0),
              (3, 30): ThreadSample("TaskActor", "gone", 0, 0, 0)}
    after = {(1, 10): ThreadSample("TaskActor", "work", 1_000 + 500_000_000, 2_000 + 1_000_000_000, 110),
             (1, 11): ThreadSample("TaskActor", "work", 500_000_000, 1_000_000_000, 100),
             (2, 20): ThreadSample("other", "x", 9, 9, 9),
             (4, 40): ThreadSample("TaskActor", "new", 9, 9, 9)}
    [row] = run_queue_rows(before, after, 2.0)
    assert row == {"role": "TaskActor", "thread": "work", "threads": 2, "cpu_cores": 0.5, "wakeups_per_s": 100.0,
                   "wait_ms_per_wakeup": 10.0, "wait_cores": 1.0}
