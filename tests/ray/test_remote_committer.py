"""`RemoteCommitter` with a sender thread: commits leave the caller's thread, `drain` still waits."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from ray_jobs import expected_counts, pageview_env, pageview_rows

from runtime.jobmaster.committer.collect import transaction_checkpoint
from runtime.jobmaster.committer.durable import decode_commit, decode_transaction
from runtime.jobmaster.result import JobFailedError
from runtime.ray.services import CommitterService, RemoteCommitter
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import CoordinatorCrashBeforeNotify, FaultPlan, TaskCrash
from vocabulary.options import RestartStrategy


@pytest.mark.ray
def test_drain_waits_for_commits_still_queued_on_the_sender_thread(ray_session) -> None:
    service = ray_session.remote(num_cpus=0)(CommitterService).remote()
    sender = ThreadPoolExecutor(1)
    committer = RemoteCommitter(service, sender=sender)
    try:
        committer.stage("pv", "pv-1", [{"i": 1}, {"i": 2}])
        queued, sent = committer.take_staged()
        ray_session.get(committer.send(queued) + sent)

        release = threading.Event()
        sender.submit(release.wait)  # the sender is busy: the commit below waits behind it
        committer.commit("pv", "pv-1")
        drained = threading.Event()
        drainer = threading.Thread(target=lambda: (committer.drain(), drained.set()))
        drainer.start()
        assert not drained.wait(0.3), "drain returned before the commit was even submitted"
        release.set()
        assert drained.wait(30), "drain did not return after the sender went on"
        assert ray_session.get(service.committer.remote()).output("pv") == [{"i": 1}, {"i": 2}]
    finally:
        release.set()
        sender.shutdown()
        ray_session.kill(service)


@pytest.mark.ray
def test_a_commit_after_stages_still_queued_sends_them_first(ray_session) -> None:
    service = ray_session.remote(num_cpus=0)(CommitterService).remote()
    sender = ThreadPoolExecutor(1)
    committer = RemoteCommitter(service, sender=sender)
    try:
        # no snapshot took the stage (checkpointing off: the end of input stages and commits)
        committer.stage("pv", "pv-7", [{"i": 7}])
        committer.commit("pv", "pv-7")
        committer.drain()
        assert ray_session.get(service.committer.remote()).output("pv") == [{"i": 7}]
    finally:
        sender.shutdown()
        ray_session.kill(service)


@pytest.mark.ray
def test_a_ray_job_keeps_its_committer_beside_the_checkpoints(ray_session, tmp_path) -> None:
    # the Ray job fails for good; a new environment (no committer passed) restores its directory
    # and finds the transactions the Ray sinks staged in the durable committer
    rows = pageview_rows(6000)
    env = pageview_env(rows, storage=str(tmp_path / "chk"), interval=0.02, buffer_size=16)
    env.set_restart_strategy(RestartStrategy.no_restart())
    with pytest.raises(JobFailedError):
        env.execute("durable", executor="ray", faults=FaultPlan.of(TaskCrash(task="count[0]", at_fraction=0.6)))
    files = list((tmp_path / "chk" / "durable" / "committed").rglob("*.txn"))
    assert any(f.name.startswith("commit-") for f in files), files
    again = pageview_env(rows, storage=str(tmp_path / "chk2")).restore_from(str(tmp_path / "chk"), job_id="durable")
    result = again.execute("durable", executor="sim", seed=1)
    assert multiset(result.output("pv")) == expected_counts(rows)


@pytest.mark.ray
@pytest.mark.parametrize("plan", [
    FaultPlan(),
    # the coordinator dies with a checkpoint durable and uncommitted; a sink fails later: the
    # restored sinks commit what the dead coordinator never did, nothing twice
    FaultPlan.of(CoordinatorCrashBeforeNotify(nth=1), TaskCrash(task="count[1]", at_fraction=0.6)),
], ids=["none", "coordinator-crash-and-task-crash"])
def test_ray_commits_each_completed_checkpoint_once_for_every_sink(ray_session, tmp_path, plan) -> None:
    """Flink's global committer on Ray: the coordinator commits each completed checkpoint in one
    call, one commit file naming every sink subtask's transactions of it, never a checkpoint not
    (yet) completed; no transaction is committed twice, none is lost across the failovers."""
    rows = pageview_rows(4000)
    env = pageview_env(rows, storage=str(tmp_path / "chk"), interval=0.05, buffer_size=16)
    result = env.execute("global", executor="ray", faults=plan)
    assert multiset(result.output("pv")) == expected_counts(rows)
    assert (result.restarts > 0) == bool(plan.faults), result.failures
    completed = {c.id for c in result.completed_checkpoints}
    restored = max([c for c in result.restored_checkpoints if c is not None], default=0)
    seen: list[str] = []
    checkpoint_files = 0
    for path in sorted((tmp_path / "chk" / "global" / "committed").rglob("commit-*.txn")):
        data = path.read_bytes()
        if data.startswith(b"barrierflow-commit 1\n"):
            checkpoint_files += 1
            header = json.loads(data.split(b"\n")[1])
            named = decode_commit(data, str(path))
            assert header["checkpoint"] in completed, (path, header, completed)
            assert all(transaction_checkpoint(txn) <= header["checkpoint"] for _, txn in named), named
            seen += [txn for _, txn in named]
        else:
            _, txn, _ = decode_transaction(data, str(path))
            # one transaction per file: records after the final checkpoint, or what a restored sink
            # commits from its state (the coordinator that completed it died first)
            assert "end-after-" in txn or transaction_checkpoint(txn) <= restored, (path.name, txn)
            seen.append(txn)
    assert len(seen) == len(set(seen)), "a transaction was committed twice"
    assert 0 < checkpoint_files <= len(completed)
