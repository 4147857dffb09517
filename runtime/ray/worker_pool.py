"""Idle worker and service actors kept between jobs, and the epochs that keep their jobs apart.

Starting a worker actor costs a process start: ~0.8 s of CPU for Python, Ray and its core
worker, and ~0.25 s more to import barrierflow (measured on 2 cores), against a few milliseconds
to host a new job's subtasks in a process that is already up. So, as a Flink session cluster keeps
its TaskManagers between jobs, a driver process that stays connected to Ray keeps the workers of
a job that ended cleanly (`IDLE_WORKERS`) and the next job it runs hosts its subtasks on them
(`WorkerActor.rehost`) instead of starting new ones; so with its coordinator (`CoordinatorActor.serve`),
committer and in-memory storage (`ServesOneJob.serve`). A job that failed, or whose executor started Ray itself (and
stops it), keeps none. What a reused process keeps is what any long-lived worker
keeps: its imported modules and their module-level state (a Flink TaskManager's static fields).

Epochs. Every call to a subtask carries the epoch it belongs to, and a subtask drops anything of
another epoch. A call of an earlier job may still be on its way to a reused worker when the next
job's subtasks are deployed on it (credits returned after a sender finished, a late copy of a
control message): so epochs are numbered for the whole driver process (`next_epoch`), never twice,
and such a call can only carry an epoch the new subtasks never have. A service's calls carry the
job's token instead (its first epoch, `ServiceHandle`), checked the same way.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

import ray
from ray.exceptions import RayError

log = logging.getLogger("barrierflow.ray")

#: idle workers kept at most with one set of actor options (each is a process holding its
#: memory): a larger job's extra workers are killed when it ends
MAX_IDLE_WORKERS = 4
#: idle services of each kind (coordinator, committer, in-memory storage) kept at most on a node
MAX_IDLE_SERVICES = 1
#: seconds an idle actor may take to start serving a new job (it is up: milliseconds)
SERVE_TIMEOUT = 30.0

_epochs = itertools.count()
_epochs_lock = threading.Lock()


def next_epoch() -> int:
    """An epoch no other attempt of any job of this driver process has had."""
    with _epochs_lock:
        return next(_epochs)


def _session() -> tuple[str, str]:
    """Which Ray connection this is: a worker of an earlier connection (Ray shut down and started
    again) is gone even if its handle is still held."""
    context = ray.get_runtime_context()
    return context.get_node_id(), context.get_job_id()


class IdleActors:
    """Actors of ended jobs, by what they are and the options they were created with (`key`).

    Args:
        capacity: actors kept at most under one key.
        session: which Ray connection this process has now (a worker kept in another is gone).
    """

    def __init__(self, capacity: int, session: Callable[[], Hashable] = _session) -> None:
        self.capacity = capacity
        self._session = session
        self._lock = threading.Lock()
        self._idle: list[tuple[Hashable, Hashable, Any]] = []

    def __len__(self) -> int:
        return len(self._idle)

    def actors(self) -> list[Any]:
        """The idle actors, oldest first."""
        with self._lock:
            return [actor for _, _, actor in self._idle]

    def take(self, key: Hashable) -> Any | None:
        """An idle actor kept under `key` in this Ray connection (None: none left). It may have
        died meanwhile: its next call raises `RayActorError`."""
        session = self._session()
        with self._lock:
            self._idle = [entry for entry in self._idle if entry[0] == session]  # the others are gone
            for i, (_, kept_key, actor) in enumerate(self._idle):
                if kept_key == key:
                    del self._idle[i]
                    return actor
        return None

    def take_serving(self, key: Hashable, *args: Any) -> Any | None:
        """An idle actor kept under `key` that now serves a new job: its `serve(*args)` returned
        (None: none is left; one that died while idle, or whose `serve` raised, is killed and the
        next one tried)."""
        while (actor := self.take(key)) is not None:
            try:
                ray.get(actor.serve.remote(*args), timeout=SERVE_TIMEOUT)
                return actor
            except RayError as exc:
                log.info("barrierflow ray: an idle %s cannot serve the next job: %s", key, str(exc).splitlines()[0])
                kill_quietly(actor)
        return None

    def keep_or_kill(self, key: Hashable, actors: list[Any]) -> None:
        """`keep` the actors; kill the ones there is no room for."""
        for actor in self.keep(key, actors):
            kill_quietly(actor)

    def keep(self, key: Hashable, actors: list[Any]) -> list[Any]:
        """Keep `actors` (idle, alive, all under `key`) for later jobs, up to the capacity under
        `key`; the ones not kept are returned (for the caller to kill)."""
        session = self._session()
        with self._lock:
            self._idle = [entry for entry in self._idle if entry[0] == session]
            room = max(0, self.capacity - sum(1 for entry in self._idle if entry[1] == key))
            self._idle.extend((session, key, actor) for actor in actors[:room])
            return actors[room:]

    def clear(self) -> list[Any]:
        """Forget every idle actor; they are returned (for the caller to kill)."""
        with self._lock:
            idle, self._idle = self._idle, []
        return [actor for _, _, actor in idle]


def kill_quietly(actor: Any) -> None:
    """`ray.kill` an actor that may already be gone."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception as exc:  # already gone
        log.debug("barrierflow ray: killing an actor that is gone: %s", exc)


#: this driver process's idle workers
IDLE_WORKERS = IdleActors(MAX_IDLE_WORKERS)
#: this driver process's idle committer and in-memory storage services
IDLE_SERVICES = IdleActors(MAX_IDLE_SERVICES)
