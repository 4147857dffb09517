"""Ray's errors turned into the project's own, so a failure on Ray reads as on the simulator.

A task or service actor that raises reaches the driver as a `RayTaskError` (a Ray class, a string
of Ray frames with terminal colour codes, the user's exception inside); nested actor calls nest
them. The Ray executor is the only part that knows Ray, so it unwraps here: `get` raises what the
actor raised, and `project_error` is what `execute()` raises for anything Ray-specific left over
(the exception a remote call raised, else a `JobFailedError` naming what died or timed out). The
Ray error stays the `__cause__`, so a traceback (`barrierflow --debug`) still shows Ray's side.

An actor whose constructor raised reaches the driver as an `ActorDiedError` holding only Ray's text
of it (the traceback, colour codes, the actor's repr), not the exception: `describe` reads the
actor's class and the exception's line back out of that text.
"""

from __future__ import annotations

import re
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from runtime.jobmaster.result import JobFailedError

__all__ = ["cause_of", "constructor_failure", "describe", "get", "project_error"]

_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONSTRUCTOR = re.compile(r"ray::(\w+)\.__init__\(\)")


def cause_of(exc: BaseException) -> BaseException:
    """What the remote code raised, through nested Ray calls; `exc` itself if it is no Ray task error."""
    seen = 0
    while isinstance(exc, RayTaskError) and exc.cause is not None and exc.cause is not exc and seen < 100:
        exc, seen = exc.cause, seen + 1
    return exc


def constructor_failure(exc: BaseException) -> tuple[str, str] | None:
    """For an actor whose constructor raised: its class and what it raised (`Type: message`, the
    type without its module), read from Ray's text; None for any other error."""
    if not (isinstance(exc, RayActorError) and exc.actor_init_failed):
        return None
    lines = _TERMINAL_CODES.sub("", str(exc)).splitlines()
    actors = _CONSTRUCTOR.findall("\n".join(lines))
    actor = actors[-1] if actors else "an actor"
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    # the innermost traceback's exception line: the first unindented line after its last frame
    raised = next((line for line in lines[frames[-1] + 1:] if line[:1].strip()), "") if frames else ""
    name, _, message = raised.partition(": ")
    if not raised or " " in name:
        return actor, "its constructor raised (Ray gave no traceback)"
    return actor, f"{name.rsplit('.', 1)[-1]}: {message.strip()}" if message.strip() else name.rsplit(".", 1)[-1]


def describe(exc: BaseException) -> str:
    """One line for a message: what the remote code raised (`Type: message`; for a constructor:
    which actor's, too), or the first line of another Ray error, without Ray's frames or colour
    codes."""
    cause = cause_of(exc)
    if cause is not exc or not isinstance(exc, RayError):
        text = " ".join(_TERMINAL_CODES.sub("", str(cause)).split())
        return f"{type(cause).__name__}: {text}" if text else type(cause).__name__
    failed = constructor_failure(exc)
    if failed is not None:
        return f"the constructor of {failed[0]} raised {failed[1]}"
    lines = _TERMINAL_CODES.sub("", str(exc)).strip().splitlines()
    return " ".join(lines[0].split()) if lines else type(exc).__name__


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
    if isinstance(exc, RayActorError) and exc.actor_init_failed:
        what = "an actor of the job did not start"
    elif isinstance(exc, RayActorError):
        what = "an actor of the job died"
    elif isinstance(exc, GetTimeoutError):
        what = "an actor of the job did not answer in time"
    else:
        what = "Ray failed"
    return JobFailedError(f"job {job_name!r} failed: {what}: {describe(exc)}", exc)
