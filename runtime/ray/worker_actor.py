"""`WorkerActor`: one Ray actor hosting the `TaskActor`s of several subtasks (task slots).

Slots. The executor packs subtasks into workers (`runtime.ray.slots.assign_slots`,
`slots_per_worker`); each hosted subtask is a `TaskActor` — its own lock, work thread, mailbox,
timers and snapshot writer, exactly as when it had an actor of its own — so a worker changes the
transport, not the task. Calls address a subtask (`SlotHandle`: `call(task, method, *args)`);
the worker's main thread executes them in each caller's submission order (the channels' FIFO
guarantee), and the data calls only post to the subtask's mailbox, as before. With
`data_transport="socket"` (the default) the data calls from other workers come instead as frames
on the worker's `DataInbox` (`runtime.ray.data_links`), one thread per sending process, each in
that connection's order, into the same `send`.

In-process channels. `deploy` replaces the routes to subtasks of this worker by `LocalSlot`s:
a push or returned credits go straight into the peer's mailbox (`runtime.ray.channels`).

Control calls, batched per worker. The coordinator sends one `control` call per worker with the
triggers, completion and abort notifications it decided at one moment for the worker's
subtasks; they are applied in order. The subtasks' acknowledgements go back through one
`WorkerReports` per worker, in one `report` call: see there for when it sends.

Death. Killing the worker kills every subtask it hosts; the driver fails the job over globally
(as for any task), and replaces the whole worker.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from runtime.jobmaster.result import CONTROL_FRAMES, CONTROL_ITEM, DATA_FRAMES, REPORTS_SENT, GcPauses
from runtime.ray.data_links import CONTROL, DataInbox
from runtime.ray.heap import freeze_startup_heap, gc_pauses
from runtime.ray.slots import SENT_METHODS, LocalSlot
from runtime.ray.task_actor import TaskActor
from runtime.ray.timers import ThreadTimers
from vocabulary.handles import TaskAcknowledgement, TaskId
from vocabulary.reasons import CheckpointFailureReason

log = logging.getLogger("barrierflow.ray")

#: seconds a worker holds an acknowledgement waiting for its sibling subtasks' of the same
#: checkpoint (see `WorkerReports`)
ACK_FLUSH_DELAY = 0.1

#: what `call` may invoke on a hosted subtask (the `TaskActor` entry points)
SLOT_METHODS = frozenset({
    "start", "push", "add_credits", "trigger_source", "notify_complete", "notify_aborted", "stall", "hang",
    "delay_channel", "slow_writes", "cancel", "freeze", "heartbeat", "finish",
})


class WorkerReports:
    """A worker's acknowledgements, declines and "source finished" reports to the coordinator:
    one `report` call carries all that is pending, in the order it was reported.

    When it sends: an acknowledgement is held until every subtask of the worker acknowledged
    that checkpoint, or `ACK_FLUSH_DELAY` after the first held one, whichever comes first; a
    decline or "source finished" sends at once, with what is held before it. Waiting for the
    siblings never delays a checkpoint: it completes only once *every* task acknowledged, so the
    worker's last acknowledgement is needed anyway and goes the moment it is made. The timer
    only bounds what a sibling that will never acknowledge (a lost acknowledgement, a declined
    or crashed subtask) holds back. The price: the coordinator records the held acknowledgements'
    arrival times later (`end_to_end_duration` per subtask).

    With one subtask per worker every acknowledgement completes its set: one call per
    acknowledgement, as without slots.
    """

    def __init__(self, tasks: list[TaskId]) -> None:
        self._tasks = frozenset(tasks)
        self._lock = threading.RLock()
        # submitting a Ray call costs ~0.5-1 ms of CPU: not on the subtasks' work threads
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="barrierflow-reports")
        self._timers = ThreadTimers(self._lock)
        self._timer: Any = None
        self._items: list[tuple[Any, ...]] = []
        self._epoch: int | None = None
        self._coordinator: Any = None
        #: checkpoint id -> the subtasks that acknowledged it (dropped once all did)
        self._acked: dict[int, set[TaskId]] = {}
        #: `report` calls sent
        self.calls = 0

    def ack(self, coordinator: Any, epoch: int, ack: TaskAcknowledgement) -> None:
        with self._lock:
            self._add(coordinator, epoch, ("ack", epoch, ack))
            acked = self._acked.setdefault(ack.checkpoint_id, set())
            acked.add(ack.task_id)
            if acked >= self._tasks:
                del self._acked[ack.checkpoint_id]
                self._flush("all acked")
            else:
                if len(self._acked) > 64:  # ids that never completed here (lost, declined)
                    del self._acked[min(self._acked)]
                if self._timer is None:
                    self._timer = self._timers.schedule(ACK_FLUSH_DELAY, self._on_timer)

    def decline(self, coordinator: Any, epoch: int, task_id: TaskId, checkpoint_id: int,
                reason: CheckpointFailureReason) -> None:
        with self._lock:
            self._add(coordinator, epoch, ("decline", epoch, task_id, checkpoint_id, reason))
            self._flush("at once")

    def source_finished(self, coordinator: Any, epoch: int, task_id: TaskId) -> None:
        with self._lock:
            self._add(coordinator, epoch, ("finished", epoch, task_id))
            self._flush("at once")

    def _add(self, coordinator: Any, epoch: int, item: tuple[Any, ...]) -> None:
        # one coordinator per attempt (a new one means a failover, so a new epoch); each subtask
        # holds its own copy of its handle
        if epoch != self._epoch:  # what an earlier attempt held is void (the coordinator drops it anyway)
            self._items, self._acked = [], {}
            self._epoch, self._coordinator = epoch, coordinator
        self._items.append(item)

    def close(self) -> None:
        """The worker hosts another job: its threads end once they sent what they were given."""
        self._timers.close()
        self._sender.shutdown(wait=False)

    def _on_timer(self) -> None:
        self._timer = None
        self._flush("timer")

    def _flush(self, cause: str) -> None:
        """Send what is held; `cause` ("all acked", "timer", "at once") is counted by the coordinator."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._items:
            items, self._items = self._items, []
            self._sender.submit(self._coordinator.report.remote, items, cause)
            self.calls += 1


def _ignore(*args: Any) -> None:
    """A late call to a subtask of an earlier job."""


class WorkerActor:
    """Hosts the subtasks `task_ids` (one `TaskActor` each). Wrapped with `ray.remote` by the executor.

    Args:
        graph: the job graph.
        index: this worker's number (`SlotHandle.worker_index`).
        task_ids: the subtasks it hosts.
        services: per subtask, the `TaskActor` services.
    """

    def __init__(self, graph: Any, index: int, task_ids: list[TaskId], services: dict[TaskId, dict[str, Any]]) -> None:
        self._slots: dict[TaskId, TaskActor] = {}
        #: subtasks an earlier job hosted here (a late call to one of them is dropped)
        self._former: set[TaskId] = set()
        #: where data calls come as socket frames (`data_transport="socket"`), opened on first ask
        self._inbox: DataInbox | None = None
        self._host(graph, index, task_ids, services)

    def _host(self, graph: Any, index: int, task_ids: list[TaskId], services: dict[TaskId, dict[str, Any]]) -> None:
        self.index = index
        self.reports = WorkerReports(task_ids)
        shared = len(task_ids) > 1
        self._slots = {t: TaskActor(graph, t, services[t], reports=self.reports, shares_process=shared)
                       for t in task_ids}
        #: subtask method -> the calls (and control items) that invoked it (`calls`)
        self._received: Counter[str] = Counter()
        #: the `control` calls of those that came as frames
        self._control_frames = 0
        if self._inbox is not None:
            self._inbox.frames = 0
        freeze_startup_heap()

    def rehost(self, graph: Any, index: int, task_ids: list[TaskId], services: dict[TaskId, dict[str, Any]]) -> None:
        """Host another job's subtasks (`runtime.ray.worker_pool`): the ones hosted so far are
        closed and forgotten, and the worker is as `__init__` left it, its process aside.

        A worker that cannot host them exits (the driver's next call finds it dead and starts a
        fresh one, whose constructor raises what failed here, as a worker that never ran a job)."""
        for slot in self._slots.values():
            slot.close()
        self.reports.close()
        self._former |= self._slots.keys()
        try:
            self._host(graph, index, task_ids, services)
        except Exception:
            log.exception("barrierflow ray: worker %d could not host the next job's subtasks; it exits", index)
            ray.actor.exit_actor()

    def deploy(self, task_id: TaskId, epoch: int, restore: Any, outputs: dict[int, tuple[Any, int]],
               inputs: dict[int, tuple[str, Any, int]], faults: dict[str, Any], coordinator: Any,
               committer: Any = None) -> None:
        """`TaskActor.deploy`, with the routes to this worker's own subtasks made in-process."""
        outputs = {i: (self._local(handle), channel) for i, (handle, channel) in outputs.items()}
        inputs = {i: (name, self._local(handle), out) for i, (name, handle, out) in inputs.items()}
        self._slots[task_id].deploy(epoch, restore, outputs, inputs, faults, coordinator, committer)

    def _local(self, handle: Any) -> Any:
        if getattr(handle, "worker_index", None) == self.index:
            return LocalSlot(self._slots[handle.task_id])
        return handle

    def call(self, task_id: TaskId, method: str, *args: Any) -> Any:
        """`method(*args)` of the subtask `task_id` (a `TaskActor` entry point)."""
        bound = self._slot_method(task_id, method, SLOT_METHODS, "")
        self._received[method] += 1
        return bound(*args)

    def data_address(self) -> tuple[str, int, bytes]:
        """(host, port, token) of this worker's `DataInbox`, opened on the first ask: where a
        sender's `DataLink` connects, and what it must send first."""
        if self._inbox is None:  # (only Ray's one thread of this synchronous actor runs it)
            self._inbox = DataInbox(self.deliver_frame, ray.util.get_node_ip_address())
        return (*self._inbox.address, self._inbox.token)

    def deliver_frame(self, call: tuple[Any, str, Any]) -> None:
        """A call that came on the inbox (on its connection's thread): a data call (`send`), or
        the coordinator's control messages (`(None, CONTROL, items)`: `control`)."""
        if call[1] == CONTROL:
            self._control_frames += 1
            self.control(call[2])
        else:
            self.send(call)

    @ray.method(num_returns=0)
    def send(self, call: tuple[TaskId, str, tuple[Any, ...]]) -> None:
        """`call`: (subtask, method, args), one of `SENT_METHODS`, whose result no one reads. One
        argument and no result object: Ray serialises each argument of a call apart and makes a
        result for it, a quarter of a small call's CPU on each side (measured: ~380 µs a call
        with six arguments and a result, ~290 µs packed without), and data calls are most calls."""
        task_id, method, args = call
        bound = self._slot_method(task_id, method, SENT_METHODS, " to send")
        self._received[method] += 1
        bound(*args)

    def _slot_method(self, task_id: TaskId, method: str, allowed: frozenset[str], what: str) -> Any:
        """The subtask's bound `method`, if it is one of `allowed` (else an error naming it); a
        no-op for a subtask of an earlier job that is not hosted now (a call that was late)."""
        if method not in allowed:
            raise AttributeError(f"worker {self.index}: no subtask method {method!r}{what}")
        slot = self._slots.get(task_id)
        if slot is None and task_id in self._former:
            return _ignore
        if slot is None:
            raise KeyError(f"worker {self.index} hosts no subtask {task_id}")
        return getattr(slot, method)

    def control(self, items: list[tuple[TaskId, str, tuple[Any, ...]]]) -> None:
        """The coordinator's control messages for this worker's subtasks, in order:
        (subtask, method, args) with `trigger_source`, `notify_complete` or `notify_aborted`."""
        self._received["control"] += 1
        for task_id, method, args in items:
            bound = self._slot_method(task_id, method, SLOT_METHODS, "")
            self._received[CONTROL_ITEM + method] += 1
            bound(*args)

    def calls(self) -> dict[str, int]:
        """The calls this worker received, by the subtask method they invoked (a `control` call
        counts as "control", each of its items as `CONTROL_ITEM` + its method), the `report`
        calls it sent, as `REPORTS_SENT`, and of those it received, the data calls that came as
        socket frames, as `DATA_FRAMES`, and the `control` calls, as `CONTROL_FRAMES`
        (`JobMetrics.worker_calls`)."""
        frames = {DATA_FRAMES: self._inbox.frames - self._control_frames,
                  CONTROL_FRAMES: self._control_frames} if self._inbox is not None else {}
        return {**self._received, REPORTS_SENT: self.reports.calls, **frames}

    def gc_pauses(self) -> GcPauses:
        """This worker process's full garbage collections (`JobMetrics.gc_pauses`)."""
        return gc_pauses()
