"""Simulator swarm seeds judged on every core: each seed runs in a worker process of its own pool.

A seed's run is pure and deterministic (`runtime.verify.swarm`), so where it runs changes nothing
but the wall time; the verdicts come back in seed order. Worker processes are spawned, not forked:
the calling process may hold threads (a local Ray, a Spark gateway) a fork would copy mid-state.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import islice

from runtime.verify.swarm import Verdict, run_config
from runtime.verify.swarm_config import draw_config


def default_jobs() -> int:
    """Worker processes for a sweep: one per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@contextlib.contextmanager
def errors_only() -> Iterator[None]:
    """Log errors only while it lasts (fallback warnings are expected under faults); the root
    logger's level is restored after, so a sweep run in a caller's process (a test's) leaves its
    logging as it found it."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def judge_seed(seed: int) -> Verdict:
    """Draw seed `seed`'s config, run it and judge it (in a worker process, or in this one)."""
    with errors_only():
        return run_config(draw_config(seed))


#: seeds queued per worker process ahead of the one the consumer waits for
AHEAD = 16


def verdicts(seeds: Iterable[int], jobs: int | None = None) -> Iterator[Verdict]:
    """The verdict of each of `seeds`, in their order, judged by `jobs` worker processes (every core
    when None; 1: in this process). Up to `AHEAD` seeds per worker are queued, so a seed that
    runs long at the head of the stream leaves no other worker idle; only one per worker runs, so
    a consumer that stops early (a deadline) leaves little running, and the queued rest is
    cancelled."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 1:
        yield from (judge_seed(seed) for seed in seeds)
        return
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    pending: deque[Future[Verdict]] = deque()
    try:
        for seed in seeds:
            pending.append(pool.submit(judge_seed, seed))
            if len(pending) >= AHEAD * jobs:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class SeedRange:
    """The verdicts of seeds `first`..`end` - 1 taken chunk by chunk (a sweep cut into tests) from
    one `verdicts` stream: its worker processes start once, and the next chunk's first seeds run
    while this chunk's last ones finish. A chunk that does not start where the last one ended
    starts a new stream there."""

    def __init__(self, end: int, jobs: int | None = None) -> None:
        self.end = end
        self.jobs = jobs
        self._stream: Iterator[Verdict] | None = None
        self._next = 0

    def take(self, first: int, count: int) -> list[Verdict]:
        """The verdicts of seeds `first`..`first` + `count` - 1 (not beyond `end`), in seed order."""
        if self._stream is None or self._next != first:
            self.close()
            self._stream, self._next = verdicts(range(first, self.end), self.jobs), first
        try:
            taken = list(islice(self._stream, count))
        except BaseException:
            self.close()
            raise
        self._next += len(taken)
        return taken

    def close(self) -> None:
        """Stop the stream: the seeds still queued are cancelled, the workers end."""
        if self._stream is not None:
            self._stream.close()  # type: ignore[attr-defined]
            self._stream = None
