"""The operating-system process of each actor of a job, to kill it as the OOM killer would.

A `ProcessKill` fault (`vocabulary.fault_plan`) sends SIGKILL to an actor's process: Ray is not
asked (as it is by `ray.kill`, a `TaskCrash`), it finds the process gone. `ActorProcesses` asks
each actor for its process id and node as soon as it is created (`__ray_call__`, queued ahead of
any other call to it, so a busy actor still answers at once) and, when told to kill one:

* on the driver's node, checks that the process id still belongs to that actor (its command line
  is Ray's title for it, `ray::<ActorClass>...`; a process id is reused once its process is gone)
  and sends SIGKILL itself;
* on another node (a cluster), asks the actor to send SIGKILL to its own process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError

log = logging.getLogger("barrierflow.ray")

#: seconds to wait for an actor's answer about its process (it is queued first, at creation)
PROCESS_TIMEOUT = 30.0


def _process_of(actor: Any) -> tuple[int, str, str]:
    """Run inside the actor: its process id, node id and class name."""
    return os.getpid(), ray.get_runtime_context().get_node_id(), type(actor).__name__


def _kill_own_process(actor: Any) -> None:
    """Run inside the actor: SIGKILL its own process."""
    os.kill(os.getpid(), signal.SIGKILL)


class ActorProcesses:
    """The process of every actor `watch`ed, to `kill` by SIGKILL."""

    def __init__(self) -> None:
        #: actor id -> (handle, reference to its `_process_of` answer)
        self._watched: dict[str, tuple[Any, Any]] = {}

    def watch(self, handle: Any) -> None:
        """Ask the newly created actor `handle` for its process (answered in the background)."""
        self._watched[handle._actor_id.hex()] = (handle, handle.__ray_call__.remote(_process_of))

    def kill(self, handle: Any) -> bool:
        """SIGKILL the process of actor `handle`. False when there is none to kill: never
        watched, never started, or already gone."""
        entry = self._watched.pop(handle._actor_id.hex(), None)
        if entry is None:
            return False
        try:
            pid, node, actor_class = ray.get(entry[1], timeout=PROCESS_TIMEOUT)
        except RayError as exc:
            log.info("barrierflow ray: no process to kill: %s", str(exc).splitlines()[0] if str(exc) else exc)
            return False
        if node != ray.get_runtime_context().get_node_id():
            handle.__ray_call__.remote(_kill_own_process)
            return True
        if not _is_actor_process(pid, actor_class):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            log.info("barrierflow ray: killed process %d of %s", pid, actor_class)
            return True
        return False


def _is_actor_process(pid: int, actor_class: str) -> bool:
    """Whether process `pid` on this node is still Ray's process of an `actor_class` actor (Ray
    titles it `ray::<class>`, then `ray::<class>.<method>` while a call runs)."""
    if not Path("/proc").is_dir():
        return True  # no /proc to ask: trust the id the actor answered with
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:  # gone
        return False
    return title.startswith(f"ray::{actor_class}")
