"""`CoordinatorHandover`: the driver's side of the coordinator actor: creating it, HA leader election and hand-over,
reading its status, replacing it when it dies or is killed by a fault.

A part of `runtime.ray.executor.RayExecutor`, which holds the state it works on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from checkpoint.io.recovery import ZooKeeperSuspendedError
from runtime.jobmaster.faults.actions import coordinator_crash
from runtime.ray.coordinator_actor import CoordinatorActor
from runtime.ray.errors import describe
from runtime.ray.services import SERVICE_CPUS
from runtime.ray.worker_pool import IDLE_SERVICES
from vocabulary.reasons import CheckpointFailureReason

log = logging.getLogger("barrierflow.ray")


# No task events: Ray records every actor call for its dashboard and state API (a per-call cost on
# the sender and the receiver, ~5-8 % of a small call's CPU measured here); nothing here reads them.
_CoordinatorActor = ray.remote(enable_task_events=False)(CoordinatorActor)


#: seconds between reads retried while ZooKeeper is suspended (`retry_while_suspended`)
SUSPENDED_RETRY_DELAY = 0.1


def retry_while_suspended(read: Callable[[], Any], within: float, *, clock: Callable[[], float] = time.monotonic,
                          sleep: Callable[[float], None] = time.sleep) -> Any:
    """`read()`, called again while it raises `ZooKeeperSuspendedError`, for at most `within`
    seconds; the last error is raised after that (and any other error at once)."""
    deadline = clock() + within
    while True:
        try:
            return read()
        except ZooKeeperSuspendedError:
            if clock() >= deadline:
                raise
        sleep(SUSPENDED_RETRY_DELAY)


class CoordinatorHandover:
    """The driver's side of the coordinator actor: creating it, HA leader election and hand-over,
    reading its status, replacing it when it dies or is killed by a fault."""

    def _new_coordinator(self) -> Any:
        contender = f"coordinator-{self._contenders}"
        self._contenders += 1
        args = (self.job_id, self.graph_ref, self.storage_spec, contender, self._first_checkpoint_id, self.run_id,
                self.master.first_checkpoint_id, bool(self.master.checkpoint_listeners), self.first_epoch)
        handle = IDLE_SERVICES.take_serving(self._coordinator_key(), *args) if self._keeps_coordinator() else None
        if handle is None:
            handle = _CoordinatorActor.options(num_cpus=SERVICE_CPUS, scheduling_strategy=self._pin,
                                               max_restarts=0).remote(*args)
        self.processes.watch(handle)
        self._arm_coordinator(handle)
        if self._first_checkpoint_id is None:  # the first one: its successors clean up this run's ids only
            try:
                self._first_checkpoint_id = ray.get(handle.checkpoint_id_floor.remote(), timeout=120)
            except RayError as exc:  # it did not start: the next one is asked (its floor is only higher)
                log.warning("barrierflow ray: coordinator did not start: %s", describe(exc))
        return handle

    def _coordinator_key(self) -> tuple[str, str]:
        return "coordinator", self._pin.node_id

    def _keeps_coordinator(self) -> bool:
        """Whether this job's coordinator may come from an earlier job and be left to a later one
        (`runtime.ray.worker_pool`): not with HA, where contenders come and go with elections."""
        return self.reuse_actors and self.ha is None

    def _keep_coordinator(self) -> None:
        """The job ended cleanly (its coordinator was shut down): the coordinator waits idle for
        a later job of this process."""
        if self.coordinator is not None and self._keeps_coordinator():
            IDLE_SERVICES.keep_or_kill(self._coordinator_key(), [self.coordinator])
            self.coordinator = None

    def _await_leader(self, first: bool = False) -> None:
        """HA: make whichever contender leads now `self.coordinator` (promoted: it recovered the
        completed checkpoints from ZooKeeper), and keep a live standby next to it.

        Raises:
            JobFailedError: no contender became leader within a few session timeouts.
        """
        assert self.ha is not None
        if first:  # the first contender joins alone, so it leads; the standby joins after it
            self.standby = None
        deadline = time.time() + 4 * self.ha.session_timeout + 30
        while time.time() < deadline:
            for handle in (self.coordinator, self.standby):
                if handle is None:
                    continue
                try:
                    leads = ray.get(handle.promote.remote(0.2), timeout=30)
                except (RayActorError, GetTimeoutError) as exc:
                    log.warning("barrierflow ray: coordinator contender unusable: %s", describe(exc))
                    self._replace_contender(handle)
                    break
                except RayError as exc:  # e.g. ZooKeeper unreachable while recovering: try again
                    log.warning("barrierflow ray: promoting a coordinator failed: %s", describe(exc))
                    time.sleep(0.2)
                    continue
                if leads:
                    if handle is self.standby:
                        self.coordinator, self.standby = self.standby, self.coordinator
                    if self.standby is None:
                        self.standby = self._new_coordinator()
                    if not first:
                        self._arm_coordinator(self.coordinator)
                        promoted_at = time.time()
                        status = ray.get(self.coordinator.status.remote(), timeout=30)
                        self.master.coordinators.promoted(status["latest_id"], promoted_at)
                    log.info("barrierflow ray: coordinator %s leads", "promoted" if not first else "elected")
                    return
        self._give_up(f"no coordinator of job {self.graph.job_name!r} became leader in ZooKeeper "
                      f"({self.ha.hosts}) within {4 * self.ha.session_timeout + 30:.0f} s", None)

    def _replace_contender(self, handle: Any) -> None:
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True)
        if handle is self.coordinator:
            self.coordinator, self.standby = self.standby, None
        else:
            self.standby = None
        if self.coordinator is None:
            self.coordinator = self._new_coordinator()

    def _poll_coordinator(self) -> tuple[Any, ...] | None:
        """None, or the failover to start: `JobMaster.failover`'s arguments."""
        if self.coordinator is None:
            return None
        if self._coord_ref is None:
            self._coord_ref = self.coordinator.status.remote()
        ready, _ = ray.wait([self._coord_ref], timeout=0)
        if not ready:
            return None
        ref, self._coord_ref = self._coord_ref, None
        try:
            self._coord_status = ray.get(ref)
        except RayActorError as exc:
            return self._coordinator_died(exc)
        self._land(self._coord_status)
        failure = self._coord_status.get("fail_request")
        if self.ha is not None and self._coord_status.get("leader_lost"):
            # whatever the failover is for, the attempt it deploys needs a coordinator that leads
            self._await_leader()
            failure = failure or "checkpoint coordinator lost its ZooKeeper leadership"
        return (failure, None) if failure else None

    def _coordinator_died(self, exc: RayActorError) -> tuple[Any, ...]:
        """Replace the dead coordinator; the failover to start (`JobMaster.failover`'s arguments)."""
        injected = self._killed_for_a_fault
        self._replace_coordinator()
        if injected:  # an injected crash: the failure reads as the simulator's
            return coordinator_crash(standby=self.ha is not None), None, CheckpointFailureReason.COORDINATOR_SHUTDOWN
        return f"checkpoint coordinator died: {describe(exc)}", exc

    def _replace_coordinator(self) -> None:
        ray.kill(self.coordinator, no_restart=True)
        self._coord_ref = None
        # the last status is the dead one's: its doom, if it said so, is the crash being handled
        self._coord_status = {**self._coord_status, "doomed": False}
        if self.ha is not None:
            self._close_dead_leader_session()
            self.coordinator, self.standby = self.standby, None
            if self.coordinator is None:
                self.coordinator = self._new_coordinator()
            self._await_leader()
            return
        self.coordinator = self._new_coordinator()

    def _close_dead_leader_session(self) -> None:
        """Ray confirmed the coordinator is dead: end its ZooKeeper session now rather than wait
        for the session timeout, so the standby is elected at once."""
        session = (self._coord_status or {}).get("zk_session")
        if not session:
            return
        from checkpoint.io.zookeeper_client import close_session

        try:
            close_session(self.ha.hosts, session, timeout=self.ha.operation_timeout)
        except Exception as exc:  # the session timeout still ends it; this only speeds it up
            log.warning("could not close the dead coordinator's ZooKeeper session: %s", exc)

    def _read_ha(self, read: Callable[[], Any]) -> Any:
        """`read` (a coordinator actor call that reads ZooKeeper), retried while the coordinator's
        ZooKeeper client is suspended — a restarted server or a dropped connection it may still
        get back — for at most the session timeout: past it the session is gone, and the error
        stands (a failover then, not a hang)."""
        return retry_while_suspended(read, self.ha.session_timeout if self.ha is not None else 0.0)

    @property
    def _killed_for_a_fault(self) -> bool:
        """Whether the current coordinator is the one the driver killed for an injected crash."""
        return self.coordinator is not None and self.coordinator is self._killed_coordinator

    def _kill_coordinator(self) -> None:
        """Kill the coordinator actor (`CoordinatorCrash`, `CoordinatorCrashBeforeNotify`), keeping
        its statistics and fault counts; the next poll finds it dead and replaces it. Once: Ray's
        kill is asynchronous, and the killed actor may still answer a status poll saying it is
        doomed — that is the crash already made, not another one."""
        if self._killed_for_a_fault:
            return
        self._killed_coordinator = self.coordinator
        history: list[Any] = []
        with contextlib.suppress(RayError):
            history = ray.get(self.coordinator.history.remote(), timeout=10)
            self.counts.coordinator_counted(ray.get(self.coordinator.fault_counts.remote(), timeout=10))
        self._coord_status = {**self._coord_status, "doomed": False}
        self.master.coordinators.crashed(history)
        self._add_coordinator_calls(self.coordinator)
        ray.kill(self.coordinator, no_restart=True)

    def _arm_coordinator(self, handle: Any) -> None:
        """A new (or newly promoted) coordinator applies the plan's control-message faults, counting
        on from what its predecessors sent (exact when a `CoordinatorCrash` killed the last one;
        else as of the driver's last poll of it)."""
        self.counts.coordinator_counted(self._coord_status.get("fault_counts", {}))
        handle.arm_faults.remote(self.faults, self.schedule.counts())

    def _add_coordinator_calls(self, coordinator: Any) -> None:
        """Add what `coordinator` sent and received to the run's `coordinator_calls`, and its
        process's CPU to `service_cpu`."""
        with contextlib.suppress(RayError):
            counts, cpu = ray.get([coordinator.call_counts.remote(), coordinator.process_cpu.remote()], timeout=10)
            for key, n in counts.items():
                self.coordinator_calls[key] = self.coordinator_calls.get(key, 0) + n
            self.service_cpu["coordinator"] = self.service_cpu.get("coordinator", 0.0) + cpu

    def _land(self, status: dict[str, Any]) -> None:
        """Hand the checkpoints the coordinator completed (with their files, read when they
        completed: the store may have deleted them since) to the job master's listeners."""
        for completed, files in status.get("completed_files") or ():
            self.master.checkpoint_completed(completed, files)
