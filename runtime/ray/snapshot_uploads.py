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
* Write faults. The attempt's `AttemptFaults` decide per write: an injected `StorageError`
  (`StorageWriteFailure`), a torn first file that reports success (`TornWrite`,
  `runtime.jobmaster.faults.storage`), and a slowdown while a `SlowStorage` window is open.
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
            handles, error, seconds, cpu)``, or ``post("call", epoch, fail, (error,))`` when a
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
        try:
            # sent even for a cancelled snapshot: its transactions stay pending in the sinks and
            # a later checkpoint commits them
            refs = refs + committer.send(queued)
            started, cpu_started = time.time(), time.thread_time()  # (waiting for the stages is part of the write)
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
        handles = None
        error: BaseException | None = None
        try:
            if fail:
                raise StorageError(f"injected storage failure writing {self._task_id} chk-{checkpoint_id}")
            slower = faults.write_slowdown(started)
            if tear is not None:  # TornWrite: reports success, its first file lands partially
                handles, torn = write_torn(self._writer.storage, *tear,
                                           lambda: self._writer.write(snapshot, self._writer.prepare(snapshot)))
                if torn is not None:
                    faults.torn_files.append(torn)
            else:
                handles = self._writer.write(snapshot, self._writer.prepare(snapshot))
            if slower > 1.0:  # SlowStorage: the write takes `slower` times as long
                faults.slowed += 1
                time.sleep((slower - 1.0) * (time.time() - started))
        except Exception as exc:  # StorageError, the storage or committer actor gone
            error = exc
        self._post("written", epoch, checkpoint_id, handles, error, time.time() - started,
                   time.thread_time() - cpu_started)
