"""Job-wide services that outlive task restarts: the sink committer and the in-memory blob store.

Both are plain classes wrapped with `ray.remote(...)` (the pattern of Ray's `util/queue.py`),
plus a client-side proxy that gives the pure core the interface it expects:

* `CommitterService` holds the job's `CollectCommitter` — the "external system" of every
  `CollectSink`. Sinks stage (pre-commit) a checkpoint's records here; when it completes the
  coordinator actor commits it for every sink in one call (`commit_checkpoint`, Flink's global
  committer) instead of a commit per sink subtask; commits are idempotent per transaction id, so
  a transaction re-committed by a restored sink is not repeated. `RemoteCommitter` sends stages and commits fire-and-forget and
  remembers the calls: a task sends a snapshot's stages from its writer thread (off the data
  path) and waits for them to land before it acknowledges the checkpoint that staged them
  (`take_staged`, `send`), and waits for its commits before it reports itself done. Records
  travel as one Arrow record batch per transaction, in a `Buffer` (the data path's own conversion
  and its Arrow IPC stream over a hop), so the committer process reads columns instead of
  unpickling a dict per record; it converts back to dicts only when the result is read.
* `BlobStoreService` holds a `MemoryBlobStore` when the job keeps checkpoints "in memory":
  the memory is this actor's, so every task actor and the coordinator see the same blobs and a
  task or coordinator restart loses nothing. `RemoteBlobStore` is a `BlobStore` over it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from checkpoint.storage.layout import MemoryBlobStore, StorageError, StorageTimeoutError
from runtime.jobmaster.committer.collect import CollectCommitter, CommittedOutput
from runtime.jobmaster.result import GcPauses
from runtime.ray.errors import describe
from runtime.ray.heap import freeze_startup_heap, gc_pauses
from runtime.ray.service_deaths import memory_storage_died
from runtime.ray.slots import PrefixedCall
from runtime.ray.timers import ProcessCpu
from runtime.records.messages import Buffer, RecordConversionError

log = logging.getLogger(__name__)

SERVICE_CPUS = 0.01


class ServesOneJob:
    """A service actor the next job of the driver may take over (`runtime.ray.worker_pool`): it
    serves one job at a time (`serve`, with the job's token), and the job's calls come through
    `call(token, method, *args)` (`ServiceHandle`), so a late call of an earlier job — a stage
    sent before its task was cancelled, a snapshot write of a cancelled attempt — is dropped
    instead of reaching the next job's output or checkpoints."""

    _token: int | None = None

    def call(self, token: int, method: str, *args: Any) -> Any:
        """`method(*args)` for the job of `token`; None, doing nothing, for another job's."""
        if token != self._token:
            return None
        if method.startswith("_") or method in ("call", "serve"):
            raise AttributeError(f"{type(self).__name__}: no service method {method!r}")
        return getattr(self, method)(*args)


class ServiceHandle:
    """A job's handle on a service actor: `handle.<method>.remote(*args)` is
    `actor.call.remote(token, method, *args)`. Picklable (it travels to tasks and the coordinator)."""

    def __init__(self, actor: Any, token: int) -> None:
        self.actor, self.token = actor, token

    def __getattr__(self, name: str) -> PrefixedCall:
        if name.startswith("_") or name in ("actor", "token"):
            raise AttributeError(name)  # (unpickling looks attributes up before they are set)
        return PrefixedCall(self.actor.call.remote, (self.token, name))

    def __repr__(self) -> str:
        return f"ServiceHandle({self.actor}, job {self.token})"


class CommitterService(ServesOneJob):
    """The job's sink committer, as an actor."""

    def __init__(self, committer: CollectCommitter | None = None, token: int | None = None) -> None:
        self.serve(token, committer)

    def serve(self, token: int | None, committer: CollectCommitter | None = None) -> None:
        """Serve the job of `token` from now on, with `committer` (None: a new one in memory)."""
        self._token = token
        self._committer = committer if committer is not None else CollectCommitter()
        self._last_commit_at: float | None = None
        self._cpu = ProcessCpu()
        freeze_startup_heap()

    def stage(self, sink: str, transaction_id: str, records: Buffer) -> None:
        self._committer.stage(sink, transaction_id, records.batch)

    def commit(self, sink: str, transaction_id: str, records: Buffer | None = None) -> None:
        self._committer.commit(sink, transaction_id, None if records is None else records.batch)
        self._last_commit_at = time.time()

    def commit_checkpoint(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: commit what every sink staged for it (and before)."""
        if self._committer.commit_checkpoint(checkpoint_id):
            self._last_commit_at = time.time()

    def abort_lingering(self, after: int, before: int, fence_before: int | None = None) -> list[str]:
        """Abort what a failed attempt staged past checkpoint `after`; `fence_before`: the next
        checkpoint id, below which a stage the failed attempt sends late is dropped."""
        aborted = self._committer.abort_lingering(after, before)
        if fence_before is not None:
            self._committer.fence(after, fence_before)
        return aborted

    def committer(self) -> CollectCommitter:
        return self._committer

    def latest_committed(self) -> CommittedOutput | None:
        return self._committer.latest_committed()

    def last_commit_at(self) -> float | None:
        """Wall time of the latest commit: when the last output became visible."""
        return self._last_commit_at

    def process_cpu(self) -> float:
        """CPU seconds this actor's process spent since it started (every thread)."""
        return self._cpu.seconds()

    def gc_pauses(self) -> GcPauses:
        """This actor process's full garbage collections (`JobMetrics.gc_pauses`)."""
        return gc_pauses()

    def ping(self) -> bool:
        return True


class StageError(RuntimeError):
    """A sink's stage (pre-commit) did not land in the committer: the task that staged it fails."""


def stage_failed(exc: BaseException) -> BaseException:
    """The error a task fails with when its sinks' stages did not land: a record Arrow cannot
    carry as it is, else a `StageError` naming what the committer raised (or that it died)."""
    if isinstance(exc, RecordConversionError):
        return exc
    if isinstance(exc, RayActorError):
        error = StageError(f"a sink's stage did not reach the committer service, which died: {describe(exc)}")
    else:
        error = StageError(f"a sink's stage could not be kept by the committer: {describe(exc)}")
    error.__cause__ = exc
    return error


def _as_buffer(records: list[dict[str, Any]] | pa.RecordBatch) -> Buffer:
    """Raises: RecordConversionError naming a record Arrow cannot carry (not expected: the task
    checked the sink's input for one Arrow type per field)."""
    if isinstance(records, pa.RecordBatch):
        return Buffer.of(records)
    return Buffer.from_records(records, checked=True)


class RemoteCommitter:
    """`SinkCommitter` for a task actor: fire-and-forget commits, `drain()` waits for them.

    A stage is only queued where the sink calls it (inside the synchronous snapshot, on the
    task's data path); `send` converts and sends it from the task's writer thread, which
    waits for it before acknowledging the snapshot. A commit sends queued stages first, so the
    committer sees a transaction's stage before anything committed after it.

    With a `sender` (a single-thread executor), a commit with no stage queued before it (a
    restored sink's, or one at end of input) is submitted from that thread, in order with every
    other call it sends; a transaction is only committed after its checkpoint completed, so
    after its stage landed.

    `commits_checkpoints`: the coordinator commits each completed checkpoint for every sink
    (`CommitterService.commit_checkpoint`), so a sink's completion notification sends nothing.
    """

    def __init__(self, handle: Any, sender: Any = None, commits_checkpoints: bool = False) -> None:
        self._handle = handle
        self.commits_checkpoints = commits_checkpoints
        self._sender = sender
        self._refs: list[Any] = []
        self._queued: list[tuple[str, str, Any]] = []
        self._sent: list[Any] = []

    def stage(self, sink: str, transaction_id: str, records: list[dict[str, Any]] | pa.RecordBatch) -> None:
        self._queued.append((sink, transaction_id, records))

    def take_staged(self) -> tuple[list[tuple[str, str, Any]], list[Any]]:
        """The stages since the last call: (queued, refs of those a commit already sent). The
        snapshot that staged them may be acknowledged only once they all succeeded (a stage
        lost with a dying process must fail the checkpoint, not complete it)."""
        queued, self._queued = self._queued, []
        sent, self._sent = self._sent, []
        return queued, sent

    def send(self, queued: list[tuple[str, str, Any]]) -> list[Any]:
        """Send queued stages; returns their refs.

        Raises:
            RecordConversionError: a record Arrow cannot carry (named in the message); nothing
                after it is sent.
        """
        refs = []
        for sink, txn, records in queued:
            try:
                buffer = _as_buffer(records)
            except RecordConversionError as exc:
                raise RecordConversionError(f"sink {sink!r} cannot stage transaction {txn!r}: {exc}") from exc
            refs.append(self._handle.stage.remote(sink, txn, buffer))
        return refs

    def commit(self, sink: str, transaction_id: str, records: list[dict[str, Any]] | None = None) -> None:
        if self._queued:
            queued, self._queued = self._queued, []
            self._sent.extend(self.send(queued))
        buffer = None if records is None else _as_buffer(records)
        if self._sender is None:
            self._submit_commit(sink, transaction_id, buffer)
        else:
            self._sender.submit(self._submit_commit, sink, transaction_id, buffer)

    def _submit_commit(self, sink: str, transaction_id: str, buffer: Buffer | None) -> None:
        self._refs.append(self._handle.commit.remote(sink, transaction_id, buffer))
        if len(self._refs) > 64:  # forget the commits applied; a failed one stays for `drain` to raise
            done, pending = ray.wait(self._refs, num_returns=len(self._refs), timeout=0)
            self._refs = [ref for ref in done if _failed(ref)] + pending

    def drain(self) -> None:
        """Wait until every commit submitted so far was applied by the committer."""
        if self._sender is not None:
            self._sender.submit(lambda: None).result()  # the commits handed to it are submitted
        refs, self._refs = self._refs, []
        ray.get(refs)


def _failed(ref: Any) -> bool:
    """Whether the finished call `ref` raised."""
    try:
        ray.get(ref, timeout=0)
    except RayError:
        return True
    return False


class BlobStoreService(ServesOneJob):
    """A `MemoryBlobStore`, as an actor."""

    def __init__(self, token: int | None = None) -> None:
        self.serve(token)

    def serve(self, token: int | None) -> None:
        """Serve the job of `token` from now on, with an empty store."""
        self._token = token
        self._store = MemoryBlobStore()
        freeze_startup_heap()

    def put(self, path: str, data: bytes) -> None:
        self._store.put(path, data)

    def get(self, path: str) -> bytes:
        return self._store.get(path)

    def delete(self, path: str) -> None:
        self._store.delete(path)

    def exists(self, path: str) -> bool:
        return self._store.exists(path)

    def list(self, prefix: str) -> list[str]:
        return self._store.list(prefix)

    def ping(self) -> bool:
        return True


#: seconds a call to the in-memory storage actor may take: a local actor answers in milliseconds;
#: only a dead or wedged process (or a host starting dozens of processes) takes this long
REMOTE_STORE_TIMEOUT = 60.0


class MemoryStorageDiedError(StorageError):
    """The `BlobStoreService` of in-memory checkpoint storage is gone, and every checkpoint with it."""


class RemoteBlobStore:
    """`BlobStore` over a `BlobStoreService` actor (blocking calls, each bounded by
    `REMOTE_STORE_TIMEOUT`; for off-hot-path I/O).

    Deletes do not wait: nothing waits on a discarded checkpoint's files, and the actor runs one
    caller's calls in submission order, so a later read or list still sees them gone. A failed
    delete is logged when noticed (as the stores log the delete failures they see).

    Thread-safe: the coordinator actor calls it from its timer thread (the id counter's `put`)
    and its discard thread (deletes) at once; concurrent `ray.wait`s on one list of refs raised
    AssertionError inside Ray and lost refs.

    Raises:
        StorageError: the blob store actor is gone (or what the store itself raised).
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._deletes: list[Any] = []
        self._deletes_lock = threading.Lock()

    def _reap_deletes(self) -> None:
        with self._deletes_lock:
            if not self._deletes:
                return
            done, self._deletes = ray.wait(self._deletes, num_returns=len(self._deletes), timeout=0)
        for ref in done:
            try:
                ray.get(ref)
            except Exception as exc:  # BlobNotFoundError, the actor gone: only a leftover blob
                log.warning("in-memory checkpoint storage: a delete failed: %s", exc)

    def _call(self, method: str, *args: Any) -> Any:
        self._reap_deletes()
        try:
            return ray.get(getattr(self._handle, method).remote(*args), timeout=REMOTE_STORE_TIMEOUT)
        except RayActorError as exc:
            raise MemoryStorageDiedError(memory_storage_died(f"{method}: {describe(exc)}")) from exc
        except GetTimeoutError as exc:
            raise StorageTimeoutError(f"in-memory checkpoint storage actor did not answer within "
                                      f"{REMOTE_STORE_TIMEOUT:g} s ({method})") from exc
        except RayTaskError as exc:  # re-raise what the store raised (BlobNotFoundError, ...)
            raise (exc.cause if isinstance(exc.cause, Exception) else StorageError(str(exc))) from None

    def put(self, path: str, data: bytes) -> None:
        self._call("put", path, data)

    def get(self, path: str) -> bytes:
        return self._call("get", path)

    def delete(self, path: str) -> None:
        self._reap_deletes()
        ref = self._handle.delete.remote(path)
        with self._deletes_lock:
            self._deletes.append(ref)

    def exists(self, path: str) -> bool:
        return self._call("exists", path)

    def list(self, prefix: str) -> list[str]:
        return self._call("list", prefix)

    def list_temporary(self, prefix: str) -> list[str]:
        return []  # a memory store's put is one step: nothing is ever half written

    def where(self, path: str) -> str:
        return f"memory://{path}"

    def __repr__(self) -> str:
        return "RemoteBlobStore(memory, in a Ray actor)"
