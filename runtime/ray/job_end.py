"""`JobEnd`: how the driver ends a job once every task reports finished.

The end is not certain until the sinks committed: the driver waits until the final checkpoint's
completion notifications have executed (`_final_commit_failed`; a coordinator or committer that
died since its last status fails over instead, and the next attempt restores the final checkpoint
and ends at once), then takes every task's final report (`_take_finals`: state, latencies, step
costs, fault counts; a task whose process died meanwhile fails over the same way), and builds the
result (`_finish`): the committed output from the committer, the checkpoint history and fault
counts from the coordinator, orphan checkpoint files discarded, per-process CPU and GC pauses.

A part of `runtime.ray.executor.RayExecutor`, which holds the state it works on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from runtime.jobmaster.result import JobMetrics, JobResult
from runtime.ray import errors
from runtime.ray.errors import describe

log = logging.getLogger("barrierflow.ray")


class JobEnd:
    """The end of a job on Ray (see the module docstring)."""

    def _all_finished(self) -> bool:
        """Every task of the attempt reported finished (its input ended, its final snapshot taken)."""
        return len(self._status) == len(self.task_ids) and all(s["finished"] for s in self._status.values())

    def _final_commit_failed(self) -> tuple[Any, ...] | None:
        """Every task finished: wait for the last completion's notifications and commit; the
        failover to start if that commit failed or the committer died meanwhile."""
        assert self.services is not None
        if self.coordinator is not None:
            try:
                ray.get(self.coordinator.wait_notifications.remote(), timeout=60)
            except RayActorError as exc:  # it died since its last status (a crash in this very poll): the
                return self._coordinator_died(exc)  # next attempt restores the final checkpoint and ends
        death = self.services.check_committer()
        if death is not None:
            return self._service_died(death)
        if self.coordinator is None:
            return None
        try:
            if self._coord_ref is not None:  # a status poll in flight may carry completed checkpoints
                ref, self._coord_ref = self._coord_ref, None
                self._land(ray.get(ref, timeout=60))
            self._coord_status = ray.get(self.coordinator.status.remote(), timeout=60)
        except RayActorError as exc:  # a kill is asynchronous: it may land after wait_notifications answered
            return self._coordinator_died(exc)
        self._land(self._coord_status)
        request = self._coord_status.get("fail_request")
        return (request, None) if request else None

    def _take_finals(self) -> tuple[list[dict[str, Any]], tuple[str, BaseException] | None]:
        """Every task's final report, in `task_ids` order; or the failover to start if a task's
        process died since its last heartbeat (every task then restores the final checkpoint on a
        new worker: the survivors ended with their report)."""
        refs = {t: self.tasks[t].finish.remote() for t in self.task_ids}
        finals: list[dict[str, Any]] = []
        for task_id, ref in refs.items():
            try:
                finals.append(errors.get(ref, timeout=120))
            except RayActorError as exc:
                for other in self.task_ids:  # the others took their final report: fresh workers for all
                    with contextlib.suppress(RayError):
                        self._kill(other)
                return [], (f"task {task_id} died: {describe(exc)}", exc)
        return finals, None

    def _finish(self, finals: list[dict[str, Any]]) -> JobResult:
        """The result, from the tasks' final reports and what the services and coordinator kept."""
        for task_id, final in zip(self.task_ids, finals):  # the last attempt's occurrences: `schedule.fired` complete
            self.counts.attempt_ended(task_id, final["counts"], records=False)  # (its records are counted below)
        if self.coordinator is not None:  # what failed attempts left (late uploads of cancelled tasks too)
            try:
                ray.get(self.coordinator.discard_orphans.remote(), timeout=120)
            except RayError as exc:  # the job succeeded; `barrierflow checkpoints gc` gets the rest
                log.warning("barrierflow ray: deleting orphan checkpoint files failed: %s", describe(exc))
        committer, last_commit_at, committer_cpu, committer_gc = ray.get(
            [self.committer.committer.remote(), self.committer.last_commit_at.remote(),
             self.committer.process_cpu.remote(), self.committer.gc_pauses.remote()], timeout=60)
        self.service_cpu["committer"] = committer_cpu
        names = [", ".join(map(str, group)) for group in self.groups]
        per_worker = ray.get([worker.gc_pauses.remote() for worker in self.workers]
                             + [worker.calls.remote() for worker in self.workers], timeout=60)
        gc_pauses = dict(zip(names, per_worker[:len(self.workers)]))
        worker_calls = dict(zip(names, per_worker[len(self.workers):]))
        gc_pauses["committer"] = committer_gc
        history: list[Any] = []
        if self.coordinator is not None:
            if self._coord_ref is not None:  # a status poll in flight may carry completed checkpoints
                with contextlib.suppress(RayError):
                    self._land(ray.get(self._coord_ref, timeout=60))
            self._land({"completed_files": ray.get(self.coordinator.take_completed.remote(), timeout=60)})
            history = ray.get(self.coordinator.history.remote(), timeout=60)
            self.counts.coordinator_counted(ray.get(self.coordinator.fault_counts.remote(), timeout=60))
            self._add_coordinator_calls(self.coordinator)
            gc_pauses["coordinator"] = ray.get(self.coordinator.gc_pauses.remote(), timeout=60)
            ray.get(self.coordinator.shutdown.remote(), timeout=60)
        if self.standby is not None:
            with contextlib.suppress(RayError):
                ray.get(self.standby.shutdown.remote(), timeout=30)
        metrics = JobMetrics()
        metrics.duration = time.time() - self.running_since
        metrics.running_since = self.running_since
        metrics.last_commit_at = last_commit_at
        metrics.coordinator_calls = dict(self.coordinator_calls)
        metrics.service_cpu = dict(self.service_cpu)
        metrics.gc_pauses = gc_pauses
        metrics.worker_calls = worker_calls
        trace: list[tuple[Any, ...]] = []
        source_now = 0
        for task_id, final in zip(self.task_ids, finals):
            trace.extend(final["trace"])
            if final.get("step_times") is not None:
                metrics.tasks[str(task_id)] = final["step_times"]
            if self.graph.vertex(task_id.vertex).source is not None:
                source_now += final["records_in"]
        metrics.records_in = self.counts.source_records([source_now])
        return self.master.result(
            committer=committer, checkpoints=history, metrics=metrics,
            finals=[final["final"] for final in finals],
            trace=sorted(trace, key=lambda event: event[0]))
