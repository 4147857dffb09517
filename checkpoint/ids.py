"""Checkpoint ID counters (Flink's `CheckpointIDCounter`).

Checkpoint ids must strictly increase for the life of a job, across coordinator failover too.
`StandaloneCheckpointIDCounter` keeps the count in memory (one coordinator per process, like
Flink's `StandaloneCheckpointIDCounter`); the ZooKeeper counter lives in `checkpoint/io/zookeeper.py`.
"""

from __future__ import annotations

import abc
import threading

from checkpoint.storage.layout import CheckpointStorage, CorruptCheckpointError

#: the first id a fresh counter hands out
INITIAL_CHECKPOINT_ID = 1
#: the largest checkpoint id (Flink's ids are Java longs; state and stats keep them as Arrow int64)
MAX_CHECKPOINT_ID = 2**63 - 1
#: where `StorageCheckpointIDCounter` keeps its count, in the job's directory
COUNTER_FILE = "_checkpoint_counter"


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
    if not isinstance(count, int) or isinstance(count, bool) or not INITIAL_CHECKPOINT_ID <= count <= MAX_CHECKPOINT_ID:
        raise ValueError(f"checkpoint id counter must be set to an integer >= {INITIAL_CHECKPOINT_ID} and <= "
                         f"{MAX_CHECKPOINT_ID}, got {count!r}")


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


class StorageCheckpointIDCounter(StandaloneCheckpointIDCounter):
    """A standalone counter that also persists its next id in the checkpoint storage
    (`<job_id>/_checkpoint_counter`, a decimal number), so a coordinator that restarts without HA
    services still hands out ids above every id it handed out before (checkpoint ids strictly
    increase across coordinator failover). It never goes back: `start()` also continues above every
    `chk-<id>` directory the job has (a lost counter cannot make a run overwrite checkpoints), and
    `set_count` never lowers it. One writer at a time: the ZooKeeper counter is the concurrent one.
    """

    def __init__(self, storage: CheckpointStorage, job_id: str) -> None:
        super().__init__()
        self._storage = storage
        self._job_id = job_id
        self._path = f"{storage.job_dir(job_id)}/{COUNTER_FILE}"

    def start(self) -> None:
        """Continue above the stored count and every checkpoint directory in storage.

        Raises:
            checkpoint.storage.layout.CorruptCheckpointError: the counter file is not a number (names it).
            checkpoint.storage.layout.StorageError: storage could not be read.
        """
        blobs = self._storage.blob_store
        highest = max(self._storage.list_checkpoint_ids(self._job_id), default=0)
        if highest >= MAX_CHECKPOINT_ID:
            directory = self._storage.checkpoint_dir(self._job_id, highest)
            raise CorruptCheckpointError(
                f"checkpoint directory {self._storage.describe(directory)} has the id {highest}, and the largest "
                f"checkpoint id is {MAX_CHECKPOINT_ID}: not a directory a job wrote (remove it)", directory)
        floor = highest + 1
        if blobs.exists(self._path):
            raw = blobs.get(self._path)
            text = raw.decode("ascii", errors="replace").strip()
            if not text.isdigit() or not INITIAL_CHECKPOINT_ID <= int(text) <= MAX_CHECKPOINT_ID:
                where = self._storage.describe(self._path)
                raise CorruptCheckpointError(
                    f"checkpoint id counter {where} is unreadable: it holds {raw[:40]!r}, expected a decimal "
                    f"integer >= {INITIAL_CHECKPOINT_ID} and <= {MAX_CHECKPOINT_ID} (delete the file: ids then "
                    "continue above the highest chk-<id> directory)", self._path)
            floor = max(floor, int(text))
        with self._lock:
            self._next = max(self._next, floor)

    def get_and_increment(self) -> int:
        value = super().get_and_increment()
        self._persist()
        return value

    def set_count(self, count: int) -> None:
        check_count(count)
        super().set_count(max(count, self.get()))
        self._persist()

    def _persist(self) -> None:
        self._storage.blob_store.put(self._path, str(self.get()).encode("ascii"))

    def __repr__(self) -> str:
        return f"StorageCheckpointIDCounter(next={self.get()}, path={self._path!r})"
