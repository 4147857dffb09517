"""`DriverFailover`: the driver's side of a failover — the job master's gateway
(`runtime.jobmaster.gateway`: cancelling an attempt, deploying the next as the master plans it),
and failing the job for good with what the sinks committed attached.

The job master decides (restart strategy, restore plan); this carries it out on the actors:
cancelling suspends the coordinator (`ControlPlane.cancel_attempt`) and cancels every surviving
task, counting what it did; deploying runs the attempt boundary's steps
(`runtime.jobmaster.lifecycle.attempt_boundary`) on the committer service and the coordinator
actor, and deploys the tasks restored as planned (`runtime.ray.task_deployment`).

A coordinator that dies while an attempt is planned (its replacement's constructor failed, say)
leaves that attempt undeployed: the failover to start instead is kept in `_failed_deploy`, which
the driver loop takes before anything else (restarts bound how often).

A part of `runtime.ray.executor.RayExecutor`, which holds the state it works on.
"""

from __future__ import annotations

import contextlib
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from runtime.jobmaster.lifecycle.attempt_boundary import begin_attempt
from runtime.jobmaster.lifecycle.progress import Phase
from runtime.jobmaster.result import JobFailedError
from runtime.ray import errors
from runtime.ray.errors import describe
from vocabulary.reasons import CheckpointFailureReason


class DriverFailover:
    """The job master's gateway on Ray, and failing the job for good (see the module docstring)."""

    def _failover(self, failure: tuple[Any, ...]) -> None:
        """Cancel this attempt and deploy the next (`JobMaster.failover`), or fail the job: for good
        at once when the in-memory checkpoint storage died, whatever failed first."""
        self._fail_if_storage_died()
        self.master.failover(*failure)
        self._raise_if_failed()

    def _fail_if_storage_died(self) -> None:
        """Whatever failed first (a task's or the coordinator's call, its constructor), a dead
        in-memory checkpoint storage fails the job with the one message the driver's ping gives."""
        death = self.services.check_storage() if self.services is not None else None
        if death is not None:
            self._give_up(f"job {self.graph.job_name!r} failed: {death.message}", death.cause)

    def _service_died(self, death: Any) -> tuple[str, BaseException | None]:
        """A service actor died (`runtime.ray.job_services`): one held in memory, or the in-memory
        checkpoint storage, fails the job; else its replacement is watched and the failover to
        start returned."""
        if death.fatal:
            self._give_up(f"job {self.graph.job_name!r} failed: {death.message}", death.cause)
        self.processes.watch(self.committer.actor)  # its replacement
        return death.message, death.cause

    def cancel_attempt(self, attempt: int, reason: CheckpointFailureReason) -> None:
        """`JobMasterGateway`: suspend the coordinator and cancel every task of the attempt."""
        self._report(Phase.RESTARTING)
        if self.coordinator is not None:
            try:
                ray.get(self.coordinator.suspend.remote(reason), timeout=30)
            except (RayActorError, GetTimeoutError) as exc:  # it died with the failure being handled
                injected = self._killed_for_a_fault
                self._replace_coordinator()
                if not injected:  # (an injected crash the failover covers reads as on the simulator)
                    state = "died" if isinstance(exc, RayActorError) else "did not answer"
                    self.master.also_failed(f"checkpoint coordinator {state}: {describe(exc)}")
        if self._failed_deploy is not None:  # the attempt never ran: its tasks are stopped, nothing to count
            self._failed_deploy = None
        else:  # survivors stop now and are redeployed below
            self._count_attempt({t: h.cancel.remote() for t, h in self.tasks.items()
                                 if t not in self._dead and t not in self._final_counts})
        self._heartbeats.clear()
        self._status = {}

    def deploy_attempt(self, attempt: int) -> None:
        """`JobMasterGateway`: deploy the tasks restored as the job master plans, in the attempt
        boundary's order (`runtime.jobmaster.lifecycle.attempt_boundary`; the coordinator actor
        reads the newest valid retained checkpoint, next to its store)."""
        assert self.services is not None
        death = self.services.check_committer()  # (a task may have found it dead first: this failover)
        if death is not None and death.fatal:
            self._give_up(f"job {self.graph.job_name!r} failed: {death.message}", death.cause)
        try:
            begin_attempt(self.master, _RayAttemptBoundary(self))
        except _CoordinatorDied as died:  # it died, or a replacement's constructor failed: replaced, and
            self._failed_deploy = self._coordinator_died(died.error)  # the loop fails over again (restarts bound it)

    def _raise_if_failed(self) -> None:
        if self.master.error is not None:
            self._raise(self.master.error)

    def _give_up(self, message: str, exc: BaseException | None) -> None:
        self.master.fail_for_good(message, exc)
        self._raise_if_failed()

    def _raise(self, error: JobFailedError) -> None:
        self._attach_committer(error)
        raise error

    def _attach_committer(self, error: JobFailedError) -> None:
        """What the sinks committed before the job failed (committed output is never taken back)."""
        error.committer = None
        if self.committer is not None:
            with contextlib.suppress(RayError):
                error.committer = ray.get(self.committer.committer.remote(), timeout=30)


class _CoordinatorDied(Exception):
    """The coordinator actor died during an attempt boundary's step (`error`: Ray's)."""

    def __init__(self, error: RayActorError) -> None:
        super().__init__(str(error))
        self.error = error


class _RayAttemptBoundary:
    """`AttemptBoundaryPort` of the Ray driver: the committer service and the coordinator actor do
    each step (a coordinator's ZooKeeper reads retried while its session is suspended); without
    checkpointing (no coordinator) nothing is retained."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.coordinator = driver.coordinator

    def _on_coordinator(self, call: Any) -> Any:
        try:
            return self.driver._read_ha(call)
        except RayActorError as exc:
            raise _CoordinatorDied(exc) from exc

    def latest_committed(self) -> Any:
        return ray.get(self.driver.committer.latest_committed.remote(), timeout=60)

    def next_checkpoint_id(self) -> int:
        if self.coordinator is None:
            return 0
        return self._on_coordinator(lambda: ray.get(self.coordinator.next_checkpoint_id.remote(), timeout=60))

    def latest_valid(self, committed: Any) -> tuple[Any, dict[Any, Any]]:
        if self.coordinator is None:
            return None, {}
        return self._on_coordinator(lambda: errors.get(self.coordinator.restores.remote(committed), timeout=120))

    def discard_orphans(self) -> None:
        if self.coordinator is not None:
            self._on_coordinator(lambda: ray.get(self.coordinator.discard_orphans.remote(finished=False),
                                                 timeout=120))

    def abort_lingering(self, plan: Any, next_checkpoint_id: int) -> None:
        # a stage the failed attempt sends late, below the next checkpoint id, is dropped (the fence)
        fence = next_checkpoint_id if self.coordinator is not None else None
        ray.get(self.driver.committer.abort_lingering.remote(plan.abort_after, plan.abort_before, fence), timeout=60)

    def restored_from(self, checkpoint: Any) -> None:
        if self.coordinator is not None:
            self._on_coordinator(lambda: ray.get(self.coordinator.restored_from.remote(checkpoint), timeout=60))

    def deploy(self, plan: Any) -> None:
        self.driver._deploy(plan.restores)
