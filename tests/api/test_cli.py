"""The `barrierflow` command line driven as a user would: a job module in the current folder (no
PYTHONPATH), checkpoints to a directory, and bad input that gives one error line, never a
traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_launcher import run_cli

JOB_MODULE = '''
from operators import CollectSink
from runtime import StreamEnvironment


def build():
    env = StreamEnvironment(parallelism=2)
    env.from_collection([{"k": i % 3} for i in range(300)], splits=2).key_by("k").count() \\
        .sink_to(CollectSink("out"))
    return env


def nothing():
    return None


def broken():
    raise ValueError("the builder is broken")
'''


def barrierflow(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(cwd.parent / "bin", *args, cwd=cwd)


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "myjob.py").write_text(JOB_MODULE)
    return folder


def test_run_imports_the_job_from_the_current_folder_and_checkpoints_to_a_directory(job_dir: Path) -> None:
    done = barrierflow("run", "myjob:build", "--checkpoint-dir", "ckpts", "--interval", "0.0005", cwd=job_dir)
    assert done.returncode == 0, done.stderr
    assert "300" in done.stdout and "checkpoints are in ckpts" in done.stdout
    assert list((job_dir / "ckpts").rglob("_metadata")), "no checkpoint was written"
    listed = barrierflow("checkpoints", "ls", "ckpts", cwd=job_dir)
    assert listed.returncode == 0 and "job build" in listed.stdout, listed.stdout
    in_job_folder = barrierflow("checkpoints", "ls", "ckpts/build", cwd=job_dir)  # the job's own folder
    assert in_job_folder.returncode == 0 and in_job_folder.stdout == listed.stdout, in_job_folder.stderr
    newest = max(int(p.parent.name[4:]) for p in (job_dir / "ckpts").rglob("_metadata"))
    shown = barrierflow("checkpoints", "show", "ckpts/build", str(newest), cwd=job_dir)
    assert shown.returncode == 0 and " ms" in shown.stdout and "e-0" not in shown.stdout, shown.stdout
    missing = barrierflow("checkpoints", "show", "ckpts", "99", cwd=job_dir)
    assert missing.returncode == 2 and "has no checkpoint 99" in missing.stderr, missing.stderr
    gc = barrierflow("checkpoints", "gc", "ckpts", "--dry-run", cwd=job_dir)
    assert gc.returncode == 0 and "would remove 0 orphan file(s)" in gc.stdout, gc.stdout


@pytest.mark.parametrize(("args", "names"), [
    (["run", "myjob:build", "--interval", "-1"], "--interval"),
    (["run", "myjob:build", "--interval", "0"], "--interval"),
    (["run", "myjob:build", "--unaligned", "--mode", "at-least-once"], "--unaligned"),
    (["run", "myjob:build", "--parallelism", "0"], "--parallelism"),
    (["run", "myjob:build", "--executor", "spark"], "--executor"),
    (["run", "myjob:nothing"], "returned None"),
    (["run", "nosuchmodule:build"], "'nosuchmodule'"),
    (["run", "myjob"], "MODULE:FUNCTION"),
    (["demo", "--records", "ten"], "--records"),
])
def test_usage_errors_are_one_line_exit_2_no_traceback(job_dir: Path, args: list[str], names: str) -> None:
    done = barrierflow(*args, cwd=job_dir)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("barrierflow: error: "), done.stderr
    assert names in lines[0] and "Traceback" not in done.stderr + done.stdout


def test_a_failing_builder_exits_1_and_debug_shows_the_traceback(job_dir: Path) -> None:
    done = barrierflow("run", "myjob:broken", cwd=job_dir)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("barrierflow: error: ValueError: the builder is broken "
                                   "(--debug shows the traceback)")
    debug = barrierflow("run", "myjob:broken", "--debug", cwd=job_dir)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "the builder is broken" in debug.stderr


def test_high_availability_against_a_closed_port_fails_fast_naming_the_address(job_dir: Path) -> None:
    import socket
    import time

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    done = barrierflow("run", "myjob:build", "--executor", "ray", "--zookeeper", f"127.0.0.1:{port}", cwd=job_dir)
    took = time.monotonic() - started
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr  # one line, no kazoo noise
    assert f"127.0.0.1:{port}" in done.stderr and "Connection refused" in done.stderr, done.stderr
    assert took < 30, f"{took:.1f} s: an unreachable ZooKeeper must fail within seconds (was 85 s)"


def test_every_option_says_its_unit_or_default(job_dir: Path) -> None:
    for command in ("run", "demo"):
        text = barrierflow(command, "--help", cwd=job_dir).stdout
        assert "seconds" in text and "default" in text
        for option in ("--interval", "--parallelism", "--checkpoint-dir", "--seed", "--crashes"):
            assert option in text, (command, option)
