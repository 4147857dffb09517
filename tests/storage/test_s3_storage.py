"""Checkpoints on a real S3-compatible server (moto's, `tests/s3_server.py`), a bucket per test:
full, incremental and merged snapshots, retention and the `checkpoints` tools on an `s3://` URI,
the durable committer with a restore in a new process at another parallelism (the job of
`test_durable_committer.py`), and the storage fault kinds — exactly-once throughout. Jobs run on
the simulator here; the Ray cluster test (`tests/ray/test_ray_cluster.py`) runs one against the
same server from separate Ray nodes."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from checkpoint.io.tools import list_checkpoints, load_checkpoint, open_checkpoints
from runtime import FaultPlan
from runtime.cli import main as cli
from runtime.workloads.scenarios import RELAY_SINK, relay_job
from runtime.workloads.seeded import multiset
from vocabulary.fault_plan import (
    CoordinatorCrash,
    CoordinatorCrashBeforeNotify,
    SlowStorage,
    StorageWriteFailure,
    TaskCrash,
    TornWrite,
)
from vocabulary.reasons import CheckpointFailureReason

from .test_durable_committer import JOB, oracle, run

pytestmark = [pytest.mark.slow, pytest.mark.s3]

BACKENDS = {
    "full": {},
    "incremental": {"state_backend": "incremental"},
    "incremental+merged": {"state_backend": "incremental", "file_merging": True},
}

_REFERENCE: list = []


def reference():
    """The relay job without faults or storage: what every run must commit."""
    if not _REFERENCE:
        _REFERENCE.append(relay_job().execute("job", executor="sim", seed=0))
    return _REFERENCE[0]


def assert_exactly_once(result) -> None:
    ref = reference()
    assert multiset(result.output(RELAY_SINK)) == multiset(ref.output(RELAY_SINK)), result.replay
    assert result.final_state == ref.final_state, result.replay


def objects(server, bucket: str) -> list[str]:
    """Every object in `bucket`, as the S3 server lists it (not through barrierflow)."""
    fs = pafs.S3FileSystem(endpoint_override=server.endpoint, scheme="http")
    return sorted(i.path for i in fs.get_file_info(pafs.FileSelector(bucket, recursive=True))
                  if i.type == pafs.FileType.File)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_snapshots_on_s3_are_exactly_once_retained_and_read_by_the_tools(s3_server, s3_bucket, backend, capsys) -> None:
    uri = s3_server.uri(s3_bucket)
    faults = FaultPlan.of(TaskCrash(task="relay[0]", at=0.035), CoordinatorCrash(at=0.05))
    result = relay_job(storage=uri, retained=2, **BACKENDS[backend]).execute("job", executor="sim", seed=0,
                                                                             faults=faults)
    assert_exactly_once(result)
    assert result.restarts >= 1 and result.restored_checkpoints, result.failures
    stored = objects(s3_server, s3_bucket)
    assert any(p.endswith("/_metadata") for p in stored), stored
    if backend != "full":
        assert any("/job/shared/" in p for p in stored), f"incremental state not in shared/: {stored}"

    infos = list_checkpoints(open_checkpoints(uri), "job")
    valid = [i.checkpoint_id for i in infos if i.valid]
    assert len(valid) == 2 and valid == sorted(c.id for c in result.completed_checkpoints)[-2:], infos
    newest, _ = load_checkpoint(uri)
    handles = list(newest.state_handles())
    if backend == "incremental+merged":  # several state handles are segments of one file
        segments = Counter(h.path for h in handles if h.length is not None)
        assert segments and max(segments.values()) >= 2, handles

    assert cli(["checkpoints", "ls", uri]) == 0
    listing = capsys.readouterr().out
    assert "job job" in listing and all(f"{cid:>6}   yes" in listing for cid in valid), listing
    assert cli(["checkpoints", "show", uri, str(valid[-1])]) == 0
    assert f"job job checkpoint {valid[-1]} (run {result.run_id}): valid" in capsys.readouterr().out
    orphan = f"{s3_bucket}/checkpoints/job/chk-{valid[-1]}/taskowned/left-by-a-crash"
    pafs.S3FileSystem(endpoint_override=s3_server.endpoint, scheme="http").open_output_stream(orphan).close()
    assert cli(["checkpoints", "gc", uri]) == 0
    assert "removed 1 orphan file(s)" in capsys.readouterr().out
    assert orphan not in objects(s3_server, s3_bucket)
    assert [i.checkpoint_id for i in list_checkpoints(open_checkpoints(uri), "job") if i.valid] == valid


def test_failing_and_slow_writes_on_s3_keep_exactly_once(s3_server, s3_bucket) -> None:
    faults = FaultPlan.of(SlowStorage(at=0.005, duration=0.01, factor=50), StorageWriteFailure(task="count[1]", nth=1),
                          TaskCrash(task="relay[0]", at=0.035))
    result = relay_job(storage=s3_server.uri(s3_bucket), retained=2).execute("job", executor="sim", seed=0,
                                                                             faults=faults, trace=True)
    assert_exactly_once(result)
    slowed = {e[4] for e in result.trace if len(e) > 2 and e[1] == "fault" and e[2] == "SlowStorage"}
    assert slowed == {"relay[0]", "relay[1]", "count[0]", "count[1]"}, result.trace
    assert CheckpointFailureReason.STORAGE_FAILURE in {c.failure_reason for c in result.checkpoints}, result.checkpoints
    assert result.restarts == 1 and "TaskCrash" in result.failures[0], result.failures


def test_a_torn_write_on_s3_fails_its_checksum_and_the_previous_checkpoint_is_restored(
        s3_server, s3_bucket, caplog) -> None:
    # the coordinator dies once checkpoint 2 is durable, before any sink committed it: recovery
    # finds its torn file and falls back to checkpoint 1, exactly once
    faults = FaultPlan.of(TornWrite(task="count[0]", nth=1, garble=True), CoordinatorCrashBeforeNotify(nth=1))
    with caplog.at_level(logging.WARNING):
        result = relay_job(storage=s3_server.uri(s3_bucket), retained=2).execute("job", executor="sim", seed=0,
                                                                                 faults=faults, trace=True)
    assert_exactly_once(result)
    torn = "job/chk-2/taskowned/count[0].keyed"
    assert ("fault", "TornWrite", 2, "count[0]", torn) in [e[1:] for e in result.trace], result.replay
    assert result.restored_checkpoints == [1], result.restored_checkpoints
    assert f"{s3_bucket}/checkpoints/{torn} fails its checksum" in caplog.text, caplog.text


def test_a_job_failed_for_good_is_restored_from_s3_in_a_new_process_at_another_parallelism(
        s3_server, s3_bucket, tmp_path: Path) -> None:
    (tmp_path / "durable_job.py").write_text(JOB)
    uri = s3_server.uri(s3_bucket)
    first = run(tmp_path, "first", "2", "aligned", uri, poison=True)
    assert "poison record" in first["failed"], first
    committer = [p for p in objects(s3_server, s3_bucket) if "/job/committed/" in p]
    assert any("commit-" in p for p in committer) and any("staged-" in p for p in committer), committer
    second = run(tmp_path, "second", "3", "aligned", uri, poison=False)
    got = Counter((r["key"], r["count"]) for r in second["output"])
    assert got == oracle(), "not exactly once: " + str((got - oracle()) + (oracle() - got))[:500]
