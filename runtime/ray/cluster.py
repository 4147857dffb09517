"""Starting or joining Ray, and what actors are placed with.

`ensure_ray(address)` starts an embedded local Ray when none is running (the caller shuts it
down afterwards) or joins the cluster at `address`, shipping barrierflow's packages with the
job's `runtime_env` (`py_modules`). A local Ray gets the recipe that works on this kind of
machine: token auth off, node on 127.0.0.1, no usage stats, no dashboard, arguments up to 1 MiB
inline (`LOCAL_SYSTEM_CONFIG`), and a PYTHONPATH that lets worker processes import everything
the driver can (job functions defined in importable modules are pickled by reference).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import ray

LOCAL_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}

#: Ray system settings of an embedded local Ray. Arguments up to 1 MiB go inline with the call
#: instead of through the object store: buffers of 10,000 rows (~100-500 KB) then cost one call,
#: not a call plus a store put and fetch (measured ~2x calls/s for 100 KB-1 MB, PLATFORM.md; the
#: vectorised page-view job went 1.9 -> 2.5 M records/s with checkpointing off).
LOCAL_SYSTEM_CONFIG = {"max_direct_call_object_size": 1 << 20}

_PACKAGES = ("runtime", "operators", "checkpoint", "state")


class RayStartError(RuntimeError):
    """Ray could not be started or joined (the message says how it was attempted)."""


def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def local_runtime_env() -> dict[str, Any]:
    """A runtime_env for a Ray on this machine: workers see the driver's import path."""
    paths = [repo_root()] + [p for p in sys.path if p and os.path.isdir(p)]
    seen: list[str] = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(seen)}}


def cluster_runtime_env() -> dict[str, Any]:
    """A runtime_env for a remote cluster: ship barrierflow's packages as py_modules."""
    root = repo_root()
    return {"py_modules": [os.path.join(root, p) for p in _PACKAGES]}


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Make sure this process is connected to Ray.

    Returns:
        True when this call started or joined Ray (the caller then `ray.shutdown()`s), False when
        the process was already connected.

    Raises:
        RayStartError: Ray could not start or the cluster could not be reached.
    """
    if ray.is_initialized():
        return False
    for key, value in LOCAL_ENV.items():
        os.environ.setdefault(key, value)
    try:
        if address is not None:
            ray.init(address=address, runtime_env=cluster_runtime_env(), log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
                     runtime_env=local_runtime_env(), log_to_driver=False, _system_config=LOCAL_SYSTEM_CONFIG)
    except Exception as exc:
        where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
        raise RayStartError(f"barrierflow could not start/join {where}: {exc}") from exc
    return True


def alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]
