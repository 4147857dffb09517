"""`barrierflow checkpoints gc` never follows a symbolic link and never deletes outside the
checkpoint directory: links inside the job's folder (to folders or files elsewhere) are reported,
not followed, not deleted; every delete is checked to resolve inside the directory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.tools import collect_garbage, list_checkpoints, open_checkpoints
from checkpoint.storage.layout import StorageError
from operators import CollectSink
from runtime.api.environment import StreamEnvironment
from runtime.cli import main as cli
from runtime.workloads.seeded import CountPerKey
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 17}"} for i in range(1200)]


def run_job(storage: Path) -> None:
    env = StreamEnvironment(parallelism=2, buffer_size=16)
    env.enable_checkpointing(interval=0.002, storage=str(storage), retained=2)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection(ROWS, splits=2).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    env.execute("job", executor="sim", seed=1)


def elsewhere(root: Path, name: str) -> Path:
    """A folder outside the checkpoint directory, with files that look like checkpoint files."""
    folder = root / name
    for relative in ("_metadata", "taskowned/count[0].keyed", "taskowned/deep/x", "chk-3-0.merged", "y"):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(relative.encode() * 10)
    return folder


def fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    """A checkpoint directory whose job folder holds links to folders and a file elsewhere."""
    root, outside = tmp_path / "ckpts", tmp_path / "outside"
    run_job(root)
    job = root / "job"
    links = [job / "chk-999", job / "chk-1000" / "taskowned", job / "shared",
             next(job.glob("chk-*/taskowned")) / "stray"]
    (job / "chk-1000").mkdir()
    for index, link in enumerate(links[:3]):
        link.symlink_to(elsewhere(outside, f"target{index}"), target_is_directory=True)
    (outside / "file").write_bytes(b"precious")
    links[3].symlink_to(outside / "file")
    return root, outside, links


def test_gc_neither_follows_nor_deletes_through_links(linked) -> None:
    # regression: gc removed 18 of 19 files outside the directory (the listing followed the links)
    root, outside, links = linked
    before = fingerprint(outside)
    assert len(before) == 16
    for dry_run in (True, False):
        report = collect_garbage(open_checkpoints(str(root)), "job", dry_run=dry_run)
        assert fingerprint(outside) == before
        assert sorted(report.links) == sorted(str(p.relative_to(root)) for p in links)
        assert not [path for path, _ in report.removed if any(path.startswith(str(p.relative_to(root)))
                                                               for p in links)]
    assert all(p.is_symlink() for p in links)
    assert all(info.valid for info in list_checkpoints(open_checkpoints(str(root)), "job"))


def test_the_cli_reports_each_link_it_did_not_follow(linked, capsys) -> None:
    root, outside, links = linked
    before = fingerprint(outside)
    assert cli(["checkpoints", "gc", str(root)]) == 0
    out = capsys.readouterr().out
    assert fingerprint(outside) == before
    for link in links:
        assert f"{link.relative_to(root)} -> {os.readlink(link)}" in out
    assert "symbolic link(s) not followed" in out


def test_a_write_or_delete_through_a_linked_folder_is_refused(tmp_path: Path) -> None:
    store = FsBlobStore(str(tmp_path / "ckpts"))
    outside = elsewhere(tmp_path, "outside")
    (tmp_path / "ckpts" / "job").mkdir()
    (tmp_path / "ckpts" / "job" / "chk-1").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StorageError, match=r"refusing to delete .*job/chk-1/_metadata: .*job/chk-1 is a "
                                           r"symbolic link"):
        store.delete("job/chk-1/_metadata")
    for write in (store.put, store.put_durably, store.put_if_absent):
        with pytest.raises(StorageError, match=r"refusing to write .*job/chk-1/taskowned/new: .*job/chk-1 is a "
                                               r"symbolic link"):
            write("job/chk-1/taskowned/new", b"x")
    assert (outside / "_metadata").exists() and not (outside / "taskowned" / "new").exists()
    assert store.list("job/") == [] and store.list_links("job/") == ["job/chk-1"]


def test_a_storage_root_reached_through_a_link_still_works(tmp_path: Path) -> None:
    """Only links below the storage root are refused: the root itself may be a link (/tmp on macOS)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    run_job(tmp_path / "alias")
    report = collect_garbage(open_checkpoints(str(tmp_path / "alias")), "job")
    assert report.valid_checkpoints and not report.links
