"""The attempt boundary against a scripted port and the real `JobMaster`: each row is one
deployment (the first, or one after a failure; what is retained and committed) and the steps the
port is told to run, in order — and where they stop when the job cannot recover. Then the other
side of the boundary: cancelling an attempt through the `ControlPlane`."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.jobmaster.committer.collect import CommittedOutput
from runtime.jobmaster.coordination.control_plane import ControlPlane
from runtime.jobmaster.lifecycle.attempt_boundary import begin_attempt
from runtime.jobmaster.master import AttemptPlan, JobMaster
from runtime.jobmaster.restore.state_assignment import NoValidCheckpointError
from tests.jobmaster.test_control_plane import GRAPH, TASKS, ScriptedTransport
from vocabulary.options import RestartStrategy
from vocabulary.ports import ManualClock, ManualTimers
from vocabulary.reasons import CheckpointFailureReason

NEXT_ID = 6


class ScriptedBoundary:
    """Records each step it is told to run; `retained`: the newest valid checkpoint's id (None:
    none), or an exception its read raises."""

    def __init__(self, retained: int | Exception | None, committed: int | None) -> None:
        self.retained, self.committed = retained, committed
        self.steps: list[str] = []

    def latest_committed(self) -> Any:
        self.steps.append("committed")
        return CommittedOutput(self.committed, f"out-{self.committed}") if self.committed is not None else None

    def next_checkpoint_id(self) -> int:
        self.steps.append("next id")
        return NEXT_ID

    def latest_valid(self, committed: Any) -> tuple[Any, dict[Any, Any]]:
        self.steps.append("latest valid")
        if isinstance(self.retained, Exception):
            raise self.retained
        if self.retained is None:
            return None, {}
        return SimpleNamespace(checkpoint_id=self.retained, properties={}), {"count[0]": f"from {self.retained}"}

    def discard_orphans(self) -> None:
        self.steps.append("discard orphans")

    def abort_lingering(self, plan: AttemptPlan, next_checkpoint_id: int) -> None:
        self.steps.append(f"abort lingering {plan.abort_after}<id<{plan.abort_before} fence {next_checkpoint_id}")

    def restored_from(self, checkpoint: Any) -> None:
        self.steps.append(f"restored from {checkpoint.checkpoint_id if checkpoint is not None else None}")

    def deploy(self, plan: AttemptPlan) -> None:
        self.steps.append(f"deploy {plan.restores}")


def _master() -> JobMaster:
    env = StreamEnvironment(parallelism=1)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=3, delay=0.1))
    env.from_collection([{"key": "a"}]).sink_to(CollectSink("out"))
    clock = ManualClock()
    gateway = SimpleNamespace(cancel_attempt=lambda *a: None, deploy_attempt=lambda *a: None,
                              crash_during_recovery=lambda *a: None)
    return JobMaster(env.get_job_graph("job"), executor="fake", gateway=gateway, clock=clock,
                     timers=ManualTimers(clock), seed=7, run_id="run-1")


@dataclass(frozen=True)
class Row:
    failed: bool
    retained: int | Exception | None
    committed: int | None = None


PLANNED = ["committed", "next id", "latest valid"]
#: (name, row, the steps run, whether the job failed for good)
TABLE: list[tuple[str, Row, list[str], bool]] = [
    ("first attempt from scratch: nothing to discard", Row(failed=False, retained=None),
     [*PLANNED, f"abort lingering 0<id<{NEXT_ID} fence {NEXT_ID}", "restored from None", "deploy {}"], False),
    ("after a failure: orphans first, then the restored checkpoint's transactions", Row(failed=True, retained=3),
     [*PLANNED, "discard orphans", f"abort lingering 3<id<{NEXT_ID} fence {NEXT_ID}", "restored from 3",
      "deploy {'count[0]': 'from 3'}"], False),
    ("after a failure, from scratch", Row(failed=True, retained=None),
     [*PLANNED, "discard orphans", f"abort lingering 0<id<{NEXT_ID} fence {NEXT_ID}", "restored from None",
      "deploy {}"], False),
    ("committed output ahead of the newest valid checkpoint: nothing moves", Row(failed=True, retained=3, committed=4),
     PLANNED, True),
    ("no retained checkpoint verifies: nothing moves", Row(failed=True, retained=NoValidCheckpointError("bad")),
     PLANNED, True),
]


@pytest.mark.parametrize(("row", "steps", "failed_for_good"), [case[1:] for case in TABLE],
                         ids=[case[0] for case in TABLE])
def test_attempt_boundary_table(row: Row, steps: list[str], failed_for_good: bool) -> None:
    master = _master()
    if row.failed:
        master.failures.append("boom")
    port = ScriptedBoundary(row.retained, row.committed)
    plan = begin_attempt(master, port)
    assert port.steps == steps
    assert (plan is None, master.error is not None) == (failed_for_good, failed_for_good), master.error


def test_cancelling_an_attempt_stops_the_coordinator_and_aborts_silently() -> None:
    """The failing attempt is told nothing: the aborts of its pending checkpoints go nowhere, and
    nothing is sent until the next attempt is deployed."""
    transport = ScriptedTransport()
    plane = ControlPlane(GRAPH, transport)
    calls: list[str] = []

    def abort_all_pending(reason: CheckpointFailureReason) -> None:
        calls.append(f"abort pending {reason.name}")
        plane.notify_aborted(TASKS["sink"], 4, reason)  # what the coordinator does for each

    plane.attach(SimpleNamespace(stop=lambda: calls.append("stop"), abort_all_pending=abort_all_pending,
                                 restart=lambda sources, tasks: calls.append("restart")))
    plane.attempt_deployed(0)
    plane.cancel_attempt(CheckpointFailureReason.TASK_FAILURE)
    plane.trigger_source(TASKS["source"], 5, 0.0)
    assert (calls, transport.log) == (["stop", "abort pending TASK_FAILURE"], [])
    plane.attempt_deployed(1)
    plane.trigger_source(TASKS["source"], 5, 0.0)
    assert (calls[-1], transport.log) == ("restart", ["trigger 5 to source x1"])
