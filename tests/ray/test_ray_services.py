"""What leaves `execute()` on Ray when its services or records fail: a failover or a `JobFailedError`
naming the cause, never a raw Ray error.

* a sink's stage that cannot be written (a blocked path: what a full disk does too) fails the
  attempt instead of declining a checkpoint whose transaction the next one commits without records;
* a killed `CommitterService` kept beside the checkpoints is replaced from its files (the job fails
  over and ends exactly once); one in memory, or the in-memory checkpoint storage, fails the job
  at once, naming it (not at the job's end as a raw Ray error);
* a record nested 2,000 levels deep fails with the simulator's record error (not a PicklingError).
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from operators import CollectSink
from runtime import JobFailedError, StreamEnvironment
from runtime.jobmaster.committer.durable import COMMITTED_DIR
from runtime.ray.executor import RayExecutor
from runtime.ray.service_deaths import MEMORY_STORAGE_DIED
from vocabulary.options import RestartStrategy

ROWS = [{"id": i} for i in range(20_000)]


def slow_relay(record: dict[str, Any]) -> dict[str, Any]:
    if record["id"] % 10 == 0:
        time.sleep(0.002)  # ~2 s of work per subtask: services die while the job runs
    return {"id": record["id"]}


def relay_env(storage: str | None) -> StreamEnvironment:
    """source -> map -> sink "pv", parallelism 2, chained (the sinks stage when their source is triggered)."""
    env = StreamEnvironment(parallelism=2, buffer_size=64, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.02, storage=storage, tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=5, delay=0.05))
    env.from_collection(ROWS, splits=2).map(slow_relay, name="relay").sink_to(CollectSink("pv"))
    return env


def ids_once(output: list[dict[str, Any]]) -> bool:
    return sorted(r["id"] for r in output) == list(range(len(ROWS)))


@pytest.fixture
def executors(monkeypatch: pytest.MonkeyPatch) -> list[RayExecutor]:
    """Every `RayExecutor` run meanwhile, so a test can reach its service actors."""
    made: list[RayExecutor] = []
    run = RayExecutor.run

    def recording(self: RayExecutor) -> Any:
        made.append(self)
        return run(self)

    monkeypatch.setattr(RayExecutor, "run", recording)
    return made


def kill_when_running(executors: list[RayExecutor], service: str) -> Any:
    """A progress callback that `ray.kill`s the job's `service` actor once ~1/10 of the records are in."""
    killed: list[float] = []

    def progress(info: dict[str, Any]) -> None:
        if not killed and info.get("records in", 0) >= len(ROWS) // 10 and executors:
            services = executors[-1].services
            ray.kill((services.committer if service == "committer" else services.blob_store).actor, no_restart=True)
            killed.append(time.monotonic())

    progress.killed = killed  # type: ignore[attr-defined]
    return progress


@pytest.mark.ray
def test_a_stage_that_cannot_be_written_fails_the_attempt_and_is_never_committed(
        ray_session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sinks' stages of checkpoints 2 and 3 land on directories: the attempt fails over naming
    the file, the output is exactly once, and the directory restores in a new execution (it used to
    decline the checkpoint, commit the transaction anyway, and fail every restore with
    CorruptCommitterError)."""
    monkeypatch.setattr("runtime.ray.executor.new_run_id", lambda: "r1")
    storage = tmp_path / "chk"
    blocked = []
    for checkpoint_id in (2, 3):
        for subtask in (0, 1):
            name = hashlib.sha256(f"pv\0pv/{subtask}/{checkpoint_id}".encode()).hexdigest()[:32]
            blocked.append(storage / "job" / COMMITTED_DIR / "r1" / f"staged-{name}.txn")
            blocked[-1].mkdir(parents=True)
    result = relay_env(str(storage)).execute("job", executor="ray")
    assert result.restarts >= 1 and any("cannot write" in f and "staged-" in f for f in result.failures), \
        result.failures
    assert ids_once(result.output("pv"))
    for path in blocked:
        path.rmdir()
    again = relay_env(str(storage)).restore_from(str(storage), job_id="job").execute("job", executor="sim", seed=1)
    assert ids_once(again.output("pv"))


@pytest.mark.ray
def test_a_killed_committer_kept_on_disk_is_replaced_and_the_job_ends_exactly_once(
        ray_session, tmp_path: Path, executors: list[RayExecutor]) -> None:
    progress = kill_when_running(executors, "committer")
    result = relay_env(str(tmp_path / "chk")).execute("job", executor="ray", progress=progress)
    assert progress.killed, "the job ended before the committer was killed"
    assert executors[-1].services.replaced == 1 and result.restarts >= 1, result.failures
    assert any("committer service" in f and "died" in f for f in result.failures), result.failures
    assert ids_once(result.output("pv"))


@pytest.mark.ray
@pytest.mark.parametrize(("service", "named"), [
    ("committer", "the sinks' committer service died, and the output it held in memory with it"),
    ("storage", "the in-memory checkpoint storage (a Ray actor) died, and every checkpoint with it"),
])
def test_a_killed_service_held_in_memory_fails_the_job_at_once_naming_it(
        ray_session, executors: list[RayExecutor], service: str, named: str) -> None:
    progress = kill_when_running(executors, service)
    with pytest.raises(JobFailedError) as failed:
        relay_env(None).execute("job", executor="ray", progress=progress)
    assert progress.killed, "the job ended before the service was killed"
    assert named in str(failed.value) and "enable_checkpointing(storage=DIR)" in str(failed.value), str(failed.value)
    assert time.monotonic() - progress.killed[0] < 30, "the death was noticed late"


@pytest.mark.ray
def test_a_killed_in_memory_storage_fails_the_job_with_one_line_whoever_notices_first(
        ray_session, executors: list[RayExecutor]) -> None:
    """The storage and the coordinator die together: the replacement coordinator's constructor, a
    task's call or the driver's ping may notice first; the job fails with the driver's one line
    (not Ray's text of a constructor that raised, nor the task's own words)."""
    killed: list[float] = []

    def progress(info: dict[str, Any]) -> None:
        if not killed and info.get("records in", 0) >= len(ROWS) // 10 and executors:
            ray.kill(executors[-1].services.blob_store.actor, no_restart=True)
            ray.kill(executors[-1].coordinator, no_restart=True)
            killed.append(time.monotonic())

    with pytest.raises(JobFailedError) as failed:
        relay_env(None).execute("job", executor="ray", progress=progress)
    assert killed, "the job ended before the storage was killed"
    message = str(failed.value)
    assert message.startswith(f"job 'job' failed: {MEMORY_STORAGE_DIED}, and every checkpoint with it: "), message
    assert "\n" not in message and "\x1b[" not in message and "ray::" not in message, message


@pytest.mark.ray
@pytest.mark.parametrize("blocked_for", ["the whole run", "the first failover"])
def test_a_coordinator_whose_constructor_raised_is_replaced_and_the_job_fails_over_again(
        ray_session, tmp_path: Path, blocked_for: str) -> None:
    """A directory where a checkpoint's `_metadata` should be: every coordinator's constructor raises
    reading it. The job fails over again, bounded by the restart strategy, and fails with one clean
    line naming what the constructor raised; unblocked at the first failover, it finishes exactly
    once (it used to fail at once with Ray's text of the constructor: frames, colour codes, reprs)."""
    storage = tmp_path / "chk"
    blocker = storage / "job" / "chk-7" / "_metadata"
    (blocker / "x").parent.mkdir(parents=True)
    (blocker / "x").write_text("a directory where a file should be")
    env = relay_env(str(storage))
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=2, delay=0.05))

    def unblock(info: dict[str, Any]) -> None:
        if blocked_for == "the first failover" and info.get("phase") == "restarting" and blocker.exists():
            shutil.rmtree(blocker.parent)

    if blocked_for == "the whole run":
        with pytest.raises(JobFailedError) as failed:
            env.execute("job", executor="ray")
        message = str(failed.value)
        assert message.startswith("job 'job' failed after 2 restart(s): checkpoint coordinator died: the constructor "
                                  "of CoordinatorActor raised StorageError: cannot read "), message
        assert "is a directory" in message and "\n" not in message and "\x1b[" not in message, message
        return
    result = env.execute("job", executor="ray", progress=unblock)
    assert result.restarts >= 1 and not blocker.exists(), result.failures
    assert any("the constructor of CoordinatorActor raised StorageError" in f for f in result.failures), result.failures
    assert ids_once(result.output("pv"))


def nested_at_7(record: dict[str, Any]) -> dict[str, Any]:
    value: Any = 1
    for _ in range(2000 if record["id"] == 7 else 2):
        value = [value]
    return {"id": record["id"], "deep": value}


@pytest.mark.ray
@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])
def test_a_record_nested_too_deep_fails_alike_on_ray_and_the_simulator(ray_session, chaining: bool) -> None:
    def env() -> StreamEnvironment:
        built = StreamEnvironment(parallelism=1, buffer_size=8)
        if not chaining:
            built.disable_chaining()
        built.set_restart_strategy(RestartStrategy.fixed_delay(attempts=1, delay=0.01))
        built.from_collection(ROWS[:50]).map(nested_at_7, name="nest").sink_to(CollectSink("pv"))
        return built

    with pytest.raises(JobFailedError) as on_sim:
        env().execute("deep", executor="sim", seed=1)
    with pytest.raises(JobFailedError) as on_ray:
        env().execute("deep", executor="ray")
    expected = str(on_sim.value.cause)
    assert "field 'deep' of record" in expected and "nested more than 100 levels deep" in expected, expected
    task = "Source: collection[0]" if chaining else "nest[0]"
    assert f"failed without restarting: task {task} failed: {expected}" in str(on_ray.value), str(on_ray.value)
