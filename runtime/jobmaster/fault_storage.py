"""Storage wrappers that apply storage faults, shared by both executors: `TearingBlobStore` and
`write_torn` for `TornWrite` (a write that reports success but lands partially)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from checkpoint.io.storage import ForwardingBlobStore

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
