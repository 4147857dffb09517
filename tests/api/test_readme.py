"""Every code block of the README runs as written, in a temporary folder, as a reader would:

- python blocks in order, in one namespace (as a reader pastes them); a `print(...)  # value
  (explanation)` line prints `value` ("..." matches anything);
- a block preceded by `<!-- file: NAME -->` is a file the reader saves: it is written to NAME;
- bash blocks in order, with `bash -euo pipefail`, the project's own `barrierflow` command on
  PATH and no PYTHONPATH; a block preceded by `<!-- not run: REASON -->` is skipped, and only the
  two set-up blocks (installing, running the whole suite) may be. The blocks of the section
  "Run on a Ray cluster" run in a test of their own (they start a cluster of Ray nodes and an S3
  server, and stop them by their PIDs).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from cli_launcher import install_launcher, user_env

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"(?:<!--\s*(not run|file):\s*(.*?)\s*-->\n)?```(python|bash)\n(.*?)```", re.S)
PRINT = re.compile(r"^print\((.*)\)\s+#\s*(.+)$")
#: the set-up blocks (install + demo, the whole suite) are the only ones a test may skip
MAX_NOT_RUN = 2


#: the section whose bash blocks `test_the_ray_cluster_recipe_runs_as_written` runs
CLUSTER_SECTION = "Run on a Ray cluster"


def blocks(language: str, section: str | None = None) -> list[tuple[str | None, str, str]]:
    """`(marker, marker text, code)` of every `language` block, in README order (only those under
    the `## section` heading, if given)."""
    text = README.read_text()
    found = []
    for m in BLOCK.finditer(text):
        heading = re.findall(r"^## (.+)$", text[:m.start()], re.M)
        if m[3] == language and (section is None or (heading and heading[-1].strip() == section)):
            found.append((m[1] or None, m[2], m[4]))
    return found


def runnable_bash(section: str | None = None) -> list[str]:
    """The bash blocks a test runs: those of `section`, or (None) those of every other section."""
    chosen = blocks("bash", section)
    if section is None:
        cluster = {code for _, _, code in blocks("bash", CLUSTER_SECTION)}
        chosen = [b for b in chosen if b[2] not in cluster]
    return [code for marker, _, code in chosen if marker != "not run"]


def python_blocks() -> list[str]:
    return [code for marker, _, code in blocks("python") if marker != "file"]


def write_files(folder: Path) -> list[str]:
    names = []
    for marker, name, code in blocks("python") + blocks("bash"):
        if marker == "file":
            (folder / name).write_text(code)
            names.append(name)
    return names


def test_readme_has_python_examples() -> None:
    assert len(python_blocks()) >= 4


@pytest.mark.spark  # the Spark bridge example
def test_every_python_block_runs_and_prints_what_its_comments_say(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the examples write checkpoints and tables into the current folder
    namespace: dict = {"__name__": "readme"}
    try:
        for number, block in enumerate(python_blocks(), 1):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block, f"README.md python block {number}", "exec"), namespace)  # noqa: S102
            printed = out.getvalue().splitlines()
            expected = [PRINT.match(line.strip()) for line in block.splitlines()]
            expected = [m.group(2) for m in expected if m]
            assert len(printed) == len(expected), (number, printed)
            for line, comment in zip(printed, expected):
                value = comment.split("  ", 1)[0].strip()
                pattern = re.escape(value).replace(re.escape("..."), ".*")
                assert re.fullmatch(pattern, line), (number, line, comment)
    finally:  # the Spark example's session: the Spark tests start theirs with their own settings
        if "spark" in namespace:
            namespace["spark"].stop()


def test_only_the_set_up_bash_blocks_are_not_run_and_each_says_why() -> None:
    skipped = [(reason, code) for marker, reason, code in blocks("bash") if marker == "not run"]
    assert all(reason.strip() for reason, _ in skipped), skipped
    assert len(skipped) <= MAX_NOT_RUN, f"{len(skipped)} bash blocks are not run: {skipped}"
    assert len(blocks("bash")) - len(skipped) >= 2


def run_bash(runnable: list[str], folder: Path, env: dict[str, str]) -> None:
    """Run each block with `bash -euo pipefail` in `folder`: it must succeed without a traceback."""
    for number, code in enumerate(runnable, 1):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=600)
        output = done.stdout + done.stderr
        assert done.returncode == 0, (number, code, output)
        assert "Traceback" not in output, (number, output)


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
        run_bash(runnable, folder, env)
    finally:  # a block that started ZooKeeper and failed before stopping it
        if any("zookeeper start" in code for code in runnable):
            subprocess.run(["barrierflow", "zookeeper", "stop"], cwd=folder, env=env, capture_output=True,
                           timeout=60)
        shutil.rmtree(short_tmp, ignore_errors=True)


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
        run_bash(runnable, folder, env)
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
