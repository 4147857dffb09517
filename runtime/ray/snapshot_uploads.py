"""`SnapshotUploads`: a task slot's snapshot-writer thread.

Theory of operation
-------------------
A `runtime.ray.task_actor.TaskActor` takes its synchronous snapshot on the work thread and hands
the rest here: on one writer thread per slot the sinks' stages of that snapshot are sent and
awaited, the snapshot is serialised and written through the shared `SnapshotWriter`, and the
outcome goes back to the task as mail ("written"), so the data path never waits for storage.

* One thread. The writer is used on this thread only (it may keep per-task state); the
  completion and abort notices it keeps incremental state by, and its reset at a new attempt,
  are queued to the same thread, so they apply in order with the writes.
* Epochs. A write carries the epoch it was started in. One whose epoch ended before it began
  writes nothing; one that ends while it writes is reported anyway, and the task slot discards
  its files (an orphan at worst, never a wrong checkpoint).
* Write faults. The attempt's `AttemptFaults` say which write fails (`StorageWriteFailure`) or
  tears (`TornWrite`) and whether a `SlowStorage` window is open; what that does to the write is
  `runtime.jobmaster.coordination.task_reports`' decision (this thread sleeps out a slowdown:
  the storage write lasts `factor` times its own time; the wait for the stages before it is not
  multiplied, as the simulator's write of the same snapshot has none).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from checkpoint.io.snapshot_writer import SnapshotWriter
from checkpoint.storage.layout import StorageError
from runtime.core.subtask_checkpoint import TaskSnapshot
from runtime.core.task import Task
from runtime.jobmaster.coordination.task_reports import WriteFaults, write_snapshot_files, write_started
from runtime.jobmaster.faults.counts import AttemptFaults
from runtime.jobmaster.faults.storage import write_torn
from runtime.ray.services import RemoteCommitter, stage_failed
from vocabulary.handles import TaskId

#: the sinks' pre-commits of one snapshot, as `RemoteCommitter.take_staged` returns them
Staged = tuple[list[tuple[str, str, Any]], list[Any]]


class SnapshotUploads:
    """The snapshot-writer thread of one task slot.

    Args:
        writer: writes snapshots into the job's checkpoint storage.
        task_id: the slot's task.
        live: whether an epoch is still the slot's current one (read without its lock).
        post: queues mail for the slot's work thread: ``post("written", epoch, checkpoint_id,
            outcome, seconds, cpu)`` (a `WriteOutcome`), or ``post("call", epoch, fail, (error,))`` when a
            sink's stage did not land.
        fail: fails the slot's task (as mail, so on its work thread).
    """

    def __init__(self, writer: SnapshotWriter, task_id: TaskId, live: Callable[[int], bool],
                 post: Callable[..., None], fail: Callable[[BaseException], None]) -> None:
        self._writer = writer
        self._task_id = task_id
        self._live = live
        self._post = post
        self._fail = fail
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="barrierflow-writer")

    @property
    def keeps_files(self) -> bool:
        """Whether the writer keeps state per checkpoint (incremental files) that completions update."""
        return self._writer.files is not None

    def close(self) -> None:
        """The slot hosts another job's subtask now: the writer thread ends once it has written
        what it was given."""
        self._pool.shutdown(wait=False)

    def reset(self) -> None:
        """A new attempt starts: the writer forgets what it kept for the previous one."""
        self._pool.submit(self._writer.reset, [self._task_id])

    def completed(self, task_id: TaskId, checkpoint_id: int) -> None:
        self._pool.submit(self._writer.notify_checkpoint_complete, task_id, checkpoint_id)

    def aborted(self, task_id: TaskId, checkpoint_id: int) -> None:
        self._pool.submit(self._writer.notify_checkpoint_aborted, task_id, checkpoint_id)

    def upload(self, epoch: int, task: Task, snapshot: TaskSnapshot, staged: Staged, committer: RemoteCommitter,
               faults: AttemptFaults, fail: bool, tear: tuple[float, bool] | None) -> None:
        """Write `snapshot` of `task` (epoch `epoch`) on the writer thread, after the sinks' `staged`
        pre-commits landed; `fail` / `tear`: this write's injected faults."""
        self._pool.submit(self._write, epoch, task, snapshot, staged, committer, faults, fail, tear)

    def discard(self, handles: Any) -> None:
        """Delete a written snapshot's files (its checkpoint is void); best effort."""
        with contextlib.suppress(Exception):  # an orphan file, never a wrong checkpoint
            self._writer.discard(handles)

    def _write(self, epoch: int, task: Task, snapshot: TaskSnapshot, staged: Staged, committer: RemoteCommitter,
               faults: AttemptFaults, fail: bool, tear: tuple[float, bool] | None) -> None:
        """On the writer thread: send the sinks' stages and wait for them (one that did not land
        fails the task), serialise and write, then report back through the mailbox."""
        checkpoint_id = snapshot.checkpoint_id
        queued, refs = staged
        # read without the slot's lock (a benign race: a snapshot cancelled or an epoch ended right
        # after is written anyway, and the slot discards it when the report arrives)
        if not self._live(epoch):
            return
        cancelled = task.is_cancelled(checkpoint_id)
        # the sinks' stages are part of the write (`async_duration`, `async_cpu`): at full speed,
        # turning a checkpoint interval's records into Arrow and sending them takes tens of ms,
        # which would otherwise show as an unexplained gap before the acknowledgement
        started, cpu_started = time.time(), time.thread_time()
        try:
            # sent even for a cancelled snapshot: its transactions stay pending in the sinks and
            # a later checkpoint commits them
            refs = refs + committer.send(queued)
            if not cancelled and refs:
                ray.get(refs)
        except Exception as exc:
            # a stage that did not land (its storage full, the committer actor gone) or a record
            # Arrow cannot carry: the task fails. Declining would not do: the sink moved on, and the
            # next checkpoint would commit its other transactions without this one's records.
            self._post("call", epoch, self._fail, (stage_failed(exc),))
            return
        if cancelled:
            return
        port = _UploadStorage(self._writer, snapshot, faults)
        write_faults = WriteFaults(fail, tear, faults.write_slowdown(started))
        slowdown = write_started(write_faults, port)  # a `SlowStorage` window: it takes this many times as long
        writing = time.time()
        outcome = write_snapshot_files(self._task_id, checkpoint_id, write_faults, port)
        if slowdown > 1.0 and outcome.error is None:
            # the storage is slow, not the committer: the stages' wait is not multiplied
            time.sleep((slowdown - 1.0) * (time.time() - writing))
        self._post("written", epoch, checkpoint_id, outcome, time.time() - started,
                   time.thread_time() - cpu_started)


class _UploadStorage:
    """`SnapshotStoragePort` of one write on the writer thread: through the slot's `SnapshotWriter`;
    what faults did goes into the attempt's counts. Any error of the storage (its actor gone, a
    remote store's own errors) is a `StorageError`: the task declines the checkpoint."""

    def __init__(self, writer: SnapshotWriter, snapshot: TaskSnapshot, faults: AttemptFaults) -> None:
        self.writer, self.snapshot, self.faults = writer, snapshot, faults

    def write(self) -> Any:
        try:
            return self.writer.write(self.snapshot, self.writer.prepare(self.snapshot))
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"writing {self.snapshot.task_id} chk-{self.snapshot.checkpoint_id} failed: "
                               f"{type(exc).__name__}: {exc}") from exc

    def write_torn(self, keep: float, garble: bool) -> tuple[Any, str | None]:
        return write_torn(self.writer.storage, keep, garble, self.write)

    def struck(self, fault: str, detail: Any) -> None:
        if fault == "SlowStorage":
            self.faults.slowed += 1
        elif fault == "TornWrite" and detail is not None:
            self.faults.torn_files.append(detail)
