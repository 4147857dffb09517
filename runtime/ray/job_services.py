"""The job-wide service actors of a Ray job, watched by the driver: what a dead one means.

`CommitterService` (the sinks' external system) and, for checkpoints kept in memory,
`BlobStoreService` (`runtime.ray.services`) outlive task restarts, so no task failure reveals
their death: calls to them fail inside the tasks and the coordinator, or only when the job ends.
The driver pings each about once a second (`PING_INTERVAL`, one call in flight each) and decides:

* A committer kept beside the checkpoints (`DurableCollectCommitter`: every stage and commit is a
  file) loses nothing with its process: a new service reloads it from its folder and the job
  fails over (tasks and the coordinator are redeployed with the new one; stages the dead one
  never wrote fail their tasks, so nothing is committed without its records).
* A committer in memory took the sinks' output with it: the job fails, saying so.
* The in-memory checkpoint storage took every checkpoint with it: the job fails, saying so (a
  restore would have nothing to restore, and the sinks' committed output is ahead of any restart).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.committer.durable import DurableCollectCommitter
from runtime.jobmaster.committer.file_publisher import register_publishers
from runtime.ray.errors import describe
from runtime.ray.service_deaths import memory_committer_died, memory_storage_died
from runtime.ray.services import SERVICE_CPUS, BlobStoreService, CommitterService, ServiceHandle
from runtime.ray.worker_pool import IDLE_SERVICES, kill_quietly

log = logging.getLogger("barrierflow.ray")

#: seconds between pings of a service: a death is noticed within about this (and a call's time)
PING_INTERVAL = 1.0

# No task events (see runtime.ray.executor).
_Committer = ray.remote(enable_task_events=False)(CommitterService)
_BlobStore = ray.remote(enable_task_events=False)(BlobStoreService)


@dataclass(frozen=True)
class ServiceDeath:
    """A service actor died: `fatal` fails the job, else it was replaced and the job fails over."""

    message: str
    cause: BaseException
    fatal: bool


class JobServices:
    """Starts the job's service actors, pinned to the driver's node (or takes idle ones an
    earlier job left, `runtime.ray.worker_pool`), and watches them (`poll`).

    Args:
        committer: the sinks' committer to serve (a durable one is reloaded from its folder if
            its service dies); None: a new one in memory.
        memory_storage: the job keeps checkpoints in memory: start a `BlobStoreService`.
        pin: the scheduling strategy that keeps them on the driver's node.
        graph: the job's graph (a reloaded committer publishes its sinks' files again).
        token: the job's token (its first epoch): every call of the job carries it (`ServiceHandle`).
        reuse: take idle services of an earlier job, and leave these to a later one (`keep`).
    """

    def __init__(self, committer: CollectCommitter | None, memory_storage: bool, pin: Any, graph: Any,
                 token: int = 0, reuse: bool = False) -> None:
        self._seed = committer
        self._pin = pin
        self._graph = graph
        self._token = token
        self._reuse = reuse
        self.committer: ServiceHandle | None = self._start_committer(committer)
        self.blob_store: ServiceHandle | None = None
        if memory_storage:
            self.blob_store = self._take("storage", ()) or ServiceHandle(
                _BlobStore.options(num_cpus=SERVICE_CPUS, scheduling_strategy=pin).remote(token), token)
        #: service name -> its ping in flight, and when the last one was sent
        self._pings: dict[str, Any] = {}
        self._pinged: dict[str, float] = {}
        #: committer services started to replace a dead one
        self.replaced = 0

    def _start_committer(self, committer: CollectCommitter | None) -> ServiceHandle:
        return self._take("committer", (committer,)) or ServiceHandle(
            _Committer.options(num_cpus=SERVICE_CPUS, scheduling_strategy=self._pin).remote(committer, self._token),
            self._token)

    def _key(self, kind: str) -> tuple[str, str]:
        return kind, self._pin.node_id

    def _take(self, kind: str, state: tuple[Any, ...]) -> ServiceHandle | None:
        """An idle `kind` service of an earlier job, serving this one now (None: none alive)."""
        actor = IDLE_SERVICES.take_serving(self._key(kind), self._token, *state) if self._reuse else None
        return ServiceHandle(actor, self._token) if actor is not None else None

    def keep(self) -> None:
        """The job ended cleanly: its services wait idle for a later job of this process (the
        ones there is no room for are killed)."""
        for kind, handle in (("committer", self.committer), ("storage", self.blob_store)):
            if handle is not None:
                IDLE_SERVICES.keep_or_kill(self._key(kind), [handle.actor])
        self.committer = self.blob_store = None

    def handles(self) -> list[Any]:
        """The service actors."""
        return [h.actor for h in (self.committer, self.blob_store) if h is not None]

    def poll(self, now: float) -> ServiceDeath | None:
        """Ping each service (one ping in flight each, `PING_INTERVAL` apart); a death noticed
        now, or None. `now`: the driver's wall clock."""
        for name, handle in (("committer", self.committer), ("storage", self.blob_store)):
            if handle is None:
                continue
            ref = self._pings.get(name)
            if ref is None:
                if now - self._pinged.get(name, float("-inf")) >= PING_INTERVAL:
                    self._pings[name], self._pinged[name] = handle.ping.remote(), now
                continue
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                continue
            del self._pings[name]
            try:
                ray.get(ref)
            except RayActorError as exc:
                return self._committer_died(exc) if name == "committer" else self._storage_died(exc)
            except RayError as exc:  # (a ping raises nothing else; logged, never fatal on its own)
                log.warning("barrierflow ray: pinging the %s service failed: %s", name, describe(exc))
        return None

    def check_committer(self) -> ServiceDeath | None:
        """Ping the committer now and wait (the job's end reads its output from it)."""
        try:
            ray.get(self.committer.ping.remote(), timeout=60)
        except RayActorError as exc:
            return self._committer_died(exc)
        return None

    def _committer_died(self, exc: BaseException) -> ServiceDeath:
        seed = self._seed
        if not isinstance(seed, DurableCollectCommitter):
            return ServiceDeath(memory_committer_died(describe(exc)), exc, fatal=True)
        kill_quietly(self.committer.actor)
        # the files are the committer: a new one reads them back (what the dead one never wrote was
        # never acknowledged, so the tasks that staged it fail over too)
        self._seed = register_publishers(DurableCollectCommitter(seed.blob_store, seed.directory), self._graph)
        self.committer = self._start_committer(self._seed)
        self.replaced += 1
        self._pings.pop("committer", None)
        message = (f"the sinks' committer service died ({describe(exc)}); a new one reloaded {seed.directory} "
                   "and the job fails over")
        log.warning("barrierflow ray: %s", message)
        return ServiceDeath(message, exc, fatal=False)

    def check_storage(self) -> ServiceDeath | None:
        """Ping the in-memory checkpoint storage now and wait: its death (fatal), or None (alive,
        or checkpoints are not kept in memory). Whoever noticed a failure first, the job then
        fails with the driver's one message for it."""
        if self.blob_store is None:
            return None
        try:
            ray.get(self.blob_store.ping.remote(), timeout=60)
        except RayActorError as exc:
            return self._storage_died(exc)
        except Exception as exc:  # a ping that did not answer, Ray itself gone: not this death; the
            # failure being handled stands (logged, never raised over it)
            log.warning("barrierflow ray: pinging the storage service failed: %s", describe(exc))
        return None

    @staticmethod
    def _storage_died(exc: BaseException) -> ServiceDeath:
        return ServiceDeath(memory_storage_died(describe(exc)), exc, fatal=True)
