"""The garbage collector of Ray's actor processes: their start-up heap frozen, their full
collections timed.

An actor process starts with ~90,000 objects the cyclic garbage collector tracks: the modules it
imported (Ray, numpy, pyarrow, the job's code). CPython runs its first full (generation 2)
collection once enough objects outlived two younger collections, about 1.5 s into a job at 20,000
records/s, and that collection scans all of them: 74-84 ms per task process on a 2-core machine,
every worker at about the same moment, a stall of every record in flight that no part of the job
explains (it alone made the uniform benchmark's latency p99 ~80 ms against a median of 15, and
its checkpoint p99 2.5x the median). `gc.freeze()` moves the objects alive when the actor is built
into a permanent generation no collection scans (reference counting still frees them); later
full collections scan only what the job created since. `JobMetrics.gc_pauses` reports what full
collections remain, per process.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from runtime.jobmaster.result import GcPauses


class FullCollectionTimer:
    """Times this process's generation-2 collections (a `gc.callbacks` entry)."""

    def __init__(self) -> None:
        self._started: float | None = None
        self.reset()

    def reset(self) -> None:
        """Count from now on."""
        self.count = 0
        self.longest = 0.0
        self.total = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif phase == "stop" and self._started is not None:
            pause = time.perf_counter() - self._started
            self._started = None
            self.count += 1
            self.longest = max(self.longest, pause)
            self.total += pause

    def pauses(self, frozen: int) -> GcPauses:
        return GcPauses(frozen=frozen, full_collections=self.count, longest=self.longest, total=self.total)


#: this process's timer, in `gc.callbacks` once `freeze_startup_heap` ran
_timer = FullCollectionTimer()


def freeze_startup_heap() -> None:
    """Collect once, exempt every object alive now from later collections' scans, and time the
    full collections from here on (`gc_pauses`). Called once an actor is built, and again when a
    worker hosts another job: what an earlier call froze is collectable again first (the earlier
    job's objects in reference cycles would otherwise never be freed)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _timer.reset()
    if _timer not in gc.callbacks:
        gc.callbacks.append(_timer)


def gc_pauses() -> GcPauses:
    """This process's frozen objects and its full collections since `freeze_startup_heap`."""
    return _timer.pauses(gc.get_freeze_count())
