"""A task slot's snapshot-writer thread (`runtime.ray.snapshot_uploads`): a `SlowStorage` window
makes the storage write take `factor` times as long, not the wait for the sinks' stages before it
(the committer is not the storage; on a loaded machine that wait alone can be seconds); the
stages, converted and sent, count in the write's time and CPU."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from runtime.core.barriers import AlignmentStats
from runtime.core.subtask_checkpoint import TaskSnapshot
from runtime.jobmaster.faults.counts import AttemptFaults
from runtime.ray.snapshot_uploads import SnapshotUploads
from vocabulary.handles import TaskId

#: how long the sink's stage takes to land
STAGE_SECONDS = 1.0
FACTOR = 20.0


class _Writer:
    """Writes nothing: the storage write takes no measurable time."""

    files = None

    def prepare(self, snapshot: TaskSnapshot) -> dict[str, bytes]:
        return {}

    def write(self, snapshot: TaskSnapshot, files: dict[str, bytes]) -> list[str]:
        return []


class _Task:
    def is_cancelled(self, checkpoint_id: int) -> bool:
        return False


class _NoQueuedStages:
    def send(self, queued: list[Any]) -> list[Any]:
        return []


def _uploads(task_id: TaskId) -> tuple[SnapshotUploads, list[tuple[Any, ...]], threading.Event]:
    """A writer thread for `task_id` whose reports go to the returned list; the event is set by
    the first."""
    written: list[tuple[Any, ...]] = []
    done = threading.Event()

    def post(kind: str, *args: Any) -> None:
        written.append((kind, *args))
        done.set()

    return SnapshotUploads(_Writer(), task_id, live=lambda epoch: True, post=post, fail=written.append), written, done


@pytest.mark.ray
def test_a_slow_storage_window_slows_the_write_not_the_wait_for_the_stages(ray_session) -> None:
    ray = ray_session

    @ray.remote(num_cpus=0)
    def stage() -> None:
        time.sleep(STAGE_SECONDS)

    ray.get(stage.remote())  # a worker process for it, started before the clock runs
    task_id = TaskId("sink", 0)
    uploads, written, done = _uploads(task_id)
    now = time.time()
    faults = AttemptFaults({"slow_writes": [(now - 60.0, now + 60.0, FACTOR)]})
    snapshot = TaskSnapshot(task_id, 1, now, AlignmentStats(1))
    uploads.upload(0, _Task(), snapshot, ([], [stage.remote()]), _NoQueuedStages(), faults, False, None)
    assert done.wait(timeout=FACTOR * STAGE_SECONDS + 30), "the write never reported"
    (kind, epoch, checkpoint_id, outcome, seconds, _cpu), = written
    assert (kind, epoch, checkpoint_id, outcome.error) == ("written", 0, 1, None)
    assert faults.slowed == 1
    # the stage's second counts once (the write's own time is what the window multiplies), where
    # multiplying it too would make the write last FACTOR seconds
    assert STAGE_SECONDS <= seconds < STAGE_SECONDS + 0.5 * (FACTOR - 1) * STAGE_SECONDS


class _SlowToConvert:
    """Sends no call, but turning its records into Arrow takes `CONVERT_SECONDS` of CPU."""

    def send(self, queued: list[Any]) -> list[Any]:
        until = time.thread_time() + CONVERT_SECONDS
        while time.thread_time() < until:
            pass
        return []


#: CPU a sink's stage takes to convert before it is sent
CONVERT_SECONDS = 0.3


def test_the_sinks_stages_are_part_of_the_writes_time_and_cpu() -> None:
    """Converting and sending the stages is the sink's part of the write: it counts in the
    subtask's `async_duration` and `async_cpu` (else it showed as a gap before the ack)."""
    task_id = TaskId("sink", 0)
    uploads, written, done = _uploads(task_id)
    snapshot = TaskSnapshot(task_id, 1, time.time(), AlignmentStats(1))
    uploads.upload(0, _Task(), snapshot, ([("sink", "t1", [{"a": 1}])], []), _SlowToConvert(), AttemptFaults({}),
                   False, None)
    assert done.wait(timeout=30), "the write never reported"
    (kind, _epoch, _checkpoint_id, outcome, seconds, cpu), = written
    assert (kind, outcome.error) == ("written", None)
    assert seconds >= CONVERT_SECONDS and cpu >= 0.9 * CONVERT_SECONDS, (seconds, cpu)
