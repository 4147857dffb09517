"""Task slots: which subtasks share a worker actor, and the handles that address one of them.

A worker actor (`runtime.ray.worker_actor.WorkerActor`) hosts `slots_per_worker` subtasks, one
per slot (Flink's TaskManager slots). The assignment is Flink's slot sharing in spirit: subtasks
are taken *pipeline by pipeline* — subtask 0 of every vertex in topological order, then subtask
1 of every vertex, ... — and cut into workers of `slots_per_worker`. So the subtasks i of
consecutive vertices share a worker, and a forward edge between them is an in-process channel;
with `slots_per_worker` = the number of vertices a worker is exactly one of Flink's shared slots.
The default, `slots_per_worker="pipeline"`, is that whatever the parallelisms: worker i holds
subtask i of every vertex, so there are as many workers as the job's highest parallelism.
`slots_per_worker=1` is one actor per subtask.

`SlotHandle` is what the driver, the coordinator and a sender hold for one subtask: a worker
actor handle plus the subtask, so `handle.heartbeat.remote(*args)` is
`worker.call.remote(task, "heartbeat", *args)`; the data path's calls, whose results no one reads
(`SENT_METHODS`: `push`, `add_credits`), are `worker.send.remote((task, "push", args))`: one
argument, no result object (with `data_transport="socket"`, a frame on the sending process's
connection to the worker instead: `runtime.ray.data_links`).
`LocalSlot` is the same for a subtask in the caller's own worker: the call goes straight into that
subtask's mailbox (no Ray call), through the same methods a remote call reaches.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from typing import Any, Literal

from runtime.ray.data_links import DEFAULT_DATA_TRANSPORT, link_to
from vocabulary.handles import TaskId

#: subtask methods called for their effect only, on the data path: sent packed, without a result
SENT_METHODS = frozenset({"push", "add_credits"})

#: `slots_per_worker` of one worker per pipeline (subtask i of every vertex in worker i): the default
PIPELINE = "pipeline"

#: what `slots_per_worker` may be
Slots = int | Literal["pipeline"]


class SlotsError(ValueError):
    """An invalid `slots_per_worker`."""


def check_slots(slots_per_worker: Any) -> Slots:
    """Raises: SlotsError naming the option unless `slots_per_worker` is an int >= 1 or "pipeline"."""
    if isinstance(slots_per_worker, str) and slots_per_worker == PIPELINE:
        return PIPELINE
    if isinstance(slots_per_worker, bool) or not isinstance(slots_per_worker, int) or slots_per_worker < 1:
        raise SlotsError(f"slots_per_worker must be an int >= 1 (1: one actor per subtask) or {PIPELINE!r} (one "
                         f"worker per pipeline, the default), got {slots_per_worker!r}")
    return slots_per_worker


def assign_slots(task_ids: list[TaskId], slots_per_worker: Slots) -> list[list[TaskId]]:
    """The subtasks of each worker: pipeline by pipeline (subtask index first, then the vertices
    in the topological order of `task_ids`), `slots_per_worker` at a time; "pipeline": worker i
    holds subtask i of every vertex that has one (Flink's slot sharing)."""
    slots_per_worker = check_slots(slots_per_worker)
    order = {task: i for i, task in enumerate(task_ids)}
    pipelines = sorted(task_ids, key=lambda t: (t.subtask, order[t]))
    if slots_per_worker == PIPELINE:
        return [list(pipeline) for _, pipeline in groupby(pipelines, key=lambda t: t.subtask)]
    return [pipelines[i:i + slots_per_worker] for i in range(0, len(pipelines), slots_per_worker)]


class PrefixedCall:
    """`.remote(*args)` of one method addressed through a generic entry point (a slot's, a
    service's): `fn(*prefix, *args)`."""

    __slots__ = ("_fn", "_prefix")

    def __init__(self, fn: Callable[..., Any], prefix: tuple[Any, ...]) -> None:
        self._fn, self._prefix = fn, prefix

    def remote(self, *args: Any) -> Any:
        return self._fn(*self._prefix, *args)


class _Sent:
    """`.remote(*args)` of a `SENT_METHODS` method of one slot: `send((task_id, method, args))`."""

    __slots__ = ("_send", "_task_id", "_method")

    def __init__(self, send: Callable[..., Any], task_id: TaskId, method: str) -> None:
        self._send, self._task_id, self._method = send, task_id, method

    def remote(self, *args: Any) -> None:
        self._send((self._task_id, self._method, args))


class SlotHandle:
    """One subtask on a worker actor: `handle.<method>.remote(*args)` calls
    `worker.call.remote(task_id, method, *args)` (`SENT_METHODS`: `worker.send.remote((task_id,
    method, args))`; `deploy`: `worker.deploy.remote(task_id, *args)`,
    which makes the routes to the worker's own subtasks in-process). Picklable (it travels in
    deployments)."""

    local = False

    def __init__(self, worker: Any, worker_index: int, task_id: TaskId, data_transport: str = DEFAULT_DATA_TRANSPORT) -> None:
        self.worker, self.worker_index, self.task_id = worker, worker_index, task_id
        self.data_transport = data_transport

    def __getattr__(self, name: str) -> PrefixedCall | _Sent:
        if name.startswith("_") or name in ("worker", "worker_index", "task_id", "data_transport"):
            raise AttributeError(name)  # (unpickling looks attributes up before they are set)
        if name == "deploy":
            return PrefixedCall(self.worker.deploy.remote, (self.task_id,))
        if name in SENT_METHODS:
            send = link_to(self.worker).send if self.data_transport == "socket" else self.worker.send.remote
            sent = _Sent(send, self.task_id, name)
            setattr(self, name, sent)  # the data path asks for it per buffer: found at once from now on
            return sent
        return PrefixedCall(self.worker.call.remote, (self.task_id, name))

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("worker", "worker_index", "task_id", "data_transport")}

    def __repr__(self) -> str:
        return f"SlotHandle({self.task_id} on worker {self.worker_index})"


class _LocalCall:
    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    def remote(self, *args: Any) -> None:
        self._fn(*args)


class LocalSlot:
    """A subtask in the caller's own worker: `push` and `add_credits` post to its mailbox
    directly (the same `TaskActor` methods a Ray call reaches, so FIFO order, sequence checks and
    credits are the remote channel's)."""

    local = True

    def __init__(self, slot: Any) -> None:
        self.push = _LocalCall(slot.push)
        self.add_credits = _LocalCall(slot.add_credits)
