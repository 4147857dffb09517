"""What the job master does to the rest of the job: the executor implements `JobMasterGateway`."""

from __future__ import annotations

from typing import Protocol

from vocabulary.handles import TaskId
from vocabulary.reasons import CheckpointFailureReason


class JobMasterGateway(Protocol):
    """Starting and stopping execution attempts, the executor's way (in virtual time, as actors)."""

    def cancel_attempt(self, attempt: int, reason: CheckpointFailureReason) -> None:
        """A global failover begins: the coordinator stops triggering and aborts its pending
        checkpoints with `reason`; every task of `attempt` stops, and nothing it still sends or
        writes may reach the next attempt."""
        ...

    def deploy_attempt(self, attempt: int) -> None:
        """Deploy every task of `attempt`, restored as `JobMaster.plan_attempt` says, and let the
        coordinator trigger again."""
        ...

    def crash_during_recovery(self, task_id: TaskId, at: float) -> None:
        """`TaskCrashDuringRecovery`: `task_id` fails at `at` (the clock's time; on Ray not before
        the new attempt is deployed) — called only for a recovery that happens (a restart is
        scheduled), after `cancel_attempt`."""
        ...
