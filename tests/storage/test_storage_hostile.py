"""Hostile or broken bytes in a checkpoint directory: crafted metadata, a
weak checksum, a garbage id counter, a corrupt state file, a directory that does not exist. Each
gives an error (or a fallback) naming the file, never a bare ValueError or a traceback, and
inspecting or restoring never creates anything."""

from __future__ import annotations

import json
import logging
import re
import zlib
from pathlib import Path

import pytest

from checkpoint.completed import canonical_json
from checkpoint.io.tools import CheckpointToolError, load_checkpoint
from checkpoint.storage.layout import CorruptCheckpointError, compute_checksum
from operators import CollectSink
from runtime.api.environment import StreamEnvironment
from runtime.cli import main as cli
from runtime.workloads.seeded import CountPerKey
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 37}"} for i in range(2000)]


def job_env(storage: Path) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=16)
    env.enable_checkpointing(interval=0.002, storage=str(storage), retained=2, tolerable_failures=100)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.001))
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


@pytest.fixture
def checkpoints(tmp_path: Path) -> tuple[Path, int, int]:
    """A checkpoint directory with two retained checkpoints: (dir, older id, newest id)."""
    result = job_env(tmp_path).execute("job", executor="sim", seed=1)
    older, newest = sorted(c.id for c in result.completed_checkpoints)[-2:]
    return tmp_path, older, newest


def rewrite_metadata(path: Path, change) -> None:
    """Edit a `_metadata` body and re-seal it, as someone who can write the directory would."""
    document = json.loads(path.read_bytes())
    change(document["body"])
    document["checksum"] = compute_checksum(canonical_json(document["body"]))
    path.write_bytes(canonical_json(document))


def first_handle(body: dict) -> dict:
    return next(h for ack in body["acks"] for hs in ack["handles"].values() for h in hs)


@pytest.mark.parametrize("crafted", ["../../../../etc/passwd", "/etc/passwd", "job/chk-1/../../../x",
                                     "otherjob/chk-1/taskowned/x"])
def test_metadata_naming_a_file_outside_the_job_is_skipped_for_the_previous_checkpoint(
        checkpoints, crafted: str, caplog, capsys) -> None:
    # regression: restore_from raised a bare ValueError and `checkpoints show` a traceback
    root, older, newest = checkpoints
    metadata = root / "job" / f"chk-{newest}" / "_metadata"
    rewrite_metadata(metadata, lambda body: first_handle(body).update(path=crafted))
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.tools"):
        completed, _ = load_checkpoint(str(root))
    assert completed.checkpoint_id == older
    assert any(str(metadata) in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)
    with pytest.raises(CheckpointToolError, match=re.escape(str(metadata))):
        load_checkpoint(str(root), checkpoint_id=newest)
    capsys.readouterr()
    assert cli(["checkpoints", "show", str(root), str(newest)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and str(metadata) in out and repr(crafted) in out


def test_a_handle_with_a_weak_crc32_checksum_is_refused(checkpoints, capsys) -> None:
    # regression: "crc32:<8 hex>" verified, so a crafted state file only needed a matching CRC
    root, older, newest = checkpoints
    metadata = root / "job" / f"chk-{newest}" / "_metadata"

    def weaken(body: dict) -> None:
        handle = first_handle(body)
        data = (root / handle["path"]).read_bytes()
        segment = data[handle["offset"]:handle["offset"] + handle["length"]] if handle["length"] else data
        handle["checksum"] = f"crc32:{zlib.crc32(segment) & 0xFFFFFFFF:08x}"

    rewrite_metadata(metadata, weaken)
    completed, _ = load_checkpoint(str(root))
    assert completed.checkpoint_id == older
    assert cli(["checkpoints", "ls", str(root)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.split()[:1] == [str(newest)])
    assert " no " in line and str(metadata) in line and "only a SHA-256 digest" in line


def test_garbage_in_the_id_counter_is_an_error_naming_the_file(checkpoints) -> None:
    # regression: ValueError: invalid literal for int() with base 10: 'garbage'
    root, _, _ = checkpoints
    counter = root / "job" / "_checkpoint_counter"
    counter.write_bytes(b"garbage\n")
    with pytest.raises(CorruptCheckpointError, match=re.escape(str(counter)) + r" is unreadable: it holds "
                       r"b'garbage\\n', expected a decimal integer >= 1"):
        job_env(root).execute("job", executor="sim", seed=2)


def test_ls_verifies_every_file_or_says_it_did_not(checkpoints, capsys) -> None:
    # regression: `ls` said "yes" for a checkpoint whose state file was corrupt (metadata only)
    root, _, newest = checkpoints
    state = sorted((root / "job" / f"chk-{newest}" / "taskowned").rglob("*"))
    victim = next(p for p in state if p.is_file())
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert cli(["checkpoints", "ls", str(root)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.split()[:1] == [str(newest)])
    assert " no " in line and str(victim) in line and "fails its checksum" in line
    assert "every file it references read and checksummed" in out
    assert cli(["checkpoints", "ls", "--metadata-only", str(root)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.split()[:1] == [str(newest)])
    assert " yes " in line and "files NOT read" in out


def test_restore_from_a_missing_directory_names_it_and_creates_nothing(tmp_path: Path) -> None:
    # regression: the directory was created (empty) and the error said "no jobs"
    missing = tmp_path / "no" / "such-dir"
    with pytest.raises(CheckpointToolError, match=f"no checkpoint directory at {re.escape(str(missing))}.*"
                       "does not exist"):
        job_env(tmp_path / "out").restore_from(str(missing))
    assert not (tmp_path / "no").exists()


def test_checkpoints_ls_of_a_typo_names_it_exits_2_and_creates_nothing(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "chekpoints"
    for command in (["ls"], ["show"], ["gc"]):
        args = ["checkpoints", *command, str(missing)] + (["1"] if command == ["show"] else [])
        assert cli(args) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"barrierflow: error: checkpoints {command[0]}: ")
        assert str(missing) in lines[0] and "does not exist" in lines[0]
        assert not missing.exists()


@pytest.mark.parametrize("sealed", [True, False])
def test_deeply_nested_metadata_is_corrupt_and_restore_falls_back(checkpoints, sealed: bool, caplog, capsys) -> None:
    # regression: a RecursionError escaped instead of the fallback to the previous checkpoint
    root, older, newest = checkpoints
    metadata = root / "job" / f"chk-{newest}" / "_metadata"
    document = json.loads(metadata.read_bytes())
    document["body"]["properties"]["deep"] = "DEEP"
    deep = b"[" * 100_000 + b"]" * 100_000
    body = canonical_json(document["body"]).replace(b'"DEEP"', deep)
    checksum = compute_checksum(body) if sealed else "0" * 64  # sealed: only the depth is wrong
    metadata.write_bytes(b'{"body":' + body + b',"checksum":"' + checksum.encode()
                         + b'","format":"barrierflow-checkpoint-metadata","version":1}')
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.tools"):
        completed, _ = load_checkpoint(str(root))
    assert completed.checkpoint_id == older
    assert any(str(metadata) in r.getMessage() and "nested too deeply" in r.getMessage() for r in caplog.records)
    capsys.readouterr()
    assert cli(["checkpoints", "ls", "--metadata-only", str(root)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.split()[:1] == [str(newest)])
    assert " no " in line and str(metadata) in line


@pytest.mark.parametrize("where", ["counter", "directory"])
def test_a_checkpoint_id_beyond_a_long_is_refused_naming_the_file(checkpoints, where: str) -> None:
    # regression: 10**30 was accepted and the job failed later, far from the cause ("Python int too
    # large to convert to C long" in a sink's operator state)
    root, _, _ = checkpoints
    if where == "counter":
        culprit = root / "job" / "_checkpoint_counter"
        culprit.write_bytes(str(10**30).encode())
        expected = re.escape(str(culprit)) + r" is unreadable: it holds b'1000000000000000000000000000000', " \
            r"expected a decimal integer >= 1 and <= 9223372036854775807"
    else:
        culprit = root / "job" / f"chk-{10**30}"
        culprit.mkdir()
        (culprit / "_metadata").write_bytes(b"{}")
        expected = re.escape(str(culprit)) + f" has the id {10**30}, and the largest checkpoint id is 9223372036854775807"
    with pytest.raises(CorruptCheckpointError, match=expected):
        job_env(root).execute("job", executor="sim", seed=2)
