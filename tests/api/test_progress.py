"""Progress phases (`runtime/jobmaster/lifecycle/progress.py`) and the demo's plain progress lines."""

from __future__ import annotations

import io

from rich.console import Console

from runtime.api.job_display import JobProgress
from runtime.jobmaster.lifecycle.progress import Phase, reading_phase


def test_the_final_checkpoint_phase_starts_when_every_source_read_its_input() -> None:
    assert reading_phase([]) is Phase.RUNNING  # nothing reported yet
    assert reading_phase(["running", "awaiting final checkpoint"]) is Phase.RUNNING
    assert reading_phase([None, "finished"]) is Phase.RUNNING
    assert reading_phase(["awaiting final checkpoint", "finished"]) is Phase.FINAL_CHECKPOINT


def test_plain_progress_is_a_line_a_second_and_one_at_each_phase_change(monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("runtime.api.job_display.time.perf_counter", lambda: clock[0])
    out = io.StringIO()
    progress = JobProgress(Console(file=out, width=200), live=False, every=1.0)
    for step, phase in enumerate(["running"] * 8 + ["final checkpoint", "committing", "stopping"]):
        clock[0] = 100.0 + step * 0.25
        progress({"phase": phase, "records in": 1_000_000 + step})
    lines = out.getvalue().splitlines()
    assert [line.split("] ")[1].split(":")[0] for line in lines] == \
        ["running", "running", "final checkpoint", "committing", "stopping"]
    assert "records in 1,000,000" in lines[0] and "records/s (wall)" not in lines[0]  # no time elapsed yet
    assert progress.phases == ["running", "final checkpoint", "committing", "stopping"]
