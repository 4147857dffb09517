"""`TaskActor`: one task slot of a worker actor — a thin shell around the pure `runtime.core.task.Task`.

A `runtime.ray.worker_actor.WorkerActor` hosts one `TaskActor` per subtask it runs (one, by
default: one actor per subtask); below, "the actor" is this slot and "a call" a call the worker
hands it (`WorkerActor.call`), or a push or credits posted by a subtask of the same worker.

Theory of operation
-------------------
The actor is *synchronous and single-threaded* as far as Ray calls go (so each channel is FIFO,
see `runtime.ray.channels`), and it owns three helper threads: the work thread
(`runtime.ray.work_thread.WorkThread`), the timer thread (`runtime.ray.timers.ThreadTimers`) and
one snapshot-writer thread (`runtime.ray.snapshot_uploads.SnapshotUploads`). The pure `Task` is
touched under the actor's lock only, so by one thread at a time — in the steady state by the
work thread alone: the calls that come often only post mail to it (Flink's mailbox model,
`_drain_inbox`).

* Epochs. An actor hosts one task for one execution attempt at a time. `deploy(epoch, ...)`
  builds a fresh `Task` (restored from a checkpoint or not) — at job start and again after every
  failover, so a global failover only starts new processes for actors that actually died. Every
  call carries its epoch; calls of another epoch (in flight across a failover) are dropped, and
  so are timer callbacks and snapshot writes started in an earlier epoch.
* Work. Inputs (`push`), returned credits (`add_credits`), `start`, checkpoint triggers and
  notifications, the writer thread's "snapshot written" reports and due timers are only
  queued, in arrival order, as mail (`_drain_inbox`) for the *work thread* (`WorkThread`),
  which applies them and *drives* the task (`_drive`): `step()` for one slice of about
  `WORK_SLICE` seconds, sending what `drain_sendable()` allows and returning owed credits at
  the end, and asks itself for the next slice while work is left. The rarer entry points
  (deploy, stall, the final checkpoint's notification, cancel, finish: deployment, faults, the
  job's end) take the lock (the work thread lets them go first), apply the mail first and act;
  they run no step (user code runs on the work thread only: `_hand_over`). So no call waits
  behind more than one slice, and while a job runs no call on the worker's main thread waits
  for a step at all (a slow function's step would hold every subtask's heartbeat of the
  worker): checkpoint triggers reach a busy source within a few milliseconds, and an unaligned
  barrier reaches a busy task's handler while the data before it still sits in the gate. A
  step is bounded in wall time (`runtime.core.pacing.StepPacer` sets `Task.records_per_step`:
  ~2 ms of records, one record until their cost is known or when one takes longer), so that
  holds even when one buffer takes longer than a slice; an unaligned barrier then overtakes
  the rest of the buffer too.
* Liveness. `heartbeat` takes no lock: it answers while a step runs, however long a record
  takes, and reports how long the work thread's current slice has run (`busy_for`), which the
  driver's watchdog counts as progress until it reaches `stall_timeout` (then the task is hung). A rate-limited source is woken
  by a timer, at most every `buffer_timeout`, so it ships batches rather than single records. A
  backpressured task schedules nothing; the credit that ends the backpressure drives it again.
* Ports. Acknowledgements, declines and "source finished" go to the coordinator actor, tagged
  with the epoch, through the worker's `WorkerReports` (one call per worker for its subtasks'
  acknowledgements of a checkpoint), submitted in order by its sender thread; the sinks' commits
  go from this slot's sender thread. So the work thread does not pay for the Ray submissions.
  Snapshots are serialised and written by the writer thread (off the data path); the completion
  re-enters the task as mail.
* Faults. The faults of the plan the task applies itself (a `TaskCrash` freezes it, lost,
  duplicated and late acknowledgements, stalls, failed, torn and slow writes) are in
  `runtime.ray.task_faults.TaskFaultInjection`.
* Failure. An exception from the task (a user function raising `OperatorError`, a protocol
  error) stops the task and is reported by the next heartbeat; the driver fails over.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from checkpoint.io.snapshot_writer import SnapshotWriter
from runtime.core.pacing import StepPacer
from runtime.core.subtask_checkpoint import TaskRestore, TaskSnapshot
from runtime.core.task import Task
from runtime.jobmaster.coordination.task_reports import WriteOutcome, snapshot_written
from runtime.jobmaster.master import TaskFinal
from runtime.jobmaster.result import suppresses_restarts
from runtime.ray.channels import InputChannels, OutputChannels
from runtime.ray.data_links import DataLinkError
from runtime.ray.errors import cause_of
from runtime.ray.services import RemoteCommitter
from runtime.ray.snapshot_uploads import SnapshotUploads
from runtime.ray.storage import open_storage
from runtime.ray.task_faults import TaskFaultInjection
from runtime.ray.timers import ThreadTimers, WallClock
from runtime.ray.work_thread import CallerFirstLock, WorkThread
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CheckpointBarrier,
    CheckpointOptions,
)
from vocabulary.handles import TaskId
from vocabulary.reasons import CheckpointFailureReason
from vocabulary.task_metrics import StepTimes

#: seconds of work per slice before the work thread lets waiting calls in (see `TaskActor._drive`)
WORK_SLICE = 0.002


class _TaskTimers:
    """The task's `Timers`: bound to one epoch. Due callbacks are mail for the work thread,
    which drives the task after applying them (`_continue`)."""

    def __init__(self, actor: TaskActor, epoch: int) -> None:
        self._actor, self._epoch = actor, epoch

    def schedule(self, delay: float, callback: Any) -> Any:
        def fire() -> None:
            if self._actor._live(self._epoch):
                callback()

        return self._actor._timers.schedule(delay, fire)


class TaskActor(TaskFaultInjection):
    """Hosts one task, redeployed per epoch: a slot of a `runtime.ray.worker_actor.WorkerActor`.

    Args:
        graph: the job graph (shipped once through the object store).
        task_id: which task this actor hosts.
        services: ``committer`` (actor handle), ``storage`` (a spec for
            `open_storage`), ``job_id`` and ``global_committer`` (the coordinator commits each
            completed checkpoint: the sinks' notifications commit nothing).
        reports: the worker's `WorkerReports` (acknowledgements, declines, "source finished").
        shares_process: other subtasks run in this process (its CPU is then not this task's alone).
    """

    def __init__(self, graph: Any, task_id: TaskId, services: dict[str, Any], reports: Any,
                 shares_process: bool = False) -> None:
        self._reports = reports
        self._shares_process = shares_process
        self._lock = CallerFirstLock()
        self._work = WorkThread(self._lock, self._continue, on_error=self._fail)
        # due timers are mail too (their callbacks are bound to the epoch that scheduled them)
        self._timers = ThreadTimers(self._lock, on_error=self._fail,
                                    dispatch=lambda fire: self._post("timer", self.epoch, fire))
        #: the task's mailbox, applied in arrival order under the lock (`_drain_inbox`), mostly by
        #: the work thread: ("push", epoch, channel, seq, payloads), ("credits", epoch, credits, buffer size),
        #: ("call", epoch, action, args) for control calls, ("written", epoch, ...) for snapshots
        #: the writer thread finished, ("timer", epoch, fire) for due timers
        self._inbox: deque[tuple[Any, ...]] = deque()
        # submitting a Ray call costs ~0.5-1 ms of CPU: acknowledgements, declines and commits
        # go from this thread (in order), not from the work thread that decided them
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="barrierflow-sender")
        self._clock = WallClock()
        self._node = ray.get_runtime_context().get_node_id()
        self.graph = graph
        self.task_id = task_id
        self.vertex = graph.vertex(task_id.vertex)
        self._coordinator: Any = None
        self._committer = RemoteCommitter(services["committer"], sender=self._sender,
                                          commits_checkpoints=services.get("global_committer", False))
        self._uploads = SnapshotUploads(
            SnapshotWriter(open_storage(services["storage"], graph), services["job_id"], graph.checkpoint_config),
            task_id, self._live, self._post, self._fail)
        self._pace = graph.buffer_timeout
        self._rate_limited = self.vertex.is_rate_limited
        #: barrier events (`trace_barriers`): (wall time, kind, checkpoint id, task, detail), the
        #: simulator's `JobResult.trace` format; kept across epochs, lost if the actor dies
        self._trace: list[tuple[Any, ...]] | None = [] if services.get("trace_barriers") else None
        #: a slow link (`vocabulary.links`): seconds every output waits before it is sent
        self._link_delay: float = services.get("link_delay", 0.0)
        self.epoch = -1
        self.task: Task | None = None
        self._dead = True  # no task deployed yet

    # ------------------------------------------------------------------ deployment

    def deploy(self, epoch: int, restore: TaskRestore | None,
               outputs: dict[int, tuple[Any, int]], inputs: dict[int, tuple[str, Any, int]],
               faults: dict[str, Any], coordinator: Any, committer: Any = None) -> None:
        """Host a fresh task for `epoch`: restored from `restore`, wired to its peers.

        Args:
            outputs: out channel -> (receiver actor, its input channel).
            inputs: input channel -> (sender name, sender actor, its out channel).
            faults: ``crash_after`` (records), ``acks`` (offset -> (lost, copies, delay)),
                ``failed_writes``, ``torn_writes`` (offsets, keep, garble), ``slow_writes`` and
                ``channel_delays`` (windows, wall times): offsets are 0-based from this attempt's start (the driver subtracts
                what earlier attempts counted).
            coordinator: the coordinator actor (replaced if the previous one died).
            committer: the committer service (replaced if the previous one died; None: unchanged).

        Raises:
            Whatever restoring the task raises, a commit of the restored sink transactions
            included (`execute()` then raises it, as on the simulator).
        """
        with self._lock:
            self._timers.clear()
            for item in self._inbox:  # the previous epoch's mail: snapshots written for it are void
                if item[0] == "written":
                    self._on_written(*item[1:], live=False)
            self._inbox.clear()  # (this epoch's senders start after every deploy)
            self._uploads.reset()  # the attempt starts afresh
            self.epoch = epoch
            self._coordinator = coordinator
            if committer is not None:
                self._committer = RemoteCommitter(committer, sender=self._sender,
                                                  commits_checkpoints=self._committer.commits_checkpoints)
            self._dead = False
            self._error: str | None = None
            self._suppress_restarts = False
            self._records = 0
            #: what this attempt's steps cost (calibration), and the process CPU when it began
            self._step_times = StepTimes()
            self._cpu_at_deploy = time.process_time()
            self._arm_faults(faults)
            self._step_pending = False
            #: records per step, from what records cost in this attempt (one until measured)
            self._pacer = StepPacer(self.graph.buffer_size)
            self._wake_timer: Any = None
            self._flush_timer: Any = None
            self.outputs = OutputChannels(outputs, epoch, delay=self._link_delay,
                                          schedule=lambda d, cb: self._timers.schedule(d, self._bound(cb)))
            for out_index, start, end, extra in self._faults.delay_windows:
                self.outputs.spike(out_index, start, end, extra)
            # credits go back from the sender thread, like acknowledgements: a backpressured task
            # returns the most credits, and its work thread is the job's bottleneck
            self.inputs = InputChannels(inputs, str(self.task_id), epoch, threshold=self.graph.credits // 2,
                                        submit=self._submit_credits)
            self.task = None
            try:
                self.task = Task(self.task_id, self.graph, self.vertex, clock=self._clock,
                                 timers=_TaskTimers(self, epoch), ports=self, committer=self._committer,
                                 restore=restore)
                self.task.records_per_step = self._pacer.limit()
            except Exception as exc:
                self._fail(exc)
        if restore is not None and not self._dead:  # the restored sinks' commits applied before the job
            try:  # runs; one that fails fails the task, as on the simulator
                self._committer.drain()
            except Exception as exc:
                self._fail(exc)

    def start(self, epoch: int) -> None:
        """Begin work (once every task of the epoch is deployed): restored output goes first.

        Mail, like the control calls: input from a sibling subtask started before this one may
        already have the work thread in a step of a slow function, and waiting for the lock here
        would hold the worker's main thread — every heartbeat of the worker with it."""
        self._post("call", epoch, self._begin, ())

    def _begin(self) -> None:
        """The work thread's drive after the mail sends the restored output and does the first steps."""

    def _live(self, epoch: int) -> bool:
        return epoch == self.epoch and not self._dead

    # ------------------------------------------------------------------ data path

    def push(self, epoch: int, channel: int, seq: int, payloads: list[Any]) -> None:
        """Input on `channel`; `seq` numbers the first payload (FIFO check). Queued for the work
        thread: the main thread does not wait for the lock (see `_drain_inbox`)."""
        self._post("push", epoch, channel, seq, payloads)

    def add_credits(self, epoch: int, credits: dict[int, int], buffer_size: int | None = None) -> None:
        """Credits returned by receivers: out channel -> buffers, and the buffer size the
        receiver asks for (buffer debloating; None: unchanged). Queued like `push`."""
        self._post("credits", epoch, credits, buffer_size)

    def _post(self, kind: str, epoch: int, *args: Any) -> None:
        """Queue a call for the work thread (the task's mailbox) and wake it."""
        self._inbox.append((kind, epoch, *args))
        self._work.request()

    def _drain_inbox(self) -> None:
        """Under the lock: apply what is queued in the mailbox, in arrival order.

        Data (pushes, credits), control calls (triggers, notifications) and finished snapshot
        writes only queue; the work thread applies them before its next slice, and every entry
        point that takes the lock before its own action, so the task sees all calls in the order
        they arrived (per sender: the order they were sent). Taking the lock instead costs the
        work thread two thread handoffs per call: measured on a slow subtask under backpressure,
        ~20 % of its time for pushes, and later 8 % (unaligned checkpoints every 100 ms) for the
        control calls and writer reports, against 0.3 % without checkpoints. This is Flink's
        mailbox model: one thread runs the task, everything else sends it mail.
        """
        inbox = self._inbox
        while inbox:
            item = inbox.popleft()
            if item[0] == "written":  # runs in any epoch: a stale snapshot's files are discarded
                self._on_written(item[1], *item[2:])
                continue
            if item[0] == "timer":  # a cancelled timer (`clear`) does not fire
                item[2]()
                continue
            if not self._live(item[1]):
                continue
            if item[0] == "call":
                item[2](*item[3])
            elif item[0] == "credits":
                try:
                    for out_index, n in item[2].items():
                        for _ in range(n):
                            self.task.add_credit(out_index, item[3])
                except Exception as exc:  # a protocol error (credit for an unknown channel)
                    self._fail(exc)
            elif self._holds_input():
                self._stalled.append(item[2:])
            else:
                self._accept(*item[2:])

    def _accept(self, channel: int, seq: int, payloads: list[Any]) -> None:
        try:
            self.inputs.check(channel, seq, len(payloads))
            buffers = [p for p in payloads if isinstance(p, Buffer)]
            self.inputs.received(channel, len(buffers), sum(1 for b in buffers if not b.has_batch))
            for payload in payloads:
                if self._trace is not None and isinstance(payload, CheckpointBarrier):
                    self._trace.append((time.time(), "barrier-in", payload.id, str(self.task_id), channel))
                self.task.push(BufferOrEvent(channel, payload))
        except Exception as exc:
            self._fail(exc)

    def _continue(self) -> None:
        """On the work thread, under the lock: the mail, then the next slice of work.

        It drives even when the mail was already applied by a caller that took the lock (a
        credit drained by `stall` must still release a backpressured task). Timer callbacks are
        mail too, so they do not drive the task themselves: this drive follows them."""
        self._drain_inbox()
        self._step_pending = False
        self._drive()

    def _hand_over(self) -> None:
        """From a call on the main thread: send what may go now and leave the steps (user code,
        however slow) to the work thread, so the main thread stays free for the actor's other
        calls (data, control, heartbeats)."""
        if self._dead:
            return
        try:
            self._send()
        except Exception as exc:
            self._fail(exc)
            return
        self._work.request()

    def _drive(self) -> None:
        """Send what may go, do at most one slice of work, return credits, schedule the rest.

        Work happens in slices of about `WORK_SLICE` seconds; what is left is continued on the
        actor's work thread (`WorkThread`), which takes the lock for the next slice only after
        every call waiting for it. While a continuation is pending, other calls (triggers,
        notifications, timers) only feed the task and send — they do no work — so any call
        waits behind at most one slice plus the cheap calls ahead of it. That bounds how long a
        trigger waits at a busy source, and lets an unaligned barrier reach the handler while
        the data before it is still queued in the gate (in-flight data it overtakes), instead
        of waiting until the task has processed it all.
        """
        if self._dead:
            return
        task = self.task
        is_source = task.is_source
        try:
            if not self._step_pending:
                deadline = time.perf_counter() + WORK_SLICE
                while True:
                    self._send()
                    if not task.has_work():
                        break
                    started, cpu_started = time.perf_counter(), time.thread_time()
                    records_out = task.records_out
                    handled = task.step()
                    elapsed = time.perf_counter() - started
                    self._step_times.add(handled, time.thread_time() - cpu_started, elapsed,
                                         task.records_out - records_out)
                    if handled:
                        self._pacer.measured(handled, elapsed)
                        task.records_per_step = self._pacer.limit()
                        self._records += handled
                    if self._faults.crash_due(self._records, task.input_ended):
                        self._freeze()
                        return
                    if (is_source and handled == 0) or time.perf_counter() > deadline:
                        break
            self._send()
        except Exception as exc:  # a user function or protocol error: the task fails
            self._fail(exc)
            return
        self.inputs.return_credits(task.announced_buffer_size)
        self._schedule_continuation()
        if task.pending_output() and self._flush_timer is None:
            self._flush_timer = self._timers.schedule(self._pace, self._bound(self._on_flush))

    def _bound(self, callback: Any) -> Any:
        """A timer callback that only runs in the epoch it was scheduled in."""
        epoch = self.epoch

        def fire() -> None:
            if self._live(epoch):
                callback()

        return fire

    def _submit_credits(self, send: Callable[..., Any], *args: Any) -> None:
        """Send credits from the sender thread (`_send_credits`)."""
        self._sender.submit(self._send_credits, self.epoch, send, args)

    def _send_credits(self, epoch: int, send: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """On the sender thread. A link that cannot deliver the credits to a live sender
        (`DataLinkError`) fails this task: its sender would wait for them forever."""
        try:
            send(*args)
        except DataLinkError as exc:
            self._post("call", epoch, self._fail, (exc,))

    def _send(self) -> None:
        drained = self.task.drain_sendable()
        if drained:
            self.outputs.send(drained)

    def _on_flush(self) -> None:
        self._flush_timer = None
        self.task.flush()

    def _schedule_continuation(self) -> None:
        """Ask the work thread for the next slice (a rate-limited source: a wake-up timer)."""
        task = self.task
        if self._step_pending or self._wake_timer is not None or not task.has_work():
            return
        ready = task.next_ready_time()  # None unless a rate-limited source
        if ready is not None or self._rate_limited:
            # rate limited: wake when records are due, at most every buffer_timeout
            now = time.time()
            delay = max((ready or now) - now, self._pace if self._rate_limited else 0.0)
            self._wake_timer = self._timers.schedule(delay, self._bound(self._on_wake))
            return
        self._step_pending = True
        self._work.request()

    def _on_wake(self) -> None:
        self._wake_timer = None

    # ------------------------------------------------------------------ control path

    # Control calls are mail for the work thread (see `_drain_inbox`), applied after the input
    # that arrived before them; the work thread drives the task afterwards.

    def trigger_source(self, epoch: int, checkpoint_id: int, timestamp: float, unaligned: bool,
                       alignment_timeout: float | None, completed: int | None = None,
                       forced_aligned: bool = False) -> None:
        """Inject barrier `checkpoint_id`; `completed`: a completed checkpoint the coordinator did
        not notify this source of (it has no completion listener), applied first."""
        options = CheckpointOptions.of_trigger(unaligned, alignment_timeout, forced_aligned)
        self._post("call", epoch, self._on_trigger, (checkpoint_id, timestamp, options, completed))

    def notify_complete(self, epoch: int, checkpoint_id: int, final: bool = False) -> None:
        """Checkpoint `checkpoint_id` completed (`final`: the job's final checkpoint).

        The final checkpoint's notification is applied before the call returns, so the driver
        knows the sinks committed once every task's call returned."""
        if not final:
            self._post("call", epoch, self._on_complete, (checkpoint_id, False))
            return
        with self._lock:
            self._drain_inbox()
            if self._live(epoch):
                self._on_complete(checkpoint_id, True)
                self._hand_over()

    def notify_aborted(self, epoch: int, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self._post("call", epoch, self._on_aborted, (checkpoint_id, reason))

    def _on_trigger(self, checkpoint_id: int, timestamp: float, options: CheckpointOptions,
                    completed: int | None) -> None:
        try:
            self.task.trigger_source_checkpoint(checkpoint_id, timestamp, options, completed)
        except Exception as exc:
            self._fail(exc)

    def _on_complete(self, checkpoint_id: int, final: bool) -> None:
        try:
            self.task.notify_checkpoint_complete(checkpoint_id, final=final)
            self._uploads.completed(self.task_id, checkpoint_id)
        except Exception as exc:
            self._fail(exc)

    def _on_aborted(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.task.notify_checkpoint_aborted(checkpoint_id, reason)
        self._uploads.aborted(self.task_id, checkpoint_id)

    # ------------------------------------------------------------------ TaskPorts
    # (`acknowledge`, which applies the plan's acknowledgement faults: `TaskFaultInjection`)

    def decline(self, task_id: TaskId, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self._reports.decline(self._coordinator, self.epoch, task_id, checkpoint_id, reason)

    def source_finished(self, task_id: TaskId) -> None:
        self._reports.source_finished(self._coordinator, self.epoch, task_id)

    def buffer_consumed(self, task_id: TaskId, input_channel: int) -> None:
        self.inputs.consumed(input_channel)

    def completion_learned(self, task_id: TaskId, checkpoint_id: int) -> None:
        if self._uploads.keeps_files:  # else the writer keeps nothing per checkpoint: spare the wake-up
            self._uploads.completed(task_id, checkpoint_id)

    def wake(self, task_id: TaskId) -> None:
        """Nothing to do: a due timer is mail, and the work thread drives the task after it."""

    def write_snapshot(self, snapshot: TaskSnapshot) -> None:
        fail, tear = self._faults.write()
        if self._trace is not None:  # the write (upload) starts; detail: the synchronous snapshot's time
            self._trace.append((time.time(), "snapshot", snapshot.checkpoint_id, str(snapshot.task_id),
                                snapshot.sync_time))
        staged = self._committer.take_staged()  # the sinks' pre-commits of this snapshot
        self._uploads.upload(self.epoch, self.task, snapshot, staged, self._committer, self._faults, fail, tear)

    def _on_written(self, epoch: int, checkpoint_id: int, outcome: WriteOutcome, seconds: float, cpu: float,
                    live: bool = True) -> None:
        """Under the lock: the writer thread finished a snapshot in `seconds` (`cpu` of them on
        its CPU: serialising and writing, which takes the GIL from the work thread); the task
        acknowledges or declines it (`snapshot_written`), or its files are void (`live` False, or
        its epoch ended)."""
        snapshot_written(self.task, checkpoint_id, outcome, seconds, cpu, self._uploads.discard,
                         live=live and self._live(epoch))

    # ------------------------------------------------------------------ failure and status

    def _fail(self, exc: BaseException) -> None:
        if self._dead:
            return
        self._dead = True
        exc = cause_of(exc)  # what a Ray call in the task raised, without Ray's frames
        self._suppress_restarts = suppresses_restarts(exc)  # (before the error: `heartbeat` reads both unlocked)
        self._error = f"task {self.task_id} failed: {exc}"
        self._timers.clear()

    def cancel(self) -> dict[str, Any]:
        """Failover: stop the current task at once (it is redeployed or the job ends); what this
        attempt counted (`_counts`), final now."""
        with self._lock:
            self._dead = True
            self._timers.clear()
            return self._counts()

    def _counts(self) -> dict[str, Any]:
        """What this attempt counted, for the run's `FaultSchedule` (kept by the driver)."""
        task = self.task
        return {
            "records": self._records,
            "input_ended": task is not None and task.input_ended,
            "source_records": task.records_in if task is not None and task.is_source else 0,
            **self._faults.counts(),
        }

    def heartbeat(self) -> dict[str, Any]:
        """Liveness and progress of the current epoch, polled by the driver.

        It takes no lock: it answers while the work thread is in a step, however long a record
        takes (a call that waited for the lock made a 51 s step look like a hung task). What it
        reads is a few fields the work thread assigns; each read is atomic, and `frozen` and
        `error` are read before the counts, which are final once either is set."""
        frozen, error, suppress = self._frozen, self._error, self._suppress_restarts
        task, outputs = self.task, self.outputs
        return {
            **self._counts(),
            "epoch": self.epoch,
            "node": self._node,
            "finished": task is not None and task.is_finished,
            "state": task.state.value if task is not None else None,
            "error": error,
            "suppress_restarts": suppress,
            "frozen": frozen,
            "calls": outputs.calls,
            "local_calls": outputs.local_calls,
            #: seconds the work thread has been in its current slice (None: idle): a record in
            #: progress (`runtime.jobmaster.lifecycle.watchdog`)
            "busy_for": self._work.busy_for(),
        }

    def _finished_step_times(self) -> StepTimes:
        """This attempt's step costs, with the process's CPU since deployment (when the worker
        hosts this task alone: its calls, serialisation and helper threads count; with sibling
        subtasks the process's CPU is not this task's, so none) and the calls it sent."""
        times = self._step_times
        times.cpu = None if self._shares_process else time.process_time() - self._cpu_at_deploy
        times.calls = self.outputs.calls
        times.local_calls = self.outputs.local_calls
        times.max_unconsumed = self.inputs.max_unconsumed
        times.buffers_as_records = self.inputs.buffers_as_records
        times.timers, times.timer_lateness = self._timers.fired, self._timers.lateness
        return times

    def close(self) -> None:
        """The worker hosts another job's subtask in this slot (`WorkerActor.rehost`): stop at
        once and let every thread of this one end (what they were given is still done)."""
        with self._lock:
            self._dead = True
            self._timers.close()
            self._work.close()
        self._sender.shutdown(wait=False)
        self._uploads.close()

    def finish(self) -> dict[str, Any]:
        """After the job finished: wait for this task's commits, report final state and metrics."""
        self._committer.drain()
        with self._lock:
            self._dead = True
            self._timers.close()
            self._work.close()
            return {
                "final": TaskFinal.of(self.task_id, self.task),
                "records_in": self.task.records_in,
                "trace": self._trace or [],
                "step_times": self._finished_step_times(),
                "counts": self._counts(),
            }
