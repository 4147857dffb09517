"""The durable `CollectSink` committer kept beside the checkpoints (`runtime.jobmaster.committer.durable`):
a job that failed for good is restored in a fresh Python process and its output is exactly once."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.storage.layout import MemoryBlobStore, StorageError
from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.committer.durable import (
    COMMITTED_DIR,
    CorruptCommitterError,
    DurableCollectCommitter,
    encode_transaction,
)
from runtime.jobmaster.result import JobFailedError
from vocabulary.fault_plan import (
    CoordinatorStorageFailure,
    SlowStorage,
    StorageWriteFailure,
    TornWrite,
)
from vocabulary.options import RestartStrategy

ROOT = Path(__file__).resolve().parents[2]

#: the job: a poison record fails the first run for good (no restarts); the restore runs clean
JOB = '''
import json, os, sys
from vocabulary.options import RestartStrategy
from operators import CollectSink
from runtime.api.environment import StreamEnvironment
from runtime.jobmaster.result import JobFailedError
from runtime.workloads.seeded import CountPerKey

ROWS = [{"id": i, "key": f"k{i % 17}"} for i in range(2400)]


def poison(record):
    if record["id"] == 1900 and os.environ.get("POISON") == "1":
        raise ValueError("poison record")
    return record


def build(parallelism, mode, storage):
    env = StreamEnvironment(parallelism=parallelism, buffer_size=8, credits=2)
    if storage is not None:
        env.enable_checkpointing(interval=0.002, storage=storage, unaligned=mode == "unaligned", retained=2,
                                 tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection(ROWS, splits=4).map(poison, name="poison").key_by("key") \\
        .process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


if __name__ == "__main__":
    phase, parallelism, mode, storage = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    env = build(parallelism, mode, storage)
    if phase == "first":
        try:
            env.execute("job", executor="sim", seed=3)
        except JobFailedError as failed:
            print(json.dumps({"failed": str(failed)[:200]}))
    else:
        result = env.restore_from(storage, job_id="job").execute("job", executor="sim", seed=4)
        print(json.dumps({"output": result.output("out")}))
'''


def run(tmp: Path, *args: str, poison: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{tmp}", "POISON": "1" if poison else "0"}
    done = subprocess.run([sys.executable, str(tmp / "durable_job.py"), *args], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


ROWS = [{"id": i, "key": f"k{i % 17}"} for i in range(2400)]


def oracle() -> Counter:
    rows = ROWS
    counts: Counter = Counter()
    out: Counter = Counter()
    for row in rows:
        counts[row["key"]] += 1
        out[(row["key"], counts[row["key"]])] += 1
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "parallelism"), [("aligned", 1), ("aligned", 3), ("unaligned", 1),
                                                    ("unaligned", 3)])
def test_a_job_failed_for_good_is_restored_exactly_once_in_a_fresh_process(tmp_path: Path, mode: str,
                                                                           parallelism: int) -> None:
    (tmp_path / "durable_job.py").write_text(JOB)
    storage = str(tmp_path / "checkpoints")
    first = run(tmp_path, "first", "2", mode, storage, poison=True)
    assert "poison record" in first["failed"]
    committed = list((tmp_path / "checkpoints" / "job" / "committed").rglob("commit-*.txn"))
    staged = list((tmp_path / "checkpoints" / "job" / "committed").rglob("staged-*.txn"))
    assert committed and staged, "the first run should have committed output and left staged transactions"
    second = run(tmp_path, "second", str(parallelism), mode, storage, poison=False)
    got = Counter((r["key"], r["count"]) for r in second["output"])
    assert got == oracle(), "output is not exactly once: " + str((got - oracle()) + (oracle() - got))[:500]


# --------------------------------------------------------------------------- the files


def test_stages_commits_and_aborts_survive_a_reopen(tmp_path: Path) -> None:
    store = FsBlobStore(str(tmp_path))
    first = DurableCollectCommitter(store, "job/committed/r1")
    first.stage("out", "out/0/1", [{"k": "a", "n": 1}])
    first.stage("out", "out/0/2", [{"k": "b", "n": 2}])
    first.stage("out", "out/1/3", [{"k": "c", "n": 3}])
    first.commit("out", "out/0/1")
    first.commit("out", "out/0/9", [{"k": "z", "n": 9}])
    assert first.abort_lingering(2, 4) == ["out/1/3"]
    again = DurableCollectCommitter(store, "job/committed/r1")
    assert again.output("out") == first.output("out") == [{"k": "a", "n": 1}, {"k": "z", "n": 9}]
    assert again.staged_transactions("out") == ["out/0/2"]
    again.commit("out", "out/0/1")  # idempotent: nothing written, nothing repeated
    again.commit("out", "out/0/2")
    assert DurableCollectCommitter(store, "job/committed/r1").output("out") == [
        {"k": "a", "n": 1}, {"k": "z", "n": 9}, {"k": "b", "n": 2}]
    assert not list(tmp_path.rglob("*.tmp-*")), "temporary files left behind"
    revived = pickle.loads(pickle.dumps(again))  # as Ray ships it
    revived.commit("out", "out/5/5", [{"k": "p", "n": 5}])
    assert DurableCollectCommitter(store, "job/committed/r1").transactions("out")[-1] == "out/5/5"


def test_a_crash_between_commit_and_unstage_keeps_the_commit_once(tmp_path: Path) -> None:
    store = FsBlobStore(str(tmp_path))
    committer = DurableCollectCommitter(store, "c")
    committer.stage("out", "out/0/1", [{"n": 1}])
    staged_file = next(p for p in store.list("c/") if "staged-" in p)
    data = store.get(staged_file)
    committer.commit("out", "out/0/1")
    store.put(staged_file, data)  # the unstage never happened
    reopened = DurableCollectCommitter(store, "c")
    assert reopened.output("out") == [{"n": 1}] and reopened.staged_transactions("out") == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign", "header"])
def test_a_damaged_or_foreign_file_is_named(tmp_path: Path, damage: str) -> None:
    store = FsBlobStore(str(tmp_path))
    DurableCollectCommitter(store, "c").commit("out", "out/0/1", [{"n": i} for i in range(50)])
    path = next(p for p in store.list("c/") if "commit-" in p)
    data = store.get(path)
    if damage == "truncate":
        store.put(path, data[:-7])
    elif damage == "flip":
        store.put(path, data[:-3] + bytes([data[-3] ^ 1]) + data[-2:])
    elif damage == "foreign":
        store.put("c/notes.txt", b"hello")
        path = "c/notes.txt"
    else:
        store.put(path, data.replace(b'"bytes"', b'"bites"', 1))
    with pytest.raises(CorruptCommitterError, match=str(tmp_path / path)):
        DurableCollectCommitter(store, "c")


def test_a_file_of_another_transaction_under_a_staged_name_is_refused(tmp_path: Path) -> None:
    store = FsBlobStore(str(tmp_path))
    store.put("c/staged-0123.txn", encode_transaction("out", "out/0/1", [{"n": 1}]))
    with pytest.raises(CorruptCommitterError, match="staged-0123.txn holds transaction 'out/0/1'"):
        DurableCollectCommitter(store, "c")


def test_jobs_without_a_checkpoint_directory_keep_the_in_memory_committer() -> None:
    from checkpoint.storage.layout import CheckpointStorage
    from runtime.jobmaster.committer.durable import committer_for

    committer = committer_for(CheckpointStorage(MemoryBlobStore()), "job", "run")
    assert type(committer) is CollectCommitter


# --------------------------------------------------------------------------- one commit per checkpoint


@pytest.mark.parametrize("durable", [False, True])
def test_a_checkpoint_commits_every_sinks_stages_up_to_it_once_and_nothing_later(tmp_path: Path,
                                                                                 durable: bool) -> None:
    committer = (DurableCollectCommitter(FsBlobStore(str(tmp_path)), "c") if durable else CollectCommitter())
    committer.stage("a", "a/0/3", [{"n": 3}])
    committer.stage("a", "a/1/4", [{"n": 4}])  # checkpoint 4 was aborted: checkpoint 5 covers it
    committer.stage("b", "b/0/5", [{"n": 5}])
    committer.stage("a", "a/0/6", [{"n": 6}])  # checkpoint 6 has not completed
    assert committer.commit_checkpoint(5) == [("a", "a/0/3"), ("a", "a/1/4"), ("b", "b/0/5")]
    assert committer.output("a") == [{"n": 3}, {"n": 4}] and committer.output("b") == [{"n": 5}]
    assert committer.staged_transactions("a") == ["a/0/6"], "a later checkpoint's stage became visible"
    assert committer.commit_checkpoint(5) == [] and committer.commit_checkpoint(4) == []
    committer.commit("a", "a/0/3")  # a restored sink commits what its state names: not repeated
    assert committer.output("a") == [{"n": 3}, {"n": 4}]
    if durable:
        again = DurableCollectCommitter(FsBlobStore(str(tmp_path)), "c")
        assert again.output("a") == [{"n": 3}, {"n": 4}] and again.output("b") == [{"n": 5}]
        assert again.staged_transactions("a") == ["a/0/6"]


def test_a_checkpoints_commit_is_one_durable_write_whatever_the_number_of_sinks(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    store = FsBlobStore(str(tmp_path))
    committer = DurableCollectCommitter(store, "c")
    for subtask in range(4):
        committer.stage("out", f"out/{subtask}/7", [{"n": subtask}])
    writes, deletes = [], []
    monkeypatch.setattr(store, "put_durably", lambda path, data: writes.append(path) or FsBlobStore.put(
        store, path, data))
    monkeypatch.setattr(store, "delete", lambda path: deletes.append(path))
    committer.commit_checkpoint(7)
    assert len(writes) == 1 and "commit-" in writes[0] and deletes == [], (writes, deletes)
    assert sorted(r["n"] for r in DurableCollectCommitter(store, "c").output("out")) == [0, 1, 2, 3]


def test_a_stage_arriving_after_its_checkpoint_was_aborted_is_never_committed(tmp_path: Path) -> None:
    # a dying attempt's writer sends its stage of checkpoint 4 after the recovery aborted 3 < id < 6
    # (on Ray: `CommitterService.abort_lingering(3, 6, fence_before=6)`)
    for committer in (CollectCommitter(), DurableCollectCommitter(FsBlobStore(str(tmp_path)), "c")):
        committer.stage("out", "out/0/3", [{"n": 3}])
        assert committer.abort_lingering(3, 6) == []
        committer.fence(3, 6)
        committer.stage("out", "out/1/4", [{"n": 4}])  # late: dropped
        committer.stage("out", "out/1/6", [{"n": 6}])  # the new attempt's
        committer.commit_checkpoint(6)
        assert committer.output("out") == [{"n": 3}, {"n": 6}], type(committer).__name__
        assert committer.staged_transactions("out") == []
    assert DurableCollectCommitter(FsBlobStore(str(tmp_path)), "c").output("out") == [{"n": 3}, {"n": 6}]


@pytest.mark.parametrize("damage", ["flip", "staged-missing"])
def test_a_damaged_checkpoint_commit_or_its_missing_records_are_named(tmp_path: Path, damage: str) -> None:
    store = FsBlobStore(str(tmp_path))
    committer = DurableCollectCommitter(store, "c")
    committer.stage("out", "out/0/1", [{"n": 1}])
    committer.commit_checkpoint(1)
    commit = next(p for p in store.list("c/") if "commit-" in p)
    if damage == "flip":
        data = store.get(commit)
        store.put(commit, data[:-3] + bytes([data[-3] ^ 1]) + data[-2:])
        match = f"{tmp_path / commit} is corrupt"
    else:
        store.delete(next(p for p in store.list("c/") if "staged-" in p))
        match = f"{tmp_path / commit} commits transaction 'out/0/1' of sink 'out', whose staged file"
    with pytest.raises(CorruptCommitterError, match=match):
        DurableCollectCommitter(store, "c")


def test_a_committer_error_reads_as_a_sentence_naming_the_file(tmp_path: Path) -> None:
    # regression: "[Errno committer file ... is corrupt: ...] /path" (OSError's errno form)
    store = FsBlobStore(str(tmp_path))
    (tmp_path / "job" / "committed" / "r1").mkdir(parents=True)
    bad = tmp_path / "job" / "committed" / "r1" / "commit-0000000001.txn"
    bad.write_bytes(b"not a committer file")
    with pytest.raises(CorruptCommitterError) as caught:
        DurableCollectCommitter(store, "job/committed/r1")
    assert str(caught.value).startswith(f"committer file {bad} is corrupt: ")
    assert "Errno" not in str(caught.value) and caught.value.path == str(bad)
    again = pickle.loads(pickle.dumps(caught.value))  # Ray ships it between processes
    assert str(again) == str(caught.value) and again.path == caught.value.path
# --------------------------------------------------------------------------- a stage that cannot be written


@pytest.mark.parametrize("what", ["stage", "commit", "checkpoint"])
def test_a_write_that_fails_leaves_nothing_recorded(tmp_path: Path, what: str) -> None:
    """A stage or commit whose file cannot be written (a full disk, a blocked path) raises and is
    not recorded: nothing commits a transaction whose records are not on disk."""
    store = FsBlobStore(str(tmp_path))
    committer = DurableCollectCommitter(store, "c")
    committer.stage("out", "out/0/1", [{"n": 1}])
    if what == "stage":
        blocked = committer._staged_path("out", "out/0/2")
    else:
        blocked = "c/commit-0000000001.txn"
    (tmp_path / blocked).mkdir(parents=True)
    with pytest.raises(StorageError, match=f"cannot write {tmp_path / blocked}"):
        if what == "stage":
            committer.stage("out", "out/0/2", [{"n": 2}])
        elif what == "commit":
            committer.commit("out", "out/0/1")
        else:
            committer.commit_checkpoint(1)
    (tmp_path / blocked).rmdir()
    if what == "stage":
        assert committer.staged_transactions("out") == ["out/0/1"]
        assert committer.commit_checkpoint(2) == [("out", "out/0/1")]
    else:
        assert committer.output("out") == [] and committer.staged_transactions("out") == ["out/0/1"]
        committer.commit_checkpoint(1)  # the next try writes it
    assert DurableCollectCommitter(store, "c").output("out") == committer.output("out") == [{"n": 1}]


def relay_with_storage(storage: str, *, chaining: bool) -> StreamEnvironment:
    """source -> map -> sink "pv": one task per split when chained (the sink snapshots when the
    coordinator triggers the source), three vertices when not."""
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2)
    if not chaining:
        env.disable_chaining()
    env.enable_checkpointing(interval=0.002, storage=storage, tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001))
    env.from_collection(ROWS, splits=2).map(lambda r: {"id": r["id"]}, name="relay").sink_to(CollectSink("pv"))
    return env


def ids_once(output: list[dict]) -> bool:
    return sorted(r["id"] for r in output) == list(range(len(ROWS)))


def block_stages(storage: Path, job: str, run: str, checkpoint_id: int) -> list[Path]:
    """Directories where the sinks' stage files of `checkpoint_id` go: their writes fail, as on a
    full disk or a path someone blocked."""
    committer_dir = f"{job}/{COMMITTED_DIR}/{run}"
    paths = []
    for subtask in (0, 1):
        name = hashlib.sha256(f"pv\0pv/{subtask}/{checkpoint_id}".encode()).hexdigest()[:32]
        path = storage / committer_dir / f"staged-{name}.txn"
        path.mkdir(parents=True)
        paths.append(path)
    return paths


STORAGE_FAULTS = [
    pytest.param(FaultPlan(), id="no-other-fault"),
    pytest.param(FaultPlan.of(StorageWriteFailure(nth=1)), id="StorageWriteFailure"),
    pytest.param(FaultPlan.of(TornWrite(nth=3)), id="TornWrite"),
    pytest.param(FaultPlan.of(CoordinatorStorageFailure(nth=4)), id="CoordinatorStorageFailure"),
    pytest.param(FaultPlan.of(SlowStorage(at_fraction=0.2, duration=0.01)), id="SlowStorage"),
]


@pytest.mark.parametrize("faults", STORAGE_FAULTS)
@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])
def test_a_stage_that_cannot_be_written_fails_the_attempt_and_is_never_committed(
        tmp_path: Path, faults: FaultPlan, chaining: bool) -> None:
    """The sinks' stage of checkpoint 2 cannot be written: the attempt fails over (never a raw
    StorageError out of execute, never a declined checkpoint whose transaction the next one commits
    without its records), the output is exactly once, and the directory restores in a new execution
    (its commit files name only transactions whose records are on disk)."""
    storage = tmp_path / "chk"
    blocked = block_stages(storage, "job", "r1", 2)
    result = relay_with_storage(str(storage), chaining=chaining).execute(
        "job", executor="sim", seed=2, faults=faults, run_id="r1")
    assert any(f"cannot write {blocked[0]}" in f or f"cannot write {blocked[1]}" in f for f in result.failures), \
        result.failures
    assert ids_once(result.output("pv"))
    for path in blocked:
        path.rmdir()
    restored = relay_with_storage(str(storage), chaining=chaining).restore_from(str(storage), job_id="job")
    assert ids_once(restored.execute("job", executor="sim", seed=3).output("pv"))


@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])
def test_a_commit_that_cannot_be_written_fails_over_then_fails_the_job_naming_the_file(
        tmp_path: Path, chaining: bool) -> None:
    """The committer's first commit file cannot be written, ever (a full disk would do the same):
    each attempt fails over (the restored sinks try to commit again) until the restart strategy
    gives up, with a JobFailedError naming the file — it was a raw StorageError out of execute.
    Nothing was committed, so the directory restores once the path is free."""
    storage = tmp_path / "chk"
    blocked = storage / "job" / COMMITTED_DIR / "r1" / "commit-0000000001.txn"
    blocked.mkdir(parents=True)
    with pytest.raises(JobFailedError, match=f"cannot write {blocked}") as failed:
        relay_with_storage(str(storage), chaining=chaining).execute("job", executor="sim", seed=2, run_id="r1")
    assert "failed after 20 restart(s)" in str(failed.value) and isinstance(failed.value.cause, StorageError)
    blocked.rmdir()
    restored = relay_with_storage(str(storage), chaining=chaining).restore_from(str(storage), job_id="job")
    assert ids_once(restored.execute("job", executor="sim", seed=3).output("pv"))
