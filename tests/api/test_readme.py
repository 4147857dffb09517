"""Every code block of the README runs as written, in a temporary folder, as a reader would:

- python blocks in order, in one namespace (as a reader pastes them), in a fresh process
  (`readme_blocks.py`); a `print(...)  # value (explanation)` line prints `value` ("..." matches
  anything); the sections that name an executor run on each one;
- a block preceded by `<!-- file: NAME -->` is a file the reader saves: it is written to NAME;
- bash blocks in order, with `bash -euo pipefail`, the project's own `barrierflow` command on
  PATH and no PYTHONPATH; a block preceded by `<!-- not run: REASON -->` is skipped, and only the
  two set-up blocks (installing, running the whole suite) may be. The restore section's commands
  run on each executor, and in variants (another parallelism, unaligned checkpoints). The blocks
  of the section "Run on a Ray cluster" run in a test of their own (they start a cluster of Ray
  nodes and an S3 server, and stop them by their PIDs).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_launcher import install_launcher, user_env
from readme_blocks import blocks, python_blocks

RUNNER = Path(__file__).with_name("readme_blocks.py")
#: the set-up blocks (install + demo, the whole suite) are the only ones a test may skip
MAX_NOT_RUN = 2
RESTORE = "Restore and rescale"
SPARK = "The Spark bridge"
CHECKPOINTS = "Checkpoints on disk, and high availability"
RAY = pytest.param("ray", marks=pytest.mark.ray)
#: the section whose bash blocks `test_the_ray_cluster_recipe_runs_as_written` runs
CLUSTER_SECTION = "Run on a Ray cluster"


def runnable_bash(section: str | None = None) -> list[str]:
    """The bash blocks a test runs: those of `section`, or (None) those of every other section."""
    return [b.code for b in blocks("bash") if b.marker != "not run"
            and (b.section == section if section is not None else b.section != CLUSTER_SECTION)]


def write_files(folder: Path) -> list[str]:
    names = []
    for block in blocks("python") + blocks("bash"):
        if block.marker == "file":
            (folder / block.marker_text).write_text(block.code)
            names.append(block.marker_text)
    return names


def test_readme_has_python_examples() -> None:
    assert len(python_blocks()) >= 4
    assert {RESTORE, SPARK} <= {b.section for b in python_blocks()}


def test_blocks_know_their_section() -> None:
    text = "## One\n```python\nx = 1\n```\n## Two\n<!-- file: a.py -->\n```python\ny = 2\n```\n"
    assert [(b.section, b.marker, b.marker_text) for b in blocks("python", text)] == \
        [("One", None, ""), ("Two", "file", "a.py")]


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["sim", RAY])
@pytest.mark.parametrize("section", [RESTORE, pytest.param(SPARK, marks=pytest.mark.spark)])
@pytest.mark.timeout(600)
def test_a_section_runs_in_a_fresh_process_and_prints_what_its_comments_say(tmp_path: Path, section: str,
                                                                          executor: str) -> None:
    """The blocks before `section` as written (the definitions it uses), then the section's own on
    `executor`, in a new Python process, as a reader runs a script."""
    done = subprocess.run([sys.executable, str(RUNNER), section, executor], cwd=tmp_path, env=user_env(tmp_path),
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    # `local_session()` tells Spark its address: no warning that it binds the machine's instead
    assert "SPARK_LOCAL_IP" not in done.stderr and "resolves to a loopback address" not in done.stderr, done.stderr


def test_only_the_set_up_bash_blocks_are_not_run_and_each_says_why() -> None:
    skipped = [b for b in blocks("bash") if b.marker == "not run"]
    assert all(b.marker_text.strip() for b in skipped), skipped
    assert len(skipped) <= MAX_NOT_RUN, f"{len(skipped)} bash blocks are not run: {skipped}"
    assert len(blocks("bash")) - len(skipped) >= 2


def run_bash(code: str, folder: Path, env: dict[str, str]) -> str:
    """`code` under `bash -euo pipefail` in `folder`; its output (it must succeed, with no traceback)."""
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (code, output)
    assert "Traceback" not in output, output
    return output


@pytest.mark.ray
@pytest.mark.zookeeper  # the HA quick start: a ZooKeeper server and a job on Ray
@pytest.mark.timeout(900)
def test_every_bash_block_runs_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    assert "myjob.py" in write_files(folder)
    bin_dir = tmp_path / "bin"
    install_launcher(bin_dir)
    # ZooKeeper's data and PID file, and Ray's session, go to a TMPDIR of this test's own; a short
    # one, as Ray's socket paths under it must fit AF_UNIX's ~107 bytes
    short_tmp = tempfile.mkdtemp(prefix="bf-readme-", dir="/tmp")
    env = {**user_env(bin_dir), "TMPDIR": short_tmp}
    runnable = runnable_bash()
    try:
        for code in runnable:
            output = run_bash(code, folder, env)
            if "--zookeeper" in code:  # the run says it was highly available, and how
                assert "high availability: ZooKeeper at 127.0.0.1:2181" in output, output
    finally:  # a block that started ZooKeeper and failed before stopping it
        if any("zookeeper start" in code for code in runnable):
            subprocess.run(["barrierflow", "zookeeper", "stop"], cwd=folder, env=env, capture_output=True,
                           timeout=60)
        shutil.rmtree(short_tmp, ignore_errors=True)


#: `barrierflow run ...` with more options (a shell function in front of the command on PATH)
RUN_WITH = 'barrierflow() {{ if [ "$1" = run ]; then command barrierflow "$@" {options}; ' \
           'else command barrierflow "$@"; fi; }}\n'


@pytest.mark.slow
@pytest.mark.parametrize(("options", "parallelism"), [
    ("--executor sim", 4),
    pytest.param("--executor ray", 4, marks=pytest.mark.ray),
    pytest.param("--executor ray --unaligned", 1, marks=pytest.mark.ray),
])
@pytest.mark.timeout(600)
def test_the_restore_commands_commit_every_record_once_in_a_new_process(tmp_path: Path, options: str,
                                                                        parallelism: int) -> None:
    """The restore section's commands, each `barrierflow run` given `options`, the restore at
    `parallelism` (the failed run has its builder's, 2): the failed run, then the restore in a new
    process."""
    folder = tmp_path / "work"
    folder.mkdir()
    write_files(folder)
    bin_dir = tmp_path / "bin"
    install_launcher(bin_dir)
    commands = [b.code for b in blocks("bash") if b.section == RESTORE]
    assert len(commands) == 1 and commands[0].count("barrierflow run ") == 2, commands
    assert commands[0].count("--parallelism 4") == 1, commands
    code = RUN_WITH.format(options=options) + commands[0].replace("--parallelism 4", f"--parallelism {parallelism}")
    output = run_bash(code, folder, user_env(bin_dir))
    assert "the crash failed the job for good (exit code 1)" in output, output
    assert "│ counts │            20,000 │" in output, output  # the second run's table: every record
    assert re.search(r"^\[\s*[\d.]+ s\] running: .*records in [\d,]+", output, re.M), output  # its progress
    # where the second run started: a checkpoint of the failed run (or, if it completed none, the beginning)
    assert re.search(r"^restored from (checkpoint \d+ of run \S+ \(|the beginning: )", output, re.M), output
    if "restored from checkpoint" in output:
        assert f"count 2 -> {parallelism}" in output, output  # rescaled


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_the_checkpoint_commands_run_on_ray_too(tmp_path: Path) -> None:
    """The first commands of the checkpoints section (the run, `ls`, `gc`) with the job on Ray."""
    folder = tmp_path / "work"
    folder.mkdir()
    write_files(folder)
    bin_dir = tmp_path / "bin"
    install_launcher(bin_dir)
    first = next(b.code for b in blocks("bash") if b.section == CHECKPOINTS)
    output = run_bash(RUN_WITH.format(options="--executor ray") + first, folder, user_env(bin_dir))
    assert "│ counts │            20,000 │" in output and "myjob:build on ray" in output, output
    assert "would remove 0 orphan file(s)" in output, output
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(900)
def test_the_ray_cluster_recipe_runs_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    write_files(folder)
    runnable = runnable_bash(CLUSTER_SECTION)
    assert runnable and any("ray start --head" in code for code in runnable), "no cluster recipe in the README"
    bin_dir = tmp_path / "bin"
    install_launcher(bin_dir)
    # Ray's session and its "current cluster" note go to a TMPDIR of this test's own (short: Ray's
    # socket paths under it must fit AF_UNIX's ~107 bytes), so no other Ray on the machine sees them
    short_tmp = tempfile.mkdtemp(prefix="bf-cluster-", dir="/tmp")
    env = {**user_env(bin_dir), "TMPDIR": short_tmp}
    env.pop("RAY_ADDRESS", None)
    try:
        for code in runnable:
            run_bash(code, folder, env)
    finally:  # what a failed block left running: the processes its PID files name, and theirs
        stop_pid_files(folder, short_tmp)
        shutil.rmtree(short_tmp, ignore_errors=True)


def stop_pid_files(folder: Path, tmpdir: str) -> None:
    """SIGKILL every process a `*.pid` file in `folder` names — if it is still the recipe's (its
    TMPDIR is `tmpdir`: a PID may have been reused since) — and its descendants."""
    import psutil

    for pid_file in folder.glob("*.pid"):
        try:
            root = psutil.Process(int(pid_file.read_text().split()[0]))
            if root.environ().get("TMPDIR") != tmpdir:
                continue
            processes = [root, *root.children(recursive=True)]
        except (psutil.Error, ValueError, IndexError):
            continue
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=30)
