"""Wall-clock `Clock` and a thread-backed `Timers` for code running inside Ray actors.

A synchronous Ray actor serves one call at a time on its main thread and must never sleep, yet
the pure core needs one-shot timers (the coordinator's periodic trigger and checkpoint timeouts,
a task's buffer timeout and alignment timeout, a rate-limited source's next record). `ThreadTimers`
keeps a heap of due times served by one daemon thread per actor; a callback runs on that thread
*holding the actor's lock*, and every actor method takes the same lock, so the pure objects are
only ever touched by one thread at a time. (A task actor passes `dispatch` instead: its due
callbacks are posted to its work thread's mailbox and run there, under the same lock.) Incoming calls keep Ray's per-submitter FIFO order: the
timer thread never executes actor calls, it only runs callbacks between them.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

log = logging.getLogger("barrierflow.ray")


class WallClock:
    """`time.time()`: comparable across the processes of one machine (latency stamps)."""

    #: `time.time` itself, no Python frame: a keyed function may ask per record (`ctx.now()`)
    now = staticmethod(time.time)


class ProcessCpu:
    """CPU seconds this process spent (every thread) since the object was made: an actor's own
    cost (`JobMetrics.service_cpu`)."""

    def __init__(self) -> None:
        self._start = time.process_time()

    def seconds(self) -> float:
        return time.process_time() - self._start


class _Timer:
    __slots__ = ("due", "callback", "cancelled")

    def __init__(self, due: float, callback: Callable[[], None]) -> None:
        self.due, self.callback, self.cancelled = due, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ThreadTimers:
    """One-shot timers fired on a daemon thread under `lock`.

    Args:
        lock: the actor's lock (reentrant, so a callback may call back into locked code): an
            `RLock` or a `runtime.ray.work_thread.CallerFirstLock`.
        on_error: called (under the lock) with any exception a callback raised.
        dispatch: if given, a due timer is handed to it (a callable to run later under the
            lock) instead of being run on the timer thread.
    """

    def __init__(self, lock: AbstractContextManager[Any], on_error: Callable[[BaseException], None] | None = None,
                 dispatch: Callable[[Callable[[], None]], None] | None = None) -> None:
        self._lock = lock
        self._on_error = on_error
        self._dispatch = dispatch
        self._heap: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()
        #: callbacks run since the last `clear`, and the seconds they ran after their due times
        #: (the wait for this thread, the dispatch and the lock: how late a loaded process's
        #: timers are, `StepTimes.timer_lateness`)
        self.fired = 0
        self.lateness = 0.0
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="barrierflow-timers", daemon=True)
        self._thread.start()

    def schedule(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(time.time() + max(0.0, delay), callback)
        with self._cond:
            heapq.heappush(self._heap, (timer.due, next(self._seq), timer))
            self._cond.notify()
        return timer

    def clear(self) -> None:
        """Cancel every pending timer and start counting `fired` and `lateness` again (a task
        actor redeployed for a new epoch)."""
        self.fired, self.lateness = 0, 0.0
        with self._cond:
            for _, _, timer in self._heap:
                timer.cancelled = True
            self._heap.clear()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if self._heap:
                        wait = self._heap[0][0] - time.time()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._closed:
                    return
                _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            if self._dispatch is not None:
                self._dispatch(functools.partial(self._fire, timer))
                continue
            with self._lock:
                self._fire(timer)

    def _fire(self, timer: _Timer) -> None:
        """Under the lock: run `timer` unless it was cancelled meanwhile."""
        if timer.cancelled:
            return
        self.fired += 1
        self.lateness += max(0.0, time.time() - timer.due)
        try:
            timer.callback()
        except BaseException as exc:  # a timer must never kill the thread
            if self._on_error is None:
                log.exception("timer callback failed")
            else:
                self._on_error(exc)
