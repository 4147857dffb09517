"""moto's standalone S3 server for the tests: a real S3-compatible endpoint on 127.0.0.1.

`S3Server.start()` runs `python -m moto.server` on a port the OS picks (read back from its log),
and `stop()` ends that process by its PID. Buckets are made with pyarrow (what barrierflow itself
talks to S3 with), one per test. Checkpoint URIs name the endpoint in their query
(`?endpoint_override=127.0.0.1:PORT&scheme=http`); the credentials come from the environment
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`: moto accepts any), as the README tells users to
set them. Processes that must find the endpoint without a query use `AWS_ENDPOINT_URL` (`env()`).

If moto is not installed or the server does not come up, `S3StartError` says why (the tests
then fail with it, never skip).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

#: credentials moto accepts (any would do); set for the test session and handed to subprocesses
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "barrierflow-test", "AWS_SECRET_ACCESS_KEY": "barrierflow-test-secret"}
#: seconds the server may take to start (a loaded machine imports moto slowly)
START_TIMEOUT = 90.0
_LISTENING = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")
_BUCKETS = itertools.count(1)


class S3StartError(RuntimeError):
    """moto's S3 server could not be started (the message says why and what to install)."""


class S3Server:
    """One moto S3 server process on 127.0.0.1.

    Args:
        log_dir: where its log goes (the port is read from it).
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_path = Path(log_dir) / "moto-s3.log"
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    def start(self) -> S3Server:
        """Start the server and wait until it listens.

        Raises:
            S3StartError: moto is missing, the process exited, or it did not listen in time.
        """
        try:
            import moto.server  # noqa: F401 - only to fail early and clearly
        except ImportError as exc:
            raise S3StartError(f"moto's S3 server is not installed ({exc}): pip install -e '.[test]' "
                               "brings moto[server]") from exc
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.log_path.read_text(errors="replace"))
            if match:
                self.port = int(match.group(1))
                return self
            if self.process.poll() is not None:
                raise S3StartError(f"moto's S3 server exited with code {self.process.returncode}: {self._log_tail()}")
            time.sleep(0.1)
        self.stop()
        raise S3StartError(f"moto's S3 server did not listen within {START_TIMEOUT:g} s: {self._log_tail()}")

    def stop(self) -> None:
        """End the server process (by its PID: SIGTERM, then SIGKILL after 10 s)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    @property
    def endpoint(self) -> str:
        """`127.0.0.1:PORT`, what `endpoint_override` takes."""
        assert self.port is not None, "the server is not started"
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment variables that point pyarrow (any process) at this server."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://{self.endpoint}"}

    def uri(self, bucket: str, prefix: str = "checkpoints") -> str:
        """A checkpoint storage URI in `bucket`, naming this endpoint in its query."""
        return f"s3://{bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http"

    def create_bucket(self, name: str | None = None) -> str:
        """Create a new bucket (a fresh name unless given) and return its name."""
        import pyarrow.fs as pafs

        name = name or f"bf-{next(_BUCKETS)}-{uuid.uuid4().hex[:8]}"
        fs = pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http",
                               access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                               secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], allow_bucket_creation=True)
        fs.create_dir(name)
        return name

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:] or "(no output)"
        except OSError as exc:
            return f"(no log: {exc})"


def set_credentials() -> dict[str, str | None]:
    """Put `CREDENTIALS` into this process's environment; returns what they replaced."""
    previous = {key: os.environ.get(key) for key in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    return previous


def restore_environment(previous: dict[str, str | None]) -> None:
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
