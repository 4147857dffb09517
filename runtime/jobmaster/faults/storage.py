"""Storage wrappers that apply storage faults, shared by both executors: `TearingBlobStore` and
`write_torn` for `TornWrite` (a write that reports success but lands partially);
`CoordinatorWriteFaults` for `CoordinatorStorageFailure` (the coordinator's own writes fail)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from checkpoint.ids import COUNTER_FILE
from checkpoint.storage.layout import METADATA_FILE, ForwardingBlobStore, StorageError

T = TypeVar("T")


class TearingBlobStore(ForwardingBlobStore):
    """Wraps the simulator's blob store for `TornWrite`: once armed, the next `put` stores only the
    first `keep` fraction of its bytes (`garble`: the rest zeroed, same length) and returns as if
    it had written them all. Everything else passes through."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._armed: tuple[float, bool] | None = None
        self._torn: str | None = None

    def tear_next(self, keep: float, garble: bool) -> None:
        self._armed, self._torn = (keep, garble), None

    def stop(self) -> str | None:
        """Disarm; the path torn since `tear_next` (None: nothing was written)."""
        self._armed = None
        return self._torn

    def put(self, path: str, data: bytes) -> None:
        if self._armed is not None:
            keep, garble = self._armed
            self._armed, self._torn = None, path
            data = _torn(bytes(data), keep, garble)
        self.inner.put(path, data)


def _torn(data: bytes, keep: float, garble: bool) -> bytes:
    """`data` as a torn write leaves it: at least its last byte lost (truncated) or wrong (garbled)."""
    if not data:
        return data
    cut = min(int(len(data) * keep), len(data) - 1)
    if not garble:
        return data[:cut]
    torn = data[:cut] + bytes(len(data) - cut)
    if torn == data:  # the lost part was zeros already
        torn = data[:cut] + bytes([data[cut] ^ 0xFF]) + data[cut + 1:]
    return torn


def write_torn(storage: Any, keep: float, garble: bool, write: Callable[[], T]) -> tuple[T, str | None]:
    """Run `write` (a snapshot write into `storage`, a `CheckpointStorage`) with the first file it
    puts torn (`TornWrite`); its result and the path torn (None: it wrote nothing). Wraps the
    storage's blob store once, for good (it passes everything through when not armed)."""
    tearing = storage.blob_store
    if not isinstance(tearing, TearingBlobStore):
        tearing = storage.blob_store = TearingBlobStore(storage.blob_store)
    tearing.tear_next(keep, garble)
    try:
        result = write()
    finally:
        torn = tearing.stop()
    return result, torn


class CoordinatorWriteFaults(ForwardingBlobStore):
    """The coordinator's blob store with `CoordinatorStorageFailure` applied: a `put` of the job's
    checkpoint id counter or of a checkpoint's `_metadata` asks `schedule` (a `FaultSchedule`;
    None: not armed yet) whether it fails, and raises `StorageError` without writing if so.
    Everything else (task files, deletes, reads) passes through, so it may wrap a blob store the
    tasks share. Build it with `install`."""

    def __init__(self, inner: Any, counter_path: str, job_dir: str) -> None:
        super().__init__(inner)
        self.schedule: Any = None
        #: called with (what, path) when a write fails (the executor's trace)
        self.on_fault: Callable[[str, str], None] | None = None
        self._counter_path = counter_path
        self._checkpoints = f"{job_dir}/chk-"
        self._metadata = f"/{METADATA_FILE}"
        self._paused = False

    @classmethod
    def install(cls, storage: Any, job_id: str) -> CoordinatorWriteFaults:
        """Wrap the blob store of `storage` (a `CheckpointStorage`) in place, for job `job_id`."""
        job_dir = storage.job_dir(job_id)
        wrapper = cls(storage.blob_store, f"{job_dir}/{COUNTER_FILE}", job_dir)
        storage.blob_store = wrapper
        return wrapper

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Writes in this block are not the coordinator's to count (a new coordinator recovering
        the id counter: on Ray it does so before its faults are armed)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def what(self, path: str) -> str | None:
        """"counter", "metadata" or None (not a write `CoordinatorStorageFailure` strikes)."""
        if path == self._counter_path:
            return "counter"
        if path.startswith(self._checkpoints) and path.endswith(self._metadata) \
                and path[len(self._checkpoints):-len(self._metadata)].isdigit():
            return "metadata"
        return None

    def put(self, path: str, data: bytes) -> None:
        what = self.what(path)
        if what is not None and self.schedule is not None and not self._paused \
                and self.schedule.coordinator_write(what):
            if self.on_fault is not None:
                self.on_fault(what, path)
            raise StorageError(f"injected CoordinatorStorageFailure: the coordinator's {what} write "
                               f"{self.inner.where(path)} failed")
        self.inner.put(path, data)
