"""`ThreadTimers` with `dispatch` (how a task actor turns due timers into mail for its work thread)."""

from __future__ import annotations

import queue
import threading

from runtime.ray.timers import ThreadTimers


def _dispatched(timers_queue: queue.Queue, timeout: float = 2.0):
    return timers_queue.get(timeout=timeout)


def test_a_due_timer_is_handed_to_dispatch_and_runs_only_when_the_mail_is_applied():
    lock = threading.RLock()
    mail: queue.Queue = queue.Queue()
    fired: list[str] = []
    timers = ThreadTimers(lock, dispatch=mail.put)
    try:
        timers.schedule(0.0, lambda: fired.append(threading.current_thread().name))
        fire = _dispatched(mail)
        assert fired == []  # not run on the timer thread
        with lock:
            fire()
        assert fired == [threading.current_thread().name]
    finally:
        timers.close()


def test_a_timer_cancelled_after_dispatch_does_not_fire():
    lock = threading.RLock()
    mail: queue.Queue = queue.Queue()
    fired: list[int] = []
    timers = ThreadTimers(lock, dispatch=mail.put)
    try:
        timer = timers.schedule(0.0, lambda: fired.append(1))
        fire = _dispatched(mail)
        timer.cancel()  # e.g. `clear()` on redeploy, while the mail was still queued
        with lock:
            fire()
        assert fired == []
    finally:
        timers.close()


def test_a_failing_dispatched_timer_reports_to_on_error_and_later_timers_still_fire():
    lock = threading.RLock()
    mail: queue.Queue = queue.Queue()
    errors: list[BaseException] = []
    fired: list[int] = []
    timers = ThreadTimers(lock, on_error=errors.append, dispatch=mail.put)
    try:
        timers.schedule(0.0, lambda: 1 / 0)
        timers.schedule(0.01, lambda: fired.append(2))
        for _ in range(2):
            fire = _dispatched(mail)
            with lock:
                fire()
        assert [type(e) for e in errors] == [ZeroDivisionError]
        assert fired == [2]
    finally:
        timers.close()
