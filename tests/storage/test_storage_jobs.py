"""Whole jobs on the simulator with checkpoint storage on disk: exactly-once with the incremental
backend, corruption fallback, rescaling from a checkpoint directory, snapshot cancellation, the
`checkpoints` CLI."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from operators import CollectSink
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.cli import main as cli
from runtime.jobmaster.committer.collect import CollectCommitter, UnknownTransactionError
from runtime.jobmaster.result import JobFailedError
from runtime.sim.executor import SimExecutor
from runtime.sim.network import NetworkOptions
from runtime.workloads.seeded import SINK, CountPerKey, build_job, make_env, multiset, random_spec
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

BACKENDS = {
    "incremental": dict(state_backend="incremental"),
    "incremental+merge": dict(state_backend="incremental", file_merging=True),
    "memory+merge": dict(file_merging=True),
}


def spec_env(spec, storage: str | None, **options) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=spec.parallelism, buffer_size=spec.buffer_size, credits=spec.credits,
                            buffer_timeout=0.001)
    env.enable_checkpointing(interval=spec.interval, max_concurrent=2, tolerable_failures=10**6, storage=storage,
                             retained=2, **options)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=50, delay=0.001))
    build_job(spec, env)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize(("job_seed", "sim_seed", "crashes", "coordinator_crashes"),
                         [(0, 0, 2, 0), (3, 5, 1, 1), (7, 2, 3, 0), (11, 9, 0, 1), (93, 93, 1, 0)])
def test_exactly_once_with_incremental_and_merged_storage(tmp_path: Path, backend: str, job_seed: int,
                                                          sim_seed: int, crashes: int,
                                                          coordinator_crashes: int) -> None:
    spec = random_spec(job_seed)
    reference = make_env(spec, mode="none").execute("job", executor="sim", seed=0)
    faults = FaultPlan.random(seed=sim_seed, crashes=crashes, coordinator_crashes=coordinator_crashes)
    result = spec_env(spec, str(tmp_path), **BACKENDS[backend]).execute("job", executor="sim", seed=sim_seed,
                                                                        faults=faults)
    assert multiset(result.output(SINK)) == multiset(reference.output(SINK)), result.replay
    assert result.final_state == reference.final_state, result.replay
    assert cli(["checkpoints", "gc", str(tmp_path)]) == 0
    assert cli(["checkpoints", "ls", str(tmp_path)]) == 0


# --------------------------------------------------------------------------- corruption

ROWS = [{"id": i, "key": f"k{i % 37}"} for i in range(3000)]


def count_env(storage: Path, parallelism: int = 2, interval: float = 0.002, **options) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=16)
    env.enable_checkpointing(interval=interval, storage=str(storage), retained=2, tolerable_failures=100, **options)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.001))
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


def reference_run():
    env = StreamEnvironment(parallelism=1)
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env.execute("ref", executor="sim")


class CorruptingSim(SimExecutor):
    """When checkpoint `at` completes, damage `target(...)` files and crash a task before any
    task hears of the completion (so no sink committed it and the fallback is exactly-once)."""

    def __init__(self, *args, at: int, target: str, crash_after: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.damage_at, self.target, self.crash_after = at, target, crash_after
        self.damaged: list[str] = []
        link = self.coordinator_link
        completed_hook = link.completed

        def on_completed(completed) -> None:  # the listeners, then the damage
            completed_hook(completed)
            self.damage(completed)

        link.completed = on_completed  # type: ignore[method-assign]

    def damage(self, completed) -> None:
        if completed.checkpoint_id != self.damage_at or self.damaged:
            return
        store = self.store.blob_store if hasattr(self.store, "blob_store") else self.storage.blob_store
        older = {p for c in self.store.get_all_checkpoints()[:-1] for p in c.referenced_paths()}
        if self.target == "metadata":
            paths = [completed.metadata_path]
        elif self.target == "all":
            paths = sorted({p for c in self.store.get_all_checkpoints() for p in c.referenced_paths()})
        else:
            paths = [p for p in completed.referenced_paths() if p not in older and "count" in p][:1]
        for path in paths:
            data = bytearray(store.get(path))
            data[len(data) // 2] ^= 0xFF
            store.put(path, bytes(data))
        self.damaged = paths
        if self.crash_after:  # once the sinks heard of the completion and committed its output
            self.at(self.now + self.crash_after,
                    lambda: self.fault_actions.crash_task(self.task_ids[-1], "crash later"), None, "fault")
        else:
            self.fault_actions.crash_task(self.task_ids[-1], "crash right after a checkpoint completed")


@pytest.mark.parametrize("backend", ["memory", "incremental+merge"])
@pytest.mark.parametrize("target", ["state", "metadata"])
def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, caplog, backend: str,
                                                                  target: str) -> None:
    options = {} if backend == "memory" else BACKENDS[backend]
    graph = count_env(tmp_path, **options).get_job_graph("job")
    sim = CorruptingSim(graph, seed=4, at=3, target=target)
    with caplog.at_level(logging.WARNING, logger="runtime.jobmaster.restore.state_assignment"):
        result = sim.run()
    assert sim.damaged
    warnings = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert any(sim.damaged[0] in w and "checkpoint 3" in w for w in warnings), warnings
    expected = reference_run()
    assert multiset(result.output("out")) == multiset(expected.output("out"))
    assert result.final_state == expected.final_state


@pytest.mark.parametrize("backend", ["memory", "incremental+merge"])
def test_no_fallback_past_a_checkpoint_whose_output_the_sinks_committed(tmp_path: Path, backend: str) -> None:
    # regression: the fallback to checkpoint 2 replayed records whose effects checkpoint 3's
    # committed transactions already showed, and the job "succeeded" with duplicates
    options = {} if backend == "memory" else BACKENDS[backend]
    graph = count_env(tmp_path, **options).get_job_graph("job")
    sim = CorruptingSim(graph, seed=4, at=3, target="state", crash_after=0.004)
    with pytest.raises(JobFailedError, match=r"cannot restart from checkpoint 2: the sinks already committed "
                       r"the output of checkpoint 3 \(transaction 'out/\d/3'\).*newer checkpoints could not "
                       r"be restored: checkpoint 3: ") as failed:
        sim.run()
    assert sim.damaged and "out/0/3" in sim.committer.transactions("out")
    assert sim.restart_backoff.num_failures == 1, "a restart must not get past it"
    assert len(sim.failures) == 1
    # what was committed before the failure is never duplicated
    expected = multiset(reference_run().output("out"))
    assert not multiset(sim.committer.output("out")) - expected
    assert "restore checkpoint 3" in str(failed.value).lower()


def test_a_transaction_conflict_fails_the_job_without_restarting(tmp_path: Path) -> None:
    # regression: the conflict fired once, then the restart's new ids got past it (duplicates)
    committer = CollectCommitter()
    committer.stage("out", "out/0/1", [{"id": -1}])
    committer.commit("out", "out/0/1")  # committed by an earlier execution, unknown to this one's store

    class LateCommitter(CollectCommitter):
        """Hides its committed output from the deployment check: only the stage can see it."""

        def latest_committed(self):
            return None

    late = LateCommitter()
    late.__dict__.update(committer.__dict__)
    env = count_env(tmp_path)
    with pytest.raises(JobFailedError, match=r"failed without restarting: .*'out/0/1' is already committed"):
        env.execute("job", executor="sim", seed=4, committer=late)


def test_a_new_run_with_a_committer_holding_newer_output_is_refused(tmp_path: Path) -> None:
    earlier = count_env(tmp_path / "a").execute("job", executor="sim", seed=4)
    env = count_env(tmp_path / "b")  # a new run from scratch with the earlier run's committer
    with pytest.raises(JobFailedError, match="cannot restart from the beginning .*: the sinks already "
                       "committed the output of checkpoint") as failed:
        env.execute("job", executor="sim", seed=4, committer=earlier.committer)
    assert "restart(s)" not in str(failed.value)


def test_no_valid_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    graph = count_env(tmp_path, **BACKENDS["incremental+merge"]).get_job_graph("job")
    sim = CorruptingSim(graph, seed=4, at=3, target="all")
    with pytest.raises(JobFailedError, match="no retained checkpoint can be restored: checkpoint 3: .*checkpoint 2"):
        sim.run()


# --------------------------------------------------------------------------- rescaling


def partial_run(storage: Path, parallelism: int, **options) -> CollectCommitter:
    """Run until a task crashes for good halfway; return its external system (the committer)."""
    env = count_env(storage, parallelism, interval=0.0005, **options)
    env.set_restart_strategy(RestartStrategy.no_restart())
    crash = TaskCrash(task="count[0]", at=0.011)  # after checkpoint 1 completed, before the job ends
    sim = SimExecutor(env.get_job_graph("job"), seed=1, faults=FaultPlan.of(crash))
    with pytest.raises(JobFailedError):
        sim.run()
    assert sim.store.get_latest_checkpoint() is not None, "the crash came before any checkpoint completed"
    return sim.committer


@pytest.mark.parametrize("backend", ["memory", "incremental+merge", "incremental"])
@pytest.mark.parametrize(("before", "after"), [(2, 3), (4, 2)])
def test_rescale_from_a_checkpoint_directory_is_exactly_once(tmp_path: Path, backend: str, before: int,
                                                             after: int) -> None:
    options = {} if backend == "memory" else BACKENDS[backend]
    first = partial_run(tmp_path, before, **options)
    env = count_env(tmp_path / "second", after, **options).restore_from(str(tmp_path), job_id="job")
    # the same external system: it holds what the first execution staged but did not commit
    lingering = first.staged_transactions("out")
    result = env.execute("job", executor="sim", seed=2, committer=first)
    expected = reference_run()
    assert multiset(result.output("out")) == multiset(expected.output("out"))
    assert result.final_state == expected.final_state
    # what the first execution staged past the restored checkpoint was aborted, not left behind
    # (regression: found by the swarm search, seeds 112, 779, 1337)
    assert lingering and result.committer.staged_transactions("out") == []


def test_restoring_staged_transactions_without_their_external_system_is_a_clear_error(tmp_path: Path) -> None:
    first = partial_run(tmp_path, 2)
    assert first.staged_transactions("out"), "the crash should leave a staged, uncommitted transaction"
    shutil.rmtree(tmp_path / "job" / "committed")  # the durable committer beside the checkpoints is lost
    env = count_env(tmp_path / "second", 2).restore_from(str(tmp_path), job_id="job")
    with pytest.raises(JobFailedError, match=r"failed without restarting: .*'out/\d/1' was committed but never "
                                             r"staged.*committer=") as failed:
        env.execute("job", executor="sim", seed=2)  # a fresh committer: the staged records are elsewhere
    assert isinstance(failed.value.cause, UnknownTransactionError)


def test_restore_from_names_a_missing_job(tmp_path: Path) -> None:
    from checkpoint.io.tools import CheckpointToolError

    with pytest.raises(CheckpointToolError, match="no jobs"):
        StreamEnvironment().restore_from(str(tmp_path))


# --------------------------------------------------------------------------- cancellation


@pytest.mark.parametrize("backend", ["incremental+merge", "memory+merge"])
def test_aborted_checkpoints_stop_their_uploads_on_every_task(tmp_path: Path, backend: str) -> None:
    env = StreamEnvironment(parallelism=2, buffer_size=16)
    env.enable_checkpointing(interval=0.002, timeout=0.006, max_concurrent=3, storage=str(tmp_path),
                             tolerable_failures=10**6, **BACKENDS[backend])
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    # slow uploads: most checkpoints time out while their snapshots are being written
    sim = SimExecutor(env.get_job_graph("job"), seed=3, network=NetworkOptions(write_latency=0.003), max_time=5.0)
    files = sim.writer.files
    late: list[tuple[str, int]] = []
    aborted_seen: set[tuple[str, int]] = set()
    notify = files.notify_aborted

    def on_abort(task_id, checkpoint_id):
        aborted_seen.add((str(task_id), checkpoint_id))
        notify(task_id, checkpoint_id)

    write = files.write

    def on_write(snapshot):
        if (str(snapshot.task_id), snapshot.checkpoint_id) in aborted_seen:
            late.append((str(snapshot.task_id), snapshot.checkpoint_id))
        return write(snapshot)

    files.notify_aborted, files.write = on_abort, on_write
    result = sim.run()
    aborted = {c.id for c in result.aborted_checkpoints}
    assert aborted and not late, late
    written = {(r.task, r.checkpoint_id) for r in files.history}
    assert not {(t, c) for t, c in written if c in aborted} & aborted_seen - {(t, c) for t, c in written}
    leftovers = [p for p in (str(x) for x in tmp_path.rglob("*")) if any(f"chk-{c}/" in p or f"chk-{c}-" in p
                                                                        for c in aborted)]
    assert not leftovers, leftovers
    assert multiset(result.output("out")) == multiset(reference_run().output("out"))


# --------------------------------------------------------------------------- CLI


def test_checkpoints_cli_lists_shows_and_collects_orphans(tmp_path: Path, capsys) -> None:
    first = count_env(tmp_path, **BACKENDS["incremental+merge"]).execute("job", executor="sim", seed=5)
    committed = first.committer.transactions("out")
    orphan = tmp_path / "job" / "shared" / "count[0]" / "chk-999-0.merged"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left by a crashed task")
    assert cli(["checkpoints", "ls", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    ids = [int(line.split()[0]) for line in listing.splitlines() if line.strip().split(" ")[0].isdigit()
           and " yes " in line]
    assert len(ids) == 2, listing
    assert cli(["checkpoints", "show", str(tmp_path), str(ids[-1])]) == 0
    assert "valid" in capsys.readouterr().out
    assert cli(["checkpoints", "gc", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "chk-999-0.merged" in out and not orphan.exists()
    assert cli(["checkpoints", "gc", str(tmp_path)]) == 0
    assert "removed 0 orphan" in capsys.readouterr().out
    restored = count_env(tmp_path / "again").restore_from(str(tmp_path)).execute(
        "job", executor="sim", seed=1, committer=first.committer)
    # restored from the final checkpoint: nothing left to do (its pending commits are no-ops)
    assert restored.committer.transactions("out") == committed
    assert cli(["checkpoints", "show", str(tmp_path), "12345"]) == 2  # no such checkpoint: a usage error
