"""Checkpoint ID counters (DESIGN §1 "Recovery & HA").

Checkpoint ids must strictly increase for the life of a job, across coordinator failover too.
`StandaloneCheckpointIDCounter` keeps the count in memory (one coordinator per process, like
Flink's `StandaloneCheckpointIDCounter`); the ZooKeeper counter lives in `checkpoint/zookeeper.py`.
"""

from __future__ import annotations

import abc
import threading

#: the first id a fresh counter hands out
INITIAL_CHECKPOINT_ID = 1


class CheckpointIDCounter(abc.ABC):
    """Hands out checkpoint ids, atomically."""

    @abc.abstractmethod
    def start(self) -> None:
        """Acquire whatever the counter needs (a connection); idempotent."""

    @abc.abstractmethod
    def get_and_increment(self) -> int:
        """Return the next id and advance the counter."""

    @abc.abstractmethod
    def get(self) -> int:
        """The id the next `get_and_increment()` would return."""

    @abc.abstractmethod
    def set_count(self, count: int) -> None:
        """Make `count` the next id (used on recovery so ids keep increasing).

        Raises:
            ValueError: count is not an integer >= INITIAL_CHECKPOINT_ID.
        """

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Release resources; the count may be kept for a later `start()`."""


def check_count(count: int) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or count < INITIAL_CHECKPOINT_ID:
        raise ValueError(f"checkpoint id counter must be set to an integer >= {INITIAL_CHECKPOINT_ID}, got {count!r}")


class StandaloneCheckpointIDCounter(CheckpointIDCounter):
    """An in-memory counter starting at 1 (thread-safe, for executors that use threads)."""

    def __init__(self, initial: int = INITIAL_CHECKPOINT_ID) -> None:
        check_count(initial)
        self._next = initial
        self._lock = threading.Lock()

    def start(self) -> None:
        pass

    def get_and_increment(self) -> int:
        with self._lock:
            value = self._next
            self._next += 1
            return value

    def get(self) -> int:
        with self._lock:
            return self._next

    def set_count(self, count: int) -> None:
        check_count(count)
        with self._lock:
            self._next = count

    def shutdown(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"StandaloneCheckpointIDCounter(next={self._next})"
