"""Ray's errors turned into the project's own, so a failure on Ray reads as on the simulator.

A task or service actor that raises reaches the driver as a `RayTaskError` (a Ray class, a string
of Ray frames with terminal colour codes, the user's exception inside); nested actor calls nest
them. The Ray executor is the only part that knows Ray, so it unwraps here: `get` raises what the
actor raised, and `project_error` is what `execute()` raises for anything Ray-specific left over
(the exception a remote call raised, else a `JobFailedError` naming what died or timed out). The
Ray error stays the `__cause__`, so a traceback (`barrierflow --debug`) still shows Ray's side.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from runtime.jobmaster.result import JobFailedError

__all__ = ["cause_of", "describe", "get", "project_error"]


def cause_of(exc: BaseException) -> BaseException:
    """What the remote code raised, through nested Ray calls; `exc` itself if it is no Ray task error."""
    seen = 0
    while isinstance(exc, RayTaskError) and exc.cause is not None and exc.cause is not exc and seen < 100:
        exc, seen = exc.cause, seen + 1
    return exc


def describe(exc: BaseException) -> str:
    """One line for a message: what the remote code raised (`Type: message`), or the first line of
    another Ray error, without Ray's frames."""
    cause = cause_of(exc)
    if cause is not exc or not isinstance(exc, RayError):
        text = " ".join(str(cause).split())
        return f"{type(cause).__name__}: {text}" if text else type(cause).__name__
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def get(refs: Any, timeout: float | None = None) -> Any:
    """`ray.get`, raising what the remote call raised instead of Ray's `RayTaskError`."""
    try:
        return ray.get(refs, timeout=timeout)
    except RayTaskError as exc:
        raise cause_of(exc) from exc


def project_error(exc: RayError, job_name: str) -> BaseException:
    """What `execute()` raises for a Ray error that reached the driver's boundary: the exception
    the remote call raised, else a `JobFailedError` saying what died or did not answer."""
    cause = cause_of(exc)
    if cause is not exc:
        return cause
    if isinstance(exc, RayActorError):
        what = "an actor of the job died"
    elif isinstance(exc, GetTimeoutError):
        what = "an actor of the job did not answer in time"
    else:
        what = "Ray failed"
    return JobFailedError(f"job {job_name!r} failed: {what}: {describe(exc)}", exc)
