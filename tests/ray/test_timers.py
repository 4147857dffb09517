"""`ThreadTimers` with `dispatch` (how a task actor turns due timers into mail for its work thread)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from runtime.ray.timers import ThreadTimers


@dataclass
class _Mailbox:
    """A lock, the mail due timers are dispatched to, the timers, and the errors they reported."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    mail: queue.Queue = field(default_factory=queue.Queue)
    errors: list[BaseException] = field(default_factory=list)
    timers: ThreadTimers = field(init=False)

    def __post_init__(self) -> None:
        self.timers = ThreadTimers(self.lock, on_error=self.errors.append, dispatch=self.mail.put)

    def next_mail(self, timeout: float = 2.0):
        return self.mail.get(timeout=timeout)


@pytest.fixture
def box() -> Iterator[_Mailbox]:
    mailbox = _Mailbox()
    try:
        yield mailbox
    finally:
        mailbox.timers.close()


def test_a_due_timer_is_handed_to_dispatch_and_runs_only_when_the_mail_is_applied(box: _Mailbox):
    fired: list[str] = []
    box.timers.schedule(0.0, lambda: fired.append(threading.current_thread().name))
    fire = box.next_mail()
    assert fired == []  # not run on the timer thread
    with box.lock:
        fire()
    assert fired == [threading.current_thread().name]


def test_a_timer_cancelled_after_dispatch_does_not_fire(box: _Mailbox):
    fired: list[int] = []
    timer = box.timers.schedule(0.0, lambda: fired.append(1))
    fire = box.next_mail()
    timer.cancel()  # e.g. `clear()` on redeploy, while the mail was still queued
    with box.lock:
        fire()
    assert fired == []


def test_a_failing_dispatched_timer_reports_to_on_error_and_later_timers_still_fire(box: _Mailbox):
    fired: list[int] = []
    box.timers.schedule(0.0, lambda: 1 / 0)
    box.timers.schedule(0.01, lambda: fired.append(2))
    for _ in range(2):
        fire = box.next_mail()
        with box.lock:
            fire()
    assert [type(e) for e in box.errors] == [ZeroDivisionError]
    assert fired == [2]


def test_a_timer_counts_how_late_it_ran_until_the_timers_are_cleared(box: _Mailbox):
    # a loaded Ray process runs its timers late (the timer thread, the mail, the lock): how late
    # is what the simulator's timers are delayed by after a calibration
    box.timers.schedule(0.0, lambda: None)
    fire = box.next_mail()
    threading.Event().wait(0.05)  # the work thread is busy before it applies the mail
    with box.lock:
        fire()
    assert box.timers.fired == 1 and 0.05 <= box.timers.lateness < 1.0
    cancelled = box.timers.schedule(0.0, lambda: None)
    fire = box.next_mail()
    cancelled.cancel()
    with box.lock:
        fire()
    assert box.timers.fired == 1  # a timer cancelled after its dispatch did not run: not counted
    box.timers.clear()
    assert (box.timers.fired, box.timers.lateness) == (0, 0.0)
