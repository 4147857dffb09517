"""`ProgressWatchdog`: a stuck job is told apart from a long one."""

from __future__ import annotations

import pytest

from runtime.core.graph import JobGraphError
from runtime.jobmaster.watchdog import Progress, ProgressWatchdog, check_timeout

START = Progress(attempt=0, records=0, finished=0, checkpoints=0)


def test_nothing_moving_for_stall_timeout_is_a_stall() -> None:
    dog = ProgressWatchdog(stall_timeout=5.0)
    assert dog.observe(100.0, START) is None
    assert dog.observe(104.9, START) is None
    assert dog.observe(105.0, START) == pytest.approx(5.0)
    assert dog.observe(107.0, START) == pytest.approx(7.0)


@pytest.mark.parametrize("field", ["attempt", "records", "finished", "checkpoints"])
def test_any_kind_of_progress_restarts_the_clock(field: str) -> None:
    dog = ProgressWatchdog(stall_timeout=5.0)
    dog.observe(0.0, START)
    moved = Progress(**{**START.__dict__, field: 1})
    assert dog.observe(4.0, moved) is None
    assert dog.observe(8.9, moved) is None  # 4.9 s since it moved
    assert dog.observe(9.0, moved) == pytest.approx(5.0)


def test_a_long_job_that_keeps_moving_never_stalls() -> None:
    dog = ProgressWatchdog(stall_timeout=1.0)
    for second in range(10_000):  # hours of a job that moves every second
        assert dog.observe(float(second), Progress(0, second, 0, 0)) is None


def test_no_stall_timeout_never_fails() -> None:
    dog = ProgressWatchdog(stall_timeout=None)
    dog.observe(0.0, START)
    assert dog.observe(1e9, START) is None


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "60"])
def test_a_bad_timeout_is_an_error_naming_the_option(bad: object) -> None:
    with pytest.raises(JobGraphError, match=r"invalid executor option stall_timeout="):
        ProgressWatchdog(stall_timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(JobGraphError, match=r"invalid executor option max_duration="):
        check_timeout("max_duration", bad)  # type: ignore[arg-type]
    assert check_timeout("max_duration", None) is None and check_timeout("max_duration", 3) == 3.0
