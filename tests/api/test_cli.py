"""The `barrierflow` command line driven as a user would: a job module in the current folder (no
PYTHONPATH), checkpoints to a directory, and bad input that gives one error line, never a
traceback."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cli_launcher import run_cli

JOB_MODULE = '''
from operators import CollectSink
from runtime import RestartStrategy, StreamEnvironment


def build():
    env = StreamEnvironment(parallelism=2)
    env.from_collection([{"k": i % 3} for i in range(300)], splits=2).key_by("k").count() \\
        .sink_to(CollectSink("out"))
    return env


def fragile():
    env = StreamEnvironment(parallelism=2)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection([{"k": i % 3} for i in range(20_000)], splits=2).key_by("k").count() \\
        .sink_to(CollectSink("out"))
    return env


def nothing():
    return None


ROWS = 300  # not a function


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
    (folder / "badimport.py").write_text('raise RuntimeError("no configuration found")\n')
    return folder


@pytest.mark.slow
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
    duration = re.search(r"duration ([\d.,]+ ms)", shown.stdout).group(1)
    row = next(line for line in listed.stdout.splitlines() if line.split()[:2] == [str(newest), "yes"])
    assert f" {duration}  " in row, (row, duration)  # `ls` prints durations as `show` does
    for option in ("ls", "show", "gc"):  # every argument says what it is
        helped = barrierflow("checkpoints", option, "--help", cwd=job_dir).stdout
        assert "--job JOB" in helped and "when DIR holds several" in helped, helped
    missing = barrierflow("checkpoints", "show", "ckpts", "99", cwd=job_dir)
    assert missing.returncode == 2 and "has no checkpoint 99" in missing.stderr, missing.stderr
    gc = barrierflow("checkpoints", "gc", "ckpts", "--dry-run", cwd=job_dir)
    assert gc.returncode == 0 and "would remove 0 orphan file(s)" in gc.stdout, gc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("args", "names"), [
    (["run", "myjob:build", "--interval", "-1"], "--interval"),
    (["run", "myjob:build", "--interval", "0"], "--interval"),
    (["run", "myjob:build", "--unaligned", "--mode", "at-least-once"], "--unaligned"),
    (["run", "myjob:build", "--parallelism", "0"], "--parallelism"),
    (["run", "myjob:build", "--executor", "spark"], "--executor"),
    (["run", "myjob:nothing"], "returned None"),
    (["run", "nosuchmodule:build"], "'nosuchmodule'"),
    (["run", "badimport:build"], "module 'badimport' from"),
    (["run", "badimport:build"], "raised RuntimeError: no configuration found"),
    (["run", "myjob:ROWS"], "myjob:ROWS is not callable (it is int 300)"),
    (["run", "myjob:missing"], "has no function 'missing'"),
    (["run", "myjob"], "MODULE:FUNCTION"),
    (["run", "myjob:build", "--address", "127.0.0.1:6379"], "--address 127.0.0.1:6379 joins a Ray cluster: it "
                                                             "needs --executor ray"),
    (["demo", "--records", "ten"], "--records"),
])
def test_usage_errors_are_one_line_exit_2_no_traceback(job_dir: Path, args: list[str], names: str) -> None:
    done = barrierflow(*args, cwd=job_dir)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("barrierflow: error: "), done.stderr
    assert names in lines[0] and "Traceback" not in done.stderr + done.stdout


@pytest.mark.slow
def test_a_job_failed_for_good_restores_in_a_new_process_with_another_parallelism(job_dir: Path) -> None:
    other = barrierflow("run", "myjob:build", "--checkpoint-dir", "ckpts", "--interval", "0.002", cwd=job_dir)
    assert other.returncode == 0, other.stderr  # another job's checkpoints in the same directory
    failed = barrierflow("run", "myjob:fragile", "--checkpoint-dir", "ckpts", "--interval", "0.002", "--crashes", "1",
                         "--seed", "2", cwd=job_dir)
    assert failed.returncode == 1 and "TaskCrash" in failed.stderr, (failed.stdout, failed.stderr)
    restored = barrierflow("run", "myjob:fragile", "--restore-from", "ckpts", "--checkpoint-dir", "ckpts",
                           "--interval", "0.002", "--parallelism", "4", cwd=job_dir)
    assert restored.returncode == 0, restored.stderr
    assert "│ out  │            20,000 │" in restored.stdout, restored.stdout  # every record once
    # the checkpoint the failed run left unfinished is skipped, and said so once
    assert restored.stderr.count("skipping checkpoint") == 1, restored.stderr
    missing = barrierflow("run", "myjob:fragile", "--restore-from", "nowhere", cwd=job_dir)
    assert missing.returncode == 2 and "--restore-from nowhere" in missing.stderr, missing.stderr


@pytest.mark.slow
def test_a_job_that_failed_before_its_first_checkpoint_restores_from_the_beginning(job_dir: Path) -> None:
    """The checkpoint interval is longer than the failed run: no checkpoint of it began (on Ray a
    slow start does the same to a short job; `tests/ray/test_ray_restore.py`). The job's folder
    still says it ran there: `ls` shows it, and the restore starts from the beginning, every record
    once."""
    failed = barrierflow("run", "myjob:fragile", "--checkpoint-dir", "ckpts", "--interval", "600", "--crashes", "1",
                         "--seed", "2", cwd=job_dir)
    assert failed.returncode == 1 and "TaskCrash" in failed.stderr, (failed.stdout, failed.stderr)
    assert not list((job_dir / "ckpts" / "fragile").glob("chk-*")), "a checkpoint began"
    for listed in (barrierflow("checkpoints", "ls", "ckpts", cwd=job_dir),
                   barrierflow("checkpoints", "ls", "ckpts/fragile", cwd=job_dir)):
        assert listed.returncode == 0, listed.stderr
        assert "job fragile\n  no checkpoint: a run of the job started here" in listed.stdout, listed.stdout
    collected = barrierflow("checkpoints", "gc", "ckpts", cwd=job_dir)  # keeps the job's record
    assert collected.returncode == 0 and "job fragile: removed" in collected.stdout, collected.stderr
    other = barrierflow("run", "myjob:build", "--restore-from", "ckpts", cwd=job_dir)
    assert other.returncode == 2 and "no checkpoints of job 'build'" in other.stderr, other.stderr
    restored = barrierflow("run", "myjob:fragile", "--restore-from", "ckpts",
                           "--checkpoint-dir", "ckpts", "--interval", "0.05", "--parallelism", "3", cwd=job_dir)
    assert restored.returncode == 0, restored.stderr
    assert "│ out  │            20,000 │" in restored.stdout, restored.stdout  # every record once
    assert "restored from the beginning: no checkpoint of job 'fragile' in ckpts was taken" in restored.stdout, \
        restored.stdout


@pytest.mark.slow
def test_run_shows_progress_and_each_restart_with_its_cause(job_dir: Path) -> None:
    done = barrierflow("run", "myjob:fragile", "--checkpoint-dir", "ckpts", "--interval", "0.002", "--crashes", "1",
                       "--seed", "2", cwd=job_dir)
    assert done.returncode == 1 and re.search(r"^\[\s*[\d.]+ s\] running: .*records in", done.stdout, re.M), done
    build = job_dir / "myjob.py"
    build.write_text(build.read_text().replace("env.set_restart_strategy(RestartStrategy.no_restart())", ""))
    done = barrierflow("run", "myjob:fragile", "--checkpoint-dir", "ckpts2", "--interval", "0.002", "--crashes", "1",
                       "--seed", "2", cwd=job_dir)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^restart 1: task Source: collection\[0\] failed: injected fault: TaskCrash after \d+ "
                     r"records .* -> resumed from checkpoint \d+$", done.stdout, re.M), done.stdout
    assert "restored from" not in done.stdout and "high availability" not in done.stdout


@pytest.mark.slow
def test_a_failing_builder_exits_1_and_debug_shows_the_traceback(job_dir: Path) -> None:
    done = barrierflow("run", "myjob:broken", cwd=job_dir)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("barrierflow: error: ValueError: the builder is broken "
                                   "(--debug shows the traceback)")
    debug = barrierflow("run", "myjob:broken", "--debug", cwd=job_dir)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "the builder is broken" in debug.stderr


@pytest.mark.slow
def test_high_availability_against_a_closed_port_fails_fast_naming_the_address(job_dir: Path) -> None:
    import socket

    with socket.socket() as probe:  # ports nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        ray_port = probe.getsockname()[1]
    # "fails fast": ZooKeeper is checked before Ray is asked for anything (a cluster address nothing
    # answers at would otherwise be the error, after Ray's own retries)
    done = barrierflow("run", "myjob:build", "--executor", "ray", "--zookeeper", f"127.0.0.1:{port}",
                       "--address", f"127.0.0.1:{ray_port}", cwd=job_dir)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr  # one line, no kazoo noise
    assert f"127.0.0.1:{port}" in done.stderr and "Connection refused" in done.stderr, done.stderr
    assert str(ray_port) not in done.stderr, done.stderr


@pytest.mark.slow
def test_every_option_says_its_unit_or_default(job_dir: Path) -> None:
    for command in ("run", "demo"):
        text = barrierflow(command, "--help", cwd=job_dir).stdout
        assert "seconds" in text and "default" in text
        for option in ("--interval", "--parallelism", "--checkpoint-dir", "--seed", "--crashes"):
            assert option in text, (command, option)


def summary_rows(text: str) -> dict[str, str]:
    """The rows of the demo's printed tables: label -> the cells after it."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) >= 2 and cells[0]:
            rows[cells[0]] = " | ".join(cells[1:])
    return rows


@pytest.mark.slow
def test_demo_without_a_terminal_prints_plain_progress_and_a_summary_its_json_agrees_with(job_dir: Path) -> None:
    import json
    import re

    argv = ["demo", "--executor", "sim", "--records", "60000", "--interval", "0.02", "--seed", "6", "--unaligned",
            "--json", "demo.json"]
    done = barrierflow(*argv, cwd=job_dir)
    assert done.returncode == 0, (done.stdout, done.stderr)
    out = done.stdout
    assert "\x1b[" not in out, "no terminal: no escape sequences, no live table"
    progress = re.findall(r"^\[\s*[\d.]+ s\] (running|final checkpoint): .*records in ([\d,]+)", out, re.M)
    assert progress, out
    report = json.loads((job_dir / "demo.json").read_text())
    assert report["phases"][0] == "running" and set(report["phases"]) <= {"running", "final checkpoint"}
    rows = summary_rows(out)
    assert rows["records read (incl. replays)"] == f"{report['records_read']:,}"
    assert rows["records committed"] == "60,000" == f"{report['records_committed']:,}"
    assert "job time (virtual)" in rows
    assert rows["restarts (failovers)"] == str(report["restarts"]) == str(len(report["failures"]))
    assert rows["checkpoints completed / aborted"] == \
        f"{report['checkpoints_completed']} / {report['checkpoints_aborted']}"
    assert rows["persisted in-flight data total / max"] == \
        f"{report['persisted_bytes_total']:,} / {report['persisted_bytes_max']:,} bytes"
    # each restart is listed with its cause; every planned crash strikes (a crash planned past what its
    # task handles, on the skewed apps' smaller count task, strikes at the end of that task's input)
    assert len(re.findall(r"^restart \d+: .* -> resumed from ", out, re.M)) == report["restarts"] == 2
    assert "crash(es) were planned" not in out
    # what unaligned changed, next to the aligned baseline on the simulator
    compared = report["compared_with_aligned"]
    unaligned, aligned = compared["unaligned (sim, this run)"], compared["aligned (sim)"]
    assert aligned["persisted_bytes_total"] == 0 < unaligned["persisted_bytes_total"]
    assert unaligned["checkpoint_duration_p50_ms"] < aligned["checkpoint_duration_p50_ms"]
    assert rows["checkpoint duration p50 / max"].count("|") == 1  # the comparison's row: both columns
    assert "exactly-once check passed" in out and report["exactly_once"]
    # the same job, seed and crashes in this process: the simulator is deterministic
    from runtime import FaultPlan
    from runtime.cli.demo import demo_job
    from runtime.cli.parser import build_parser
    from runtime.workloads.pageview import pageview_rows

    args = build_parser().parse_args(argv)
    rows_in = pageview_rows(args.records, args.apps, args.seed)
    result = demo_job(args, rows_in, unaligned=True, storage=None).execute(
        "pageview", executor="sim", seed=args.seed, faults=FaultPlan.random(seed=args.seed, crashes=args.crashes))
    assert report["records_read"] == result.metrics.records_in
    assert report["failures"] == result.failures and report["restarts"] == result.restarts
    assert report["checkpoints_completed"] == len(result.completed_checkpoints)


@pytest.mark.ray
def test_demo_on_ray_shows_every_phase_to_the_end(job_dir: Path) -> None:
    import json
    import re

    done = barrierflow("demo", "--records", "20000", "--crashes", "0", "--json", "demo.json", cwd=job_dir)
    assert done.returncode == 0, (done.stdout, done.stderr)
    phases = json.loads((job_dir / "demo.json").read_text())["phases"]
    assert phases[0] == "starting" and phases[-2:] == ["committing", "stopping"], phases
    assert "running" in phases, phases
    assert "job time (wall, from the first deployment)" in summary_rows(done.stdout), done.stdout
    printed = re.findall(r"^\[\s*[\d.]+ s\] ([a-z ]+):", done.stdout, re.M)
    assert [p for i, p in enumerate(printed) if i == 0 or printed[i - 1] != p] == phases, done.stdout
