"""The durable committer's folder does not grow with every restore, and `checkpoints gc` covers it:
a restore carries over only what it needs of the run it restores (the committed output as one
file, the transactions staged up to the restored checkpoint), and gc removes a run's folder once no
valid checkpoint of that run is left, and the staged transactions no retained checkpoint can
commit."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from checkpoint.completed import CompletedCheckpoint
from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.tools import collect_garbage, load_checkpoint, open_checkpoints
from checkpoint.storage.layout import CheckpointStorage
from checkpoint.storage.store import RUN_ID_PROPERTY
from operators import CollectSink
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.jobmaster.committer.durable import DurableCollectCommitter, committer_for
from runtime.jobmaster.result import JobFailedError
from runtime.workloads.seeded import CountPerKey
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 13}"} for i in range(3000)]


def restored_checkpoint(run: str, checkpoint_id: int) -> CompletedCheckpoint:
    return CompletedCheckpoint("job", checkpoint_id, 0.0, 0.0, {}, properties={RUN_ID_PROPERTY: run})


def test_a_restore_carries_over_the_committed_output_and_the_stages_it_can_commit(tmp_path: Path) -> None:
    store = FsBlobStore(str(tmp_path))
    old = DurableCollectCommitter(store, "job/committed/r1")
    for checkpoint in range(1, 31):  # thirty commits, of two sinks
        old.stage("out", f"out/0/{checkpoint}", [{"n": checkpoint}])
        old.stage("side", f"side/0/{checkpoint}", [{"m": -checkpoint}])
        old.commit_checkpoint(checkpoint)
    old.commit("out", "out/0/end-after-30", [{"n": 99}])
    for checkpoint in (31, 32, 33):  # staged for checkpoints 31..33; the restore is of 32
        old.stage("out", f"out/1/{checkpoint}", [{"n": checkpoint}])
    files_before = len(store.list("job/committed/r1/"))
    storage = CheckpointStorage(store)
    new = committer_for(storage, "job", "r2", (restored_checkpoint("r1", 32), storage))
    carried = store.list("job/committed/r2/")
    assert files_before > 60 and len(carried) == 3, carried  # one commit file and the stages up to 32
    assert new.output("out") == old.output("out") and new.output("side") == old.output("side")
    assert new.transactions("out") == old.transactions("out")
    assert new.staged_transactions("out") == ["out/1/31", "out/1/32"]
    assert new.latest_committed() == old.latest_committed()
    new.commit("out", "out/1/31")  # what the restored sink commits
    new.commit("out", "out/0/7")  # committed already: not repeated
    again = DurableCollectCommitter(store, "job/committed/r2")
    assert again.output("out") == old.output("out") + [{"n": 31}]
    again_three = committer_for(storage, "job", "r3", (restored_checkpoint("r2", 40), storage))
    assert len(store.list("job/committed/r3/")) == 2  # not r2's files plus r1's again
    assert again_three.output("out") == again.output("out")


def fragile(storage: Path, parallelism: int = 2) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=8)
    env.enable_checkpointing(interval=0.002, storage=str(storage), retained=2)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection(ROWS, splits=2).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


def reference() -> Counter:
    env = StreamEnvironment(parallelism=1)
    env.from_collection(ROWS, splits=2).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return Counter(map(repr, env.execute("job", executor="sim").output("out")))


def run_folders(root: Path) -> dict[str, set[str]]:
    committed = root / "job" / "committed"
    return {run.name: {p.name for p in run.iterdir()} for run in committed.iterdir()}


@pytest.mark.slow
def test_a_chain_of_restores_copies_no_earlier_runs_files_and_stays_exactly_once(tmp_path: Path) -> None:
    # regression: every restore copied the whole committed/<run> folder (34 -> 73 -> 99 files)
    runs = []
    for attempt in range(4):  # a run that fails for good, two restores that fail too, one that ends
        env = fragile(tmp_path) if attempt == 0 else fragile(tmp_path).restore_from(str(tmp_path))
        crash = FaultPlan.of(TaskCrash(task="count[0]", after_records=600 if attempt == 0 else 400))
        if attempt < 3:
            with pytest.raises(JobFailedError):
                env.execute("job", executor="sim", seed=attempt, faults=crash)
            runs.append(load_checkpoint(str(tmp_path))[0].properties[RUN_ID_PROPERTY])
        else:
            result = env.execute("job", executor="sim", seed=attempt)
            runs.append(result.run_id)
    assert len(set(runs)) == 4, "each restore should have taken a checkpoint of its own"
    assert Counter(map(repr, result.output("out"))) == reference()
    committed = tmp_path / "job" / "committed"
    for earlier, later in zip(runs, runs[1:]):
        commits = {p.read_bytes() for p in (committed / earlier).glob("commit-*")}
        copied = [p.name for p in (committed / later).glob("commit-*") if p.read_bytes() in commits]
        assert not copied, f"run {later} holds copies of run {earlier}'s commit files: {copied}"
        carried = [p for p in (committed / later).glob("commit-*") if p.read_bytes().startswith(b"barrierflow-carried")]
        assert len(carried) == 1, f"run {later} should start from one carried-over commit file"


def test_gc_removes_committer_folders_no_checkpoint_can_restore_and_unreachable_stages(tmp_path: Path) -> None:
    with pytest.raises(JobFailedError):
        fragile(tmp_path).execute("job", executor="sim", seed=1,
                                  faults=FaultPlan.of(TaskCrash(task="count[0]", after_records=700)))
    newest = load_checkpoint(str(tmp_path))[0]
    run = newest.properties[RUN_ID_PROPERTY]
    committed = tmp_path / "job" / "committed"
    storage = CheckpointStorage(FsBlobStore(str(tmp_path)))
    live = DurableCollectCommitter(storage.blob_store, f"job/committed/{run}")
    live.stage("out", f"out/0/{newest.checkpoint_id + 5}", [{"n": 1}])  # no retained checkpoint can commit it
    shutil.copytree(committed / run, committed / "20200101T000000-dead00")  # a run without a checkpoint
    kept = {p.name for p in (committed / run).iterdir()}
    dry = collect_garbage(open_checkpoints(str(tmp_path)), "job", dry_run=True)
    report = collect_garbage(open_checkpoints(str(tmp_path)), "job")
    assert sorted(dry.removed) == sorted(report.removed)
    removed = {path for path, _ in report.removed}
    assert not (committed / "20200101T000000-dead00").exists()
    assert f"job/committed/{run}/{live._staged_path('out', f'out/0/{newest.checkpoint_id + 5}').rpartition('/')[2]}" \
        in removed
    assert {p.name for p in (committed / run).iterdir()} == kept - {n for n in kept if f"job/committed/{run}/{n}"
                                                                     in removed}
    result = fragile(tmp_path).restore_from(str(tmp_path)).execute("job", executor="sim", seed=2)
    assert Counter(map(repr, result.output("out"))) == reference()
