"""The work thread of a task actor, and the lock it hands over to callers first.

A synchronous Ray actor serves its calls one at a time on the main thread, in each caller's
submission order (the channels' FIFO guarantee rests on that). Work that outlasts one call (a
busy task's next slice) runs on a thread of the actor (`WorkThread`), not in a call the actor
queues to itself (a Ray call per slice: ~0.25 ms of submission alone, 10–15 % of a busy task's
CPU); the main thread still executes every incoming call,
so call order is unchanged.

`CallerFirstLock` keeps calls from waiting behind more than one slice: a Python lock is not
fair (a thread that releases it and asks again usually gets it back before a woken waiter
runs), so the work thread takes the lock for its next slice only once no caller is waiting.

`WorkThread.busy_for` says how long the current slice has run: read without the lock, it tells
a task that is working through a slow record (a liveness watchdog counts that as progress) from
one stuck in it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("barrierflow.ray")


class CallerFirstLock:
    """A reentrant lock whose `acquire_after_callers` waits until no other caller waits.

    Use it as a context manager (`with lock:`) everywhere except the work thread's loop.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0

    def __enter__(self) -> CallerFirstLock:
        if self._lock.acquire(blocking=False):  # free, or held by this thread already
            return self
        with self._cond:
            self._waiting += 1
        self._lock.acquire()
        with self._cond:
            self._waiting -= 1
            if not self._waiting:
                self._cond.notify_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()

    def acquire_after_callers(self) -> None:
        """Acquire once no caller is waiting (a caller arriving just after may wait one hold)."""
        with self._cond:
            while self._waiting:
                self._cond.wait()
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()


class WorkThread:
    """Runs `work` under `lock` on a daemon thread each time `request()` was called.

    Requests made while `work` runs (typically by `work` itself: "more to do") run it again
    after every caller waiting for the lock had its turn.

    Args:
        lock: the actor's lock.
        work: called under the lock; it decides itself whether anything is still due.
        on_error: called under the lock with any exception `work` raised.
    """

    def __init__(self, lock: CallerFirstLock, work: Callable[[], None],
                 on_error: Callable[[BaseException], None]) -> None:
        self._lock, self._work, self._on_error = lock, work, on_error
        self._wanted = threading.Event()
        self._closed = False
        #: `time.monotonic()` when the slice running now began (None: none runs)
        self._busy_since: float | None = None
        self._thread = threading.Thread(target=self._run, name="barrierflow-work", daemon=True)
        self._thread.start()

    def request(self) -> None:
        self._wanted.set()

    def close(self) -> None:
        self._closed = True
        self._wanted.set()

    def busy_for(self) -> float | None:
        """Seconds the slice running now has run (None: none runs). Safe from any thread."""
        since = self._busy_since
        return None if since is None else time.monotonic() - since

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._closed:
                return
            self._wanted.clear()
            self._lock.acquire_after_callers()
            self._busy_since = time.monotonic()
            try:
                self._work()
            except BaseException as exc:  # the thread must survive a failing task
                try:
                    self._on_error(exc)
                except BaseException:
                    log.exception("work thread error handler failed")
            finally:
                self._busy_since = None
                self._lock.release()
