"""`TaskDeployment`: the task actors of an attempt: deploying them (replacing dead workers), polling their
heartbeats, killing and cancelling them, and counting what an attempt did.

A part of `runtime.ray.executor.RayExecutor`, which holds the state it works on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from runtime.ray import errors
from runtime.ray.data_links import ReportsBySocket
from runtime.ray.errors import describe
from runtime.ray.slots import SlotHandle
from runtime.ray.worker_actor import WorkerActor
from runtime.ray.worker_pool import IDLE_WORKERS, kill_quietly, next_epoch
from vocabulary.handles import TaskId

log = logging.getLogger("barrierflow.ray")


# No task events: Ray records every actor call for its dashboard and state API (a per-call cost on
# the sender and the receiver, ~5-8 % of a small call's CPU measured here); nothing here reads them.
_WorkerActor = ray.remote(enable_task_events=False)(WorkerActor)

#: seconds a newly created task actor may take to start its process and take its deployment
ACTOR_START_TIMEOUT = 60.0


class RemoteTaskError(RuntimeError):
    """A task actor's operator chain raised (the message names the task, operator and record);
    `suppress_restarts`: the task's error was a `SuppressRestartsError`."""

    def __init__(self, message: str, suppress_restarts: bool = False) -> None:
        super().__init__(message)
        self.suppress_restarts = suppress_restarts


class TaskDeployment:
    """The task actors of an attempt: deploying them (replacing dead workers), polling their
    heartbeats, killing and cancelling them, and counting what an attempt did."""

    def _deploy(self, restores: dict[TaskId, Any]) -> None:
        """Deploy a new epoch on the task actors, replacing the ones that died."""
        for _ in range(5):
            # never an epoch another job of this process had: a reused worker drops their late calls
            self.epoch = epoch = self.first_epoch if self.epoch < self.first_epoch else next_epoch()
            for index, group in enumerate(self.groups):
                if self.workers[index] is None or any(t in self._dead for t in group):
                    self._new_worker(index)
            fresh, self._starting = self._starting, set()
            self._dead.clear()
            self._final_counts = {}
            self.placement = {}
            outputs, inputs = self._routes()
            self._status = {}
            self._heartbeats = {}
            reports_to = self._reports_to()
            refs = {t: self.tasks[t].deploy.remote(epoch, restores.get(t), outputs[t], inputs[t],
                                                   self.counts.task_faults(t, time.time()), reports_to,
                                                   self.committer)
                    for t in self.task_ids}
            for task_id, ref in refs.items():
                # a new actor first starts a process (seconds on a busy host); a survivor that does
                # not answer within the heartbeat timeout is hung
                timeout = max(self.heartbeat_timeout, ACTOR_START_TIMEOUT) if task_id in fresh else self.heartbeat_timeout
                try:
                    errors.get(ref, timeout=timeout)  # restoring the task raised: that error, as on the simulator
                except RayActorError:
                    self._dead.add(task_id)  # died before or while deploying: replace it
                except GetTimeoutError:
                    self._kill(task_id)  # hung (still stuck in a user function): replace it
            if self._dead:
                continue
            if self.coordinator is not None:
                # (a job whose sinks stage nothing there, as a `DiscardingSink`, gets no commit calls)
                committer = self.committer if self.graph.stages_in_committer else None
                ray.get(self.coordinator.deploy.remote(epoch, self.tasks, committer), timeout=60)
            for task_id in self.task_ids:
                # not awaited: starting runs user code, and a task that fails or hangs there is
                # caught by the heartbeats like anywhere else
                self.tasks[task_id].start.remote(epoch)
            return
        self._give_up(f"could not deploy the tasks of job {self.graph.job_name!r}: actors kept dying", None)

    def _reports_to(self) -> Any:
        """Where the tasks send their reports: the coordinator actor, or with `data_transport="socket"`
        its inbox (asked here, once per coordinator: a busy coordinator delays the deployment, not a
        worker's report)."""
        if self.coordinator is None or self.data_transport != "socket":
            return self.coordinator
        if self._reports is None or self._reports.coordinator is not self.coordinator:
            address = ray.get(self.coordinator.data_address.remote(), timeout=60)
            self._reports = ReportsBySocket(self.coordinator, address)
        return self._reports

    def _start_workers(self) -> None:
        """Start every worker actor not started yet, without waiting for it: `_deploy` gives their
        first deployment the time a process takes to start."""
        for index, worker in enumerate(self.workers):
            if worker is None:
                self._new_worker(index)

    def _new_worker(self, index: int) -> None:
        """Start worker `index` (killing its predecessor, if any is left) and address its tasks,
        which count as starting until their first deployment."""
        old = self.workers[index]
        if old is not None:
            kill_quietly(old)
        group = self.groups[index]
        services = {t: {"committer": self.committer, "global_committer": self.checkpointing,
                        "storage": self.storage_spec, "job_id": self.job_id, "trace_barriers": self.trace_barriers,
                        "link_delay": self.link_delays.get(t, 0.0)} for t in group}
        worker = IDLE_WORKERS.take(self._worker_options_key()) if self.reuse_actors else None
        if worker is not None:  # an earlier job's: its process is up (calls after this one wait for it)
            worker.rehost.remote(self.graph_ref, index, group, services)
        else:
            worker = _WorkerActor.options(**self._worker_options()).remote(self.graph_ref, index, group, services)
            self._starting.update(group)
        self.workers[index] = worker
        self.processes.watch(worker)
        for task_id in group:
            self.tasks[task_id] = SlotHandle(worker, index, task_id, self.data_transport)

    def _worker_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.task_cpus, "max_restarts": 0, "max_task_retries": 0}
        if self._multi_node:
            options["scheduling_strategy"] = "SPREAD"
        return options

    def _worker_options_key(self) -> tuple[Any, ...]:
        """What a worker must have been created with to host this job's subtasks."""
        return tuple(sorted(self._worker_options().items()))

    def _keep_workers(self) -> None:
        """The job ended cleanly: its workers wait idle for the next job of this process
        (`runtime.ray.worker_pool`); the ones there is no room for are killed."""
        workers = [w for w in self.workers if w is not None]
        self.workers = [None] * len(self.groups)
        IDLE_WORKERS.keep_or_kill(self._worker_options_key(), workers)

    def _routes(self) -> tuple[dict[TaskId, dict[int, tuple[Any, int]]], dict[TaskId, dict[int, tuple[str, Any, int]]]]:
        outputs: dict[TaskId, dict[int, tuple[Any, int]]] = {t: {} for t in self.task_ids}
        inputs: dict[TaskId, dict[int, tuple[str, Any, int]]] = {t: {} for t in self.task_ids}
        for route in self.graph.channel_routes():
            outputs[route.sender][route.output_channel] = (self.tasks[route.receiver], route.input_channel)
            inputs[route.receiver][route.input_channel] = (str(route.sender), self.tasks[route.sender],
                                                           route.output_channel)
        return outputs, inputs

    def _poll_tasks(self, now: float) -> tuple[str, BaseException | None] | None:
        for task_id, handle in self.tasks.items():
            if task_id not in self._heartbeats:
                self._heartbeats[task_id] = (handle.heartbeat.remote(), now)
        refs = {ref: task_id for task_id, (ref, _) in self._heartbeats.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            task_id = refs[ref]
            del self._heartbeats[task_id]
            try:
                status = ray.get(ref)
            except RayActorError as exc:
                self._dead.update(self.groups[self._worker_of[task_id]])  # its worker died: all its tasks
                return f"task {task_id} died: {describe(exc)}", exc
            if status["epoch"] != self.epoch:
                continue
            status["seen"] = now
            self._status[task_id] = status
            self.placement[str(task_id)] = status["node"]
            if status["error"]:
                return status["error"], RemoteTaskError(status["error"], status["suppress_restarts"])
            if status["frozen"]:
                return self._check_crash(task_id, status)
        for task_id, (_, sent) in self._heartbeats.items():
            if now - sent > self.heartbeat_timeout:
                self._kill(task_id)
                return f"task {task_id} is hung: no heartbeat for {now - sent:.1f} s", None
        return None

    def _kill(self, task_id: TaskId) -> None:
        """Kill the worker of `task_id`: every task it hosts dies."""
        index = self._worker_of[task_id]
        ray.kill(self.workers[index], no_restart=True)
        self._dead.update(self.groups[index])

    def _cancel_siblings(self, task_id: TaskId) -> None:
        """Before killing the worker of a crashed task: stop the other tasks it hosts and keep
        their final counts, as a failover takes them from surviving tasks (`_count_attempt`), so
        a run's `FaultSchedule` counts the same whatever the slots."""
        siblings = [t for t in self.groups[self._worker_of[task_id]] if t != task_id and t not in self._dead]
        refs = {t: self.tasks[t].cancel.remote() for t in siblings}
        for sibling, ref in refs.items():
            with contextlib.suppress(RayError):
                self._final_counts[sibling] = ray.get(ref, timeout=self.heartbeat_timeout)

    def _count_attempt(self, cancels: dict[TaskId, Any]) -> None:
        """An attempt ended: add what each task counted in it to the run's counts (records, source
        records, acknowledgements, writes). A cancelled task's counts come with its `cancel`; a
        frozen or failed task's last heartbeat is final; a task that died otherwise loses what it
        did after its last heartbeat."""
        final: dict[TaskId, dict[str, Any]] = dict(self._final_counts)
        for task_id, ref in cancels.items():
            try:
                final[task_id] = ray.get(ref, timeout=self.heartbeat_timeout)
            except RayError as exc:  # dead, or hung (a `TaskStall` longer than the heartbeat timeout): replaced
                died = isinstance(exc, RayActorError) and task_id not in self._dead
                with contextlib.suppress(RayError):
                    self._kill(task_id)  # (every task of its worker is then dead: named once)
                self._dead.add(task_id)
                if died:  # its process died with the failure being handled
                    self.master.also_failed(f"task {task_id} died: {describe(exc)}")
        for task_id in self.tasks:
            self.counts.attempt_ended(task_id, final.get(task_id) or self._status.get(task_id, {}))
