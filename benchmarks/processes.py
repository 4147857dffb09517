"""Child processes in their own process group, ended with everything they started (JVMs, workers)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """End the child's process group (the child, its JVM and its Python UDF workers): give what is
    left `grace` seconds to exit by itself (a JVM shutting down cleans up its temp files), then
    SIGTERM, then SIGKILL."""
    for sig, wait in ((None, grace), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                proc.wait(timeout=0)
            if not group_alive(proc.pid):
                return
            time.sleep(0.1)
