"""One writer per job directory (Flink's rule for a job's checkpoint directory): a running job holds
`<dir>/<job>/_lease` and keeps it fresh; a second run on a directory a live run holds fails at once
naming the holder; `barrierflow checkpoints gc` refuses to touch a running job; a killed run's
lease lapses (at once on its own host once its process is gone, else after its timeout)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.lease import LEASE_FILE, CheckpointDirectoryInUseError, JobLease, LeaseLostError
from checkpoint.io.tools import JobRunningError, collect_garbage, list_checkpoints, open_checkpoints
from checkpoint.lease import Lease, LeaseVerdict, judge
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore
from operators import CollectSink
from runtime.api.environment import StreamEnvironment
from runtime.cli import main as cli
from runtime.jobmaster.result import JobFailedError
from runtime.sim.executor import SimExecutor
from runtime.workloads.seeded import CountPerKey
from vocabulary.options import RestartStrategy

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"id": i, "key": f"k{i % 17}"} for i in range(3000)]


def job_env(storage: Path | None) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=16)
    env.enable_checkpointing(interval=0.002, storage=str(storage) if storage else None, retained=2)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection(ROWS, splits=2).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


def expected() -> Counter:
    return Counter(map(repr, job_env(None).execute("job", executor="sim", seed=1).output("out")))


def lease_of(root: Path) -> dict:
    return json.loads((root / "job" / LEASE_FILE).read_bytes())


# --------------------------------------------------------------------------- the decision (pure)


def lease(**changes) -> Lease:
    fields = dict(holder="run r1", run_id="r1", host="h", pid=7, pid_namespace="ns", since=100.0, renewed=100.0,
                  timeout=30.0, token="t1")
    return Lease(**{**fields, **changes})


def test_who_may_take_a_lease() -> None:
    assert judge(None, token="me", now=0.0, alive=None) is LeaseVerdict.FREE
    assert judge(lease(token="me"), token="me", now=1e9, alive=False) is LeaseVerdict.OURS
    assert judge(lease(), token="me", now=129.0, alive=None) is LeaseVerdict.HELD  # renewed 29 s ago
    assert judge(lease(), token="me", now=131.0, alive=None) is LeaseVerdict.LAPSED  # past its timeout
    assert judge(lease(), token="me", now=101.0, alive=True) is LeaseVerdict.HELD
    assert judge(lease(), token="me", now=101.0, alive=False) is LeaseVerdict.LAPSED  # its process is gone
    assert judge(lease(renewed=200.0), token="me", now=101.0, alive=None) is LeaseVerdict.HELD  # clocks apart


def test_a_lease_round_trips_and_says_who_holds_it() -> None:
    held = lease(since=1_700_000_000.0, renewed=1_700_000_010.0)
    assert Lease.from_bytes(held.to_bytes(), "x") == held
    text = held.describe(now=1_700_000_013.0)
    assert text == "run r1 (host h, pid 7, since 2023-11-14T22:13:20Z, renewed 3 s ago)"
    with pytest.raises(ValueError, match="lease file x is unreadable"):
        Lease.from_bytes(b'{"holder": 1}', "x")


# --------------------------------------------------------------------------- the lease file


def test_one_holder_at_a_time_and_a_release_frees_it(tmp_path: Path) -> None:
    for storage in (CheckpointStorage(FsBlobStore(str(tmp_path))), CheckpointStorage(MemoryBlobStore())):
        first = JobLease(storage, "job", holder="run a", run_id="a")
        first.acquire()
        with pytest.raises(CheckpointDirectoryInUseError, match=rf"in use by run a \(host {socket.gethostname()}, "
                                                                rf"pid {os.getpid()}, since .*Z, renewed 0 s ago\)"):
            JobLease(storage, "job", holder="run b", run_id="b").acquire()
        first.renew()
        first.release()
        second = JobLease(storage, "job", holder="run b", run_id="b")
        second.acquire()
        with pytest.raises(LeaseLostError, match="run b"):  # someone else's now: a renewal notices
            first.renew()
        second.release()


def test_a_lease_from_another_host_lapses_after_its_timeout(tmp_path: Path) -> None:
    storage = CheckpointStorage(FsBlobStore(str(tmp_path)))
    path = tmp_path / "job" / LEASE_FILE
    path.parent.mkdir()
    path.write_bytes(lease(host="elsewhere", since=time.time() - 5, renewed=time.time() - 5).to_bytes())
    with pytest.raises(CheckpointDirectoryInUseError, match="host elsewhere"):
        JobLease(storage, "job", holder="run b", run_id="b").acquire()
    path.write_bytes(lease(host="elsewhere", since=time.time() - 40, renewed=time.time() - 31).to_bytes())
    taker = JobLease(storage, "job", holder="run b", run_id="b")
    taker.acquire()
    assert lease_of(tmp_path)["run_id"] == "b"
    taker.release()
    assert not path.exists()


HOLDER = """
import sys, time
from checkpoint.io.lease import JobLease
from checkpoint.storage.layout import CheckpointStorage
from checkpoint.io.fs_blob_store import FsBlobStore
JobLease(CheckpointStorage(FsBlobStore(sys.argv[1])), "job", holder="run killed", run_id="killed").acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_killed_runs_lease_lapses_at_once_on_its_host(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointDirectoryInUseError, match=rf"run killed \(host {socket.gethostname()}, pid "
                                                                rf"{holder.pid}, since "):
            job_env(tmp_path).execute("job", executor="sim", seed=1)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    result = job_env(tmp_path).execute("job", executor="sim", seed=1)  # its process is gone: lapsed
    assert Counter(map(repr, result.output("out"))) == expected()
    assert not (tmp_path / "job" / LEASE_FILE).exists(), "a finished run releases its lease"


# --------------------------------------------------------------------------- runs and gc


def test_a_second_run_on_a_directory_a_live_run_holds_fails_at_once_naming_it(tmp_path: Path) -> None:
    # regression: both took the same checkpoint ids, and one deleted the other's checkpoint
    # ("chk-16/_metadata is missing", no hint why)
    seen: list[BaseException | str] = []

    def second_run(completed, storage) -> None:
        if seen:
            return
        try:
            job_env(tmp_path).execute("job", executor="sim", seed=2)
            seen.append("the second run ran")
        except Exception as exc:  # noqa: BLE001 - what the second run raised is the test
            seen.append(exc)

    result = job_env(tmp_path).execute("job", executor="sim", seed=1, checkpoint_listeners=[second_run])
    refused = seen[0]
    assert isinstance(refused, CheckpointDirectoryInUseError), refused
    text = str(refused)
    assert f"run {result.run_id} (host {socket.gethostname()}, pid {os.getpid()}, since " in text
    assert str(tmp_path / "job") in text and "one run writes a job's checkpoint directory at a time" in text
    assert Counter(map(repr, result.output("out"))) == expected()
    storage = open_checkpoints(str(tmp_path))
    assert all(info.valid for info in list_checkpoints(storage, "job"))
    again = job_env(tmp_path).execute("job", executor="sim", seed=3)  # released: the next run may start
    assert again.run_id != result.run_id


def test_gc_refuses_a_running_job_and_names_its_run(tmp_path: Path, capsys) -> None:
    # regression: gc removed a checkpoint in progress as "orphans"; later checkpoints completed
    # pointing at missing files and the next failover found nothing to restore
    outcomes: list[tuple[int, str]] = []

    listed: list[str] = []

    def gc_now(completed, storage) -> None:
        if not listed:
            assert cli(["checkpoints", "ls", "--metadata-only", str(tmp_path)]) == 0
            listed.append(capsys.readouterr().out)
        if len(outcomes) < 2:
            code = cli(["checkpoints", "gc", str(tmp_path)] + (["--dry-run"] if outcomes else []))
            outcomes.append((code, capsys.readouterr().err))

    result = job_env(tmp_path).execute("job", executor="sim", seed=1, checkpoint_listeners=[gc_now])
    assert len(outcomes) == 2
    assert f"job job: running, run {result.run_id} (host " in listed[0]
    for code, err in outcomes:
        assert code == 1, err
        assert err.startswith("barrierflow: error: checkpoints gc: job job is running: ") and len(err.splitlines()) == 1
        assert f"run {result.run_id} (host {socket.gethostname()}, pid {os.getpid()}" in err
        assert "gc touches no file of a running job" in err
    assert Counter(map(repr, result.output("out"))) == expected()
    report = collect_garbage(open_checkpoints(str(tmp_path)), "job")  # ended: gc runs
    assert report.valid_checkpoints and not (tmp_path / "job" / LEASE_FILE).exists()


def test_gc_holds_the_lease_while_it_works(tmp_path: Path) -> None:
    job_env(tmp_path).execute("job", executor="sim", seed=1)
    storage = open_checkpoints(str(tmp_path))
    during: list[BaseException] = []
    original = storage.blob_store.delete

    def delete(path: str) -> None:
        if not during:
            try:
                job_env(tmp_path).execute("job", executor="sim", seed=2)
            except CheckpointDirectoryInUseError as exc:
                during.append(exc)
        original(path)

    (tmp_path / "job" / "chk-999").mkdir()
    (tmp_path / "job" / "chk-999" / "orphan").write_bytes(b"x")
    storage.blob_store.delete = delete
    report = collect_garbage(storage, "job")
    assert report.removed and during and "checkpoints gc (host" in str(during[0])
    assert not (tmp_path / "job" / LEASE_FILE).exists()
    with pytest.raises(JobRunningError):  # and a gc already holding it keeps a second gc out
        lease = JobLease(storage, "job", holder="run x", run_id="x")
        lease.acquire()
        try:
            collect_garbage(open_checkpoints(str(tmp_path)), "job", dry_run=True)
        finally:
            lease.release()


def test_a_run_that_lost_its_lease_fails_naming_the_new_holder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("checkpoint.io.lease.DEFAULT_LEASE_TIMEOUT", 0.6)  # renewed every 0.2 s
    lost: list[str] = []

    def usurp(completed, storage) -> None:
        if lost:
            return
        path = tmp_path / "job" / LEASE_FILE
        path.write_bytes(lease(holder="run usurper", run_id="usurper", since=time.time(),
                               renewed=time.time() + 3600).to_bytes())
        deadline = time.monotonic() + 60
        while sim.lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.05)
        lost.append(sim.lease.lost or "not noticed")

    sim = SimExecutor(job_env(tmp_path).get_job_graph("job"), seed=1, checkpoint_listeners=[usurp])
    with pytest.raises(JobFailedError, match="lost the lease of checkpoint directory .* to run usurper"):
        sim.run()
    assert "run usurper" in lost[0]
    assert lease_of(tmp_path)["run_id"] == "usurper", "a run that lost its lease leaves the new holder's alone"


def test_on_ray_too_a_second_run_fails_before_ray_starts(tmp_path: Path) -> None:
    holder = JobLease(open_checkpoints_for_writing(tmp_path), "job", holder="run live", run_id="live")
    holder.acquire()
    try:
        with pytest.raises(CheckpointDirectoryInUseError, match=r"in use by run live \(host "):
            job_env(tmp_path).execute("job", executor="ray")
    finally:
        holder.release()


def open_checkpoints_for_writing(root: Path) -> CheckpointStorage:
    return CheckpointStorage(FsBlobStore(str(root)))
