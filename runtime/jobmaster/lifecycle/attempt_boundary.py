"""The attempt boundary: what happens between a failed execution attempt and the next one (or
before the first), in one order, for every executor.

The job master cancels an attempt (`ControlPlane.cancel_attempt`: no message goes to it any more,
the coordinator stops triggering, its pending checkpoints abort) and deploys the next one through
`begin_attempt`, which runs these steps through an executor's `AttemptBoundaryPort`:

1. **Plan.** Read the sinks' newest committed output and the id the coordinator hands out next,
   then the newest retained checkpoint that verifies (`JobMaster.plan_attempt`: the checkpoint
   the user gave, if none; None: the job cannot recover and failed for good — nothing below runs).
2. **Discard orphans** — only after a failure: the files of this run's checkpoints that are
   neither retained nor pending, and what interrupted writes left (the first attempt of a run has
   none: its cleanup starts at the run's first checkpoint id).
3. **Abort lingering transactions.** What the failed attempt staged past the restored checkpoint
   can never commit (`AttemptPlan.abort_after` / `abort_before`; the next checkpoint id fences
   stages that arrive late).
4. **Restored from.** The coordinator learns the checkpoint the attempt starts from (a final one
   means the attempt takes no checkpoint of its own).
5. **Deploy.** The executor creates the attempt's tasks from `AttemptPlan.restores`; its control
   plane then routes to them and owes them nothing of an earlier attempt
   (`ControlPlane.attempt_deployed`), and the coordinator starts triggering.

Rejected: the coordinator reading the checkpoint and setting `restored_from` and cleaning up in one
call: a plan the job master then refuses (committed output ahead of it) would
already have moved the coordinator.

Pure: the port does every read and write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runtime.jobmaster.master import AttemptPlan


class AttemptBoundaryPort(Protocol):
    """What an executor does at an attempt boundary, each step on its own side (storage through the
    coordinator's `checkpoint.storage` ports, the committer, the tasks)."""

    def latest_committed(self) -> Any:
        """The sinks' newest committed output (`CommittedOutput`; None: nothing committed)."""
        ...

    def next_checkpoint_id(self) -> int:
        """The id the coordinator hands out next."""
        ...

    def latest_valid(self, committed: Any) -> tuple[Any, dict[Any, Any]]:
        """The newest retained checkpoint that verifies and every task's restore from it ((None, {}):
        none); `committed`: the sinks' committed output it must not be behind."""
        ...

    def discard_orphans(self) -> None:
        """Delete what the failed attempt left in the checkpoint storage."""
        ...

    def abort_lingering(self, plan: AttemptPlan, next_checkpoint_id: int) -> None:
        """Abort the staged transactions `plan` says can never commit."""
        ...

    def restored_from(self, checkpoint: Any) -> None:
        """The coordinator's attempt starts from `checkpoint` (None: from scratch)."""
        ...

    def deploy(self, plan: AttemptPlan) -> None:
        """Create the attempt's tasks from `plan.restores` and let the coordinator trigger."""
        ...


def begin_attempt(master: Any, port: AttemptBoundaryPort) -> AttemptPlan | None:
    """Run the attempt boundary's steps (see the module docstring) for `master`'s next attempt.

    Args:
        master: the `JobMaster` (plans the attempt; knows whether a failure preceded it).
        port: the executor's side.

    Returns:
        The plan deployed; None if the job cannot recover (`master.error` says why).

    Raises:
        RestoreError: the checkpoint the user gave does not fit (first attempt only).
    """
    committed = port.latest_committed()
    next_checkpoint_id = port.next_checkpoint_id()
    plan: AttemptPlan | None = master.plan_attempt(lambda: port.latest_valid(committed), committed,
                                                   next_checkpoint_id)
    if plan is None:
        return None
    if master.failures:
        port.discard_orphans()
    port.abort_lingering(plan, next_checkpoint_id)
    port.restored_from(plan.checkpoint)
    port.deploy(plan)
    return plan
