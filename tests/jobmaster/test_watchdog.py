"""`ProgressWatchdog`: a stuck job is told apart from a long one."""

from __future__ import annotations

import pytest

from runtime.core.graph import JobGraphError
from runtime.jobmaster.lifecycle.watchdog import (
    DEFAULT_STALL_TIMEOUT,
    Progress,
    ProgressWatchdog,
    Stall,
    check_timeout,
)

START = Progress(attempt=0, records=0, finished=0, checkpoints=0)


def test_nothing_moving_for_stall_timeout_is_a_stall() -> None:
    dog = ProgressWatchdog(stall_timeout=5.0)
    assert dog.observe(100.0, START) is None
    assert dog.observe(104.9, START) is None
    assert dog.observe(105.0, START) == Stall(5.0, hung=())
    assert dog.observe(107.0, START) == Stall(7.0, hung=())


@pytest.mark.parametrize("field", ["attempt", "records", "finished", "checkpoints"])
def test_any_kind_of_progress_restarts_the_clock(field: str) -> None:
    dog = ProgressWatchdog(stall_timeout=5.0)
    dog.observe(0.0, START)
    moved = Progress(**{**START.__dict__, field: 1})
    assert dog.observe(4.0, moved) is None
    assert dog.observe(8.9, moved) is None  # 4.9 s since it moved
    assert dog.observe(9.0, moved) == Stall(5.0, hung=())


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


# ---------------------------------------------------------------------- a step in progress


def test_a_step_in_progress_counts_as_progress_until_it_has_run_stall_timeout() -> None:
    """A slow record (a model call) keeps the job alive while its step runs: nothing else moves for
    longer than stall_timeout, yet the job is not stuck until that one step has run stall_timeout."""
    dog = ProgressWatchdog()  # the default: 120 s
    assert dog.stall_timeout == DEFAULT_STALL_TIMEOUT == 120.0
    dog.observe(0.0, START)
    assert dog.observe(150.0, START, busy={"map[0]": 60.0}) is None  # one record of a minute: moving
    assert dog.observe(200.0, START, busy={"map[0]": 110.0}) is None
    stall = dog.observe(210.0, START, busy={"map[0]": 120.0, "map[1]": 130.0})
    assert stall == Stall(210.0, hung=("map[0]", "map[1]"))  # in one step for stall_timeout: hung


def test_a_task_in_a_young_step_holds_the_verdict_back_even_beside_an_old_one() -> None:
    dog = ProgressWatchdog(stall_timeout=5.0)
    dog.observe(0.0, START)
    assert dog.observe(9.0, START, busy={"a[0]": 9.0, "b[0]": 1.0}) is None
    assert dog.observe(14.0, START, busy={"a[0]": 14.0, "b[0]": 6.0}) == Stall(14.0, hung=("a[0]", "b[0]"))


def test_stuck_with_no_task_in_a_step_names_no_hung_task() -> None:
    """Nothing processing and nothing moving (a deadlock, input held back): stuck, no task to blame."""
    dog = ProgressWatchdog(stall_timeout=5.0)
    dog.observe(0.0, START)
    assert dog.observe(5.0, START, busy={}) == Stall(5.0, hung=())


def test_progress_resets_the_clock_even_while_a_step_runs() -> None:
    dog = ProgressWatchdog(stall_timeout=5.0)
    dog.observe(0.0, START)
    moved = Progress(0, 1, 0, 0)
    assert dog.observe(4.0, moved, busy={"a[0]": 4.0}) is None
    assert dog.observe(8.0, moved, busy={"a[0]": 8.0}) is None  # stuck 4 s only
    assert dog.observe(9.0, moved, busy={"a[0]": 9.0}) == Stall(5.0, hung=("a[0]",))
