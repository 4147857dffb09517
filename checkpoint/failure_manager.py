"""Checkpoint failures counted against `tolerable_failures` (Flink's `CheckpointFailureManager`).

Each abort whose reason `counts_as_failure`, and each trigger whose id the counter could not
persist, increments a consecutive-failure counter; a completion resets it. Exceeding
`tolerable_failures` fails the job once (`fail_job`, with a `CheckpointFailureLimitError`) and
resets the counter, so a restarted job gets the same tolerance again.
"""

from __future__ import annotations

from collections.abc import Callable

from vocabulary.reasons import CheckpointFailureReason


class CheckpointFailureLimitError(RuntimeError):
    """More consecutive checkpoint failures than `tolerable_failures` allows."""

    def __init__(
        self, failures: int, tolerable: int, checkpoint_id: int | None, reason: CheckpointFailureReason
    ) -> None:
        last = (f"checkpoint {checkpoint_id} aborted" if checkpoint_id is not None
                else "a checkpoint could not be triggered")
        super().__init__(
            f"exceeded checkpoint tolerable failure threshold: {failures} consecutive failures "
            f"(tolerable_failures={tolerable}); last: {last} ({reason.value})"
        )
        self.failures = failures
        self.tolerable = tolerable
        self.checkpoint_id = checkpoint_id
        self.reason = reason

    def __reduce__(self):  # picklable with its fields (Ray ships exceptions)
        return (type(self), (self.failures, self.tolerable, self.checkpoint_id, self.reason))


class CheckpointFailureManager:
    """Consecutive checkpoint failures of one coordinator.

    Args:
        tolerable_failures: consecutive counted failures tolerated; one more fails the job.
        fail_job: called with the `CheckpointFailureLimitError` when they are exceeded.
    """

    def __init__(self, tolerable_failures: int, fail_job: Callable[[Exception], None]) -> None:
        self.tolerable_failures = tolerable_failures
        self._fail_job = fail_job
        self.consecutive_failures = 0
        #: how many times `fail_job` was called
        self.num_job_failures = 0

    def checkpoint_succeeded(self) -> None:
        self.consecutive_failures = 0

    def checkpoint_failed(self, checkpoint_id: int | None, reason: CheckpointFailureReason) -> None:
        """A checkpoint failed (None: its trigger failed): fail the job past `tolerable_failures`."""
        self.consecutive_failures += 1
        if self.consecutive_failures > self.tolerable_failures:
            error = CheckpointFailureLimitError(
                self.consecutive_failures, self.tolerable_failures, checkpoint_id, reason
            )
            self.consecutive_failures = 0
            self.num_job_failures += 1
            self._fail_job(error)
