"""The task actor's work thread and its lock (plain threads: no Ray needed).

What the actor relies on: work requested again and again never starves a caller waiting for the
lock (a call waits behind at most one slice), a request made during a slice runs one more slice,
and a failing slice is reported without killing the thread.
"""

from __future__ import annotations

import threading
import time

from runtime.ray.work_thread import CallerFirstLock, WorkThread

SLICE = 0.005


def test_a_waiting_caller_goes_before_the_next_slice_of_endless_work():
    lock = CallerFirstLock()
    log: list[str] = []
    started = threading.Event()
    stop = False

    def work() -> None:
        log.append("slice")
        started.set()
        time.sleep(SLICE)  # holds the lock, releases the GIL: a caller arrives meanwhile
        if not stop:
            thread.request()  # always more to do

    thread = WorkThread(lock, work, on_error=lambda exc: log.append(f"error {exc}"))
    thread.request()
    assert started.wait(5)
    for _ in range(30):
        log.append("ask")
        with lock:
            log.append("call")
        time.sleep(SLICE / 3)
    stop = True
    thread.close()
    asks = [i for i, entry in enumerate(log) if entry == "ask"]
    # from asking to getting the lock, no slice starts but possibly one that took the lock in the
    # instant before the caller asked for it (the one it was in is logged before the ask); an
    # unfair lock lets the work thread run slice after slice meanwhile (measured: up to 86)
    between = [log[i:log.index("call", i)].count("slice") for i in asks]
    assert max(between) <= 1, (between, log)
    assert log.count("slice") >= 30  # and the work kept going between the calls


def test_a_request_during_a_slice_runs_one_more_slice():
    lock = CallerFirstLock()
    runs = []
    done = threading.Event()

    def work() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            with lock:  # reentrant: a call-back into locked code from the slice itself
                thread.request()
        else:
            done.set()

    thread = WorkThread(lock, work, on_error=lambda exc: None)
    thread.request()
    assert done.wait(5)
    time.sleep(0.05)
    thread.close()
    assert runs == [0, 1]


def test_a_failing_slice_is_reported_under_the_lock_and_the_thread_goes_on():
    lock = CallerFirstLock()
    errors: list[tuple[str, bool]] = []
    second = threading.Event()
    runs = 0

    def work() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise ValueError("boom in the slice")
        second.set()

    def on_error(exc: BaseException) -> None:
        # the handler runs under the lock: another thread cannot take it meanwhile
        errors.append((str(exc), not _free_elsewhere(lock)))

    thread = WorkThread(lock, work, on_error=on_error)
    thread.request()
    deadline = time.time() + 5
    while not errors and time.time() < deadline:
        time.sleep(0.01)
    thread.request()
    assert second.wait(5)
    thread.close()
    assert errors == [("boom in the slice", True)]


def _free_elsewhere(lock: CallerFirstLock) -> bool:
    """Whether another thread could take `lock` right now."""
    result = []

    def probe() -> None:
        got = lock._lock.acquire(blocking=False)
        if got:
            lock._lock.release()
        result.append(got)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return result[0]


def test_busy_for_says_how_long_the_running_slice_has_run_from_any_thread():
    """Read without the lock (the task actor's heartbeat): None while idle, growing during a slice."""
    lock = CallerFirstLock()
    inside, release = threading.Event(), threading.Event()

    def work() -> None:
        inside.set()
        release.wait(5)

    thread = WorkThread(lock, work, on_error=lambda exc: None)
    assert thread.busy_for() is None
    thread.request()
    assert inside.wait(5)
    first = thread.busy_for()
    time.sleep(0.05)
    assert first is not None and thread.busy_for() >= first + 0.04
    release.set()
    deadline = time.time() + 5
    while thread.busy_for() is not None and time.time() < deadline:
        time.sleep(0.01)
    assert thread.busy_for() is None
    thread.close()
