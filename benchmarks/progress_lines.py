"""Plain progress lines for a long benchmark whose output is not a terminal (a log, a pipe, CI).

A terminal gets a live progress bar; a log gets nothing from it until the end, which for a
benchmark of minutes looks like a hang. `ProgressLines` writes one line when a step starts and
then at least every `every` seconds while it runs — what runs (the step's label), how long it has
run, how long the whole has run, and how many steps are done of how many:

    [  65.0 s] 12/37 done; running sim/backpressure/aligned (repeat 1/1) for 6.2 s

A daemon thread calls `tick` (`start_ticking`); `tick` alone decides whether a line is due, from
the injected `clock`, so the cadence is testable with a fake clock and no thread.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable


class ProgressLines:
    """Progress of `total` steps as plain lines (see the module docstring).

    Args:
        total: steps to run.
        every: at most this many seconds between two lines while a step runs.
        clock: seconds, monotonic.
        write: takes one line (without its newline); default: print to stdout, flushed.
    """

    def __init__(self, total: int, *, every: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None) -> None:
        if every <= 0:
            raise ValueError(f"ProgressLines: every must be > 0 seconds, got {every!r}")
        self.total, self.every, self.clock = total, every, clock
        self.write = write or (lambda line: print(line, file=sys.stdout, flush=True))
        self.done = 0
        self.label: str | None = None
        self.started = clock()
        self._step_started = self.started
        self._last_line: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def line(self) -> str:
        """The progress line now."""
        now = self.clock()
        running = f"; running {self.label} for {now - self._step_started:.1f} s" if self.label else ""
        return f"[{now - self.started:7.1f} s] {self.done}/{self.total} done{running}"

    def _emit(self) -> None:
        self._last_line = self.clock()
        self.write(self.line())

    def step(self, label: str) -> None:
        """Step `label` starts now (a line says so)."""
        with self._lock:
            self.label, self._step_started = label, self.clock()
            self._emit()

    def step_done(self) -> None:
        """The running step finished."""
        with self._lock:
            self.done += 1
            self.label = None

    def tick(self) -> None:
        """Write a line if none was written for `every` seconds."""
        with self._lock:
            if self._last_line is None or self.clock() - self._last_line >= self.every:
                self._emit()

    def finish(self) -> None:
        """The last line (every step done, or as far as it got)."""
        with self._lock:
            self._emit()

    def start_ticking(self, period: float = 0.5) -> None:
        """`tick` every `period` seconds on a daemon thread until `stop_ticking`."""
        def run() -> None:
            while not self._stop.wait(period):
                self.tick()

        self._thread = threading.Thread(target=run, name="progress-lines", daemon=True)
        self._thread.start()

    def stop_ticking(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ProgressLines:
        self.start_ticking()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop_ticking()
        self.finish()
