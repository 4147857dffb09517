"""The Flink Java page-view job (`benchmarks/flink_java/PageView.java`): build and run it.

`build` compiles the job with `javac` against the jars of the installed PyFlink (`pyflink/lib/*.jar`,
in this interpreter or the peers venv, see `benchmarks.peers`) into a directory; `FlinkJavaJob`
runs it on a local MiniCluster (`java -cp ...`) in its own process group, its REST endpoint bound
to 127.0.0.1 on a free port, so a caller can read `/jobs/<id>/...` while it runs
(`runtime.calibration.flink.collect_flink_rest`). The job writes its (created, done) stamps into
`work/stamps` (the format `benchmarks.peers` reads) and prints its checkpoint history (the last
`/jobs/<id>/checkpoints` response) at the end; `checkpoint_stats` turns that into a row's columns.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from typing import Any

from benchmarks.processes import kill_group

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink_java", "PageView.java")
STARTED_MARK = "BARRIERFLOW_FLINK_STARTED "
ROW_MARK = "BARRIERFLOW_PEER_ROW "


class FlinkJavaMissing(RuntimeError):
    """`javac`, `java` or PyFlink's jars are not there: the row cannot run (never a fake row)."""


def pyflink_lib(python: str | None) -> str:
    """The `pyflink/lib` directory of `python`'s PyFlink (None: PyFlink is not installed)."""
    if python is None:
        raise FlinkJavaMissing("PyFlink is not installed (python -m benchmarks.peers --setup-venv): "
                               "the Java job is compiled against its jars")
    probe = "import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), 'lib'))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    lib = out.stdout.strip()
    if out.returncode != 0 or not os.path.isdir(lib):
        raise FlinkJavaMissing(f"{python}: cannot locate pyflink/lib ({out.stderr.strip()[-200:]})")
    return lib


def build(lib: str, out_dir: str) -> str:
    """Compile PageView.java against `lib`'s jars into `out_dir`; the run's class path."""
    for tool in ("javac", "java"):
        if shutil.which(tool) is None:
            raise FlinkJavaMissing(f"'{tool}' is not on PATH: the Flink Java peer needs a JDK 17 (apt-get install openjdk-17-jdk-headless)")
    classpath = os.pathsep.join([out_dir, os.path.join(lib, "*")])
    done = subprocess.run(["javac", "-d", out_dir, "-cp", os.path.join(lib, "*"), SOURCE],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise FlinkJavaMissing(f"javac {SOURCE} failed against {lib}: {done.stderr.strip()[-400:]}")
    return classpath


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FlinkJavaJob:
    """One run of the Java job: `start()` returns once the job runs (its REST base URL and job id),
    `finish()` waits for the end and returns the final JSON; always `close()` (a context manager)."""

    def __init__(self, classpath: str, work: str, *, records: int, rate: float = 0.0, interval_ms: int = 100,
                 mode: str = "exactly-once", unaligned: bool = False, slow_subtask: int = -1, slow_us: int = 0) -> None:
        os.makedirs(os.path.join(work, "jvm-tmp"), exist_ok=True)
        self.argv = ["java", "-Xmx1g", f"-Djava.io.tmpdir={os.path.join(work, 'jvm-tmp')}", "-cp", classpath, "PageView",
                     "--records", str(records), "--rate", str(rate), "--interval", str(interval_ms), "--mode", mode,
                     "--unaligned", str(unaligned).lower(), "--slow-subtask", str(slow_subtask),
                     "--slow-us", str(slow_us), "--rest-port", str(free_port()), "--work", work]
        self.work = work
        self.proc: subprocess.Popen | None = None
        self.stderr = open(os.path.join(work, "java.stderr"), "w+")  # noqa: SIM115 (closed in close())

    def start(self) -> dict[str, str]:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     start_new_session=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # the JVM prints the mark once the job is submitted
            if line.startswith(STARTED_MARK):
                return json.loads(line[len(STARTED_MARK):])
        raise RuntimeError(f"Flink Java job exited {self.proc.wait()} before starting: {self._errors()}")

    def finish(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(ROW_MARK):
                return json.loads(line[len(ROW_MARK):])
        raise RuntimeError(f"Flink Java job exited {self.proc.wait()} without a result: {self._errors()}")

    def _errors(self) -> str:
        self.stderr.seek(0)
        lines = [ln.strip() for ln in self.stderr.read().splitlines() if "Exception" in ln or "Error" in ln]
        return " | ".join(lines[-2:]) or "no error printed"

    def close(self) -> None:
        if self.proc is not None:
            kill_group(self.proc, grace=5.0)
        self.stderr.close()

    def __enter__(self) -> FlinkJavaJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checkpoint_stats(history: Any) -> dict[str, Any] | None:
    """A `benchmarks.peers` row's checkpoint columns from a `/jobs/<id>/checkpoints` response
    (None: the job took no checkpoints)."""
    if not isinstance(history, dict):
        return None
    counts, durations = history.get("counts", {}), history.get("summary", {}).get("end_to_end_duration", {})
    size = history.get("summary", {}).get("checkpointed_size", {})
    failed = [c for c in history.get("history", []) if c.get("status") == "FAILED"]
    reasons: dict[str, int] = {}
    for c in failed:
        why = str(c.get("failure_message") or "unknown")[:120]
        reasons[why] = reasons.get(why, 0) + 1
    completed = counts.get("completed", 0)
    return {"completed": completed, "aborted": counts.get("failed", 0), "reasons": reasons,
            "p50": durations.get("p50") if completed else None, "p99": durations.get("p99") if completed else None,
            "max": durations.get("max") if completed else None, "bytes": size.get("max") if completed else None}
