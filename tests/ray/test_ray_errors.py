"""A failure on Ray reads like one on the simulator: `execute()` raises the same error type with the
same message, without Ray's wrapper, frames or terminal colours (`runtime/ray/errors.py`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ray.exceptions import RayActorError, RayTaskError

from runtime import FaultPlan, TaskCrash
from runtime.jobmaster.committer.collect import UnknownTransactionError
from runtime.jobmaster.result import JobFailedError
from runtime.ray.errors import cause_of, describe, project_error
from tests.jobmaster.restore_jobs import collect_job


@pytest.fixture
def lost_committer(tmp_path: Path) -> Path:
    """Checkpoints of a run that failed for good (on the simulator: checkpoint directories are the
    same on both executors) whose committer folder is gone: what it staged cannot be committed."""
    crash = FaultPlan.of(TaskCrash(task="count[1]", after_records=4000))
    with pytest.raises(JobFailedError):
        collect_job(tmp_path / "ckpts").execute("job", executor="sim", seed=1, faults=crash)
    shutil.rmtree(tmp_path / "ckpts" / "job" / "committed")
    return tmp_path / "ckpts"


@pytest.mark.ray
def test_a_restore_that_cannot_commit_fails_the_same_way_on_both_executors(ray_session, lost_committer) -> None:
    raised = {}
    for executor in ("sim", "ray"):
        with pytest.raises(JobFailedError) as info:
            collect_job(lost_committer, parallelism=3).restore_from(str(lost_committer)).execute("job", executor=executor)
        raised[executor] = info.value
    for error in raised.values():  # the task that could not commit fails, and no restart can fix it
        assert "failed without restarting: task " in str(error) and "never staged" in str(error)
    assert isinstance(raised["sim"].cause, UnknownTransactionError), repr(raised["sim"].cause)
    assert str(raised["sim"].cause) in str(raised["ray"])  # the committer's sentence, as the task on Ray reported it
    assert "\x1b[" not in str(raised["ray"]) and "ray::" not in str(raised["ray"])
    assert not isinstance(raised["ray"].cause, RayTaskError)  # the committer's own error, not Ray's wrapper


def test_ray_errors_unwrap_to_what_the_remote_code_raised() -> None:
    inner = RayTaskError("CommitterService.commit", "Traceback ...\n\x1b[36mray::frames\x1b[39m",
                         UnknownTransactionError("sink 'out': transaction 'out/0/2' was committed but never staged"))
    nested = RayTaskError("WorkerActor.call", "Traceback ...", inner.as_instanceof_cause())
    assert type(cause_of(nested)) is UnknownTransactionError
    assert describe(nested) == "UnknownTransactionError: sink 'out': transaction 'out/0/2' was committed but never staged"
    assert project_error(nested, "job") is cause_of(nested)
    died = project_error(RayActorError(), "job")
    assert isinstance(died, JobFailedError) and str(died).startswith("job 'job' failed: an actor of the job died: ")
    assert died.cause is not None and "\x1b[" not in str(died)


class _Refuses:
    """An actor whose constructor raises what a dead service makes it raise."""

    def __init__(self) -> None:
        from checkpoint.storage.layout import StorageError

        raise StorageError("checkpoint storage memory://job is gone (list)")

    def ping(self) -> bool:
        return True


@pytest.mark.ray
def test_an_actor_whose_constructor_raised_reads_as_one_line_naming_the_actor_and_the_error(ray_session) -> None:
    """Ray keeps only its text of a constructor's error (frames, colour codes, the actor's repr):
    the job's error is one clean line naming the actor and what its constructor raised."""
    ray = ray_session
    handle = ray.remote(_Refuses).options(max_restarts=0).remote()
    with pytest.raises(RayActorError) as died:
        ray.get(handle.ping.remote(), timeout=120)
    assert died.value.actor_init_failed
    error = project_error(died.value, "job")
    assert isinstance(error, JobFailedError), repr(error)
    assert str(error) == ("job 'job' failed: an actor of the job did not start: the constructor of _Refuses raised "
                          "StorageError: checkpoint storage memory://job is gone (list)"), str(error)
    assert error.cause is died.value
