"""Starting or joining Ray, and what actors are placed with.

`ensure_ray(address)` starts an embedded local Ray when none is running (the caller shuts it
down afterwards) or joins the cluster at `address` (or `RAY_ADDRESS`), shipping barrierflow's
packages with the job's `runtime_env` (`py_modules`).

An embedded Ray is safe by default: every process it starts (GCS, raylet with its
object manager, runtime-env agent, workers, the driver's own core worker) listens on 127.0.0.1
only — checked after start, refused otherwise — the dashboard is off, and Ray's token
authentication is on (Ray >= 2.59 turns it on for a local `ray.init()`; barrierflow hands it a
random per-process token in `RAY_AUTH_TOKEN`, so nothing is written to `~/.ray`). A user who sets
`RAY_AUTH_MODE=disabled` turns authentication off knowingly (a warning says so); loopback-only
addresses still keep other hosts out. Joining a cluster (`address=`) is the user's configuration:
its addresses, authentication and TLS are the cluster's, and barrierflow changes none of them.

Also: no usage stats, arguments up to 1 MiB inline and none of Ray's bookkeeping nothing reads
(`LOCAL_SYSTEM_CONFIG`), and a PYTHONPATH
that lets worker processes import everything the driver can (job functions defined in importable
modules are pickled by reference).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import secrets
import sys
from collections.abc import Iterator
from typing import Any

import ray

log = logging.getLogger("barrierflow.ray")

#: the address every process of an embedded Ray listens on
LOOPBACK = "127.0.0.1"

#: environment of an embedded local Ray (set only when barrierflow starts one)
LOCAL_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray's own switch for a loopback node
    "RAY_USAGE_STATS_ENABLED": "0",
}

#: Ray system settings of an embedded local Ray (each is a setting in Ray's `ray_config_def.h`).
#: Arguments up to 1 MiB go inline with the call instead of through the object store: buffers of
#: 10,000 rows (~100-500 KB) then cost one call, not a call plus a store put and fetch (measured
#: ~2x calls/s for 100 KB-1 MB; the vectorised page-view job went 1.9 -> 2.5 M records/s with
#: checkpointing off). The rest leaves out work that is not the job's (benchmarks/README.md,
#: "Every core-second"): no timing of every
#: event-loop handler (`event_stats`), no metrics recorded and exported (nothing reads them with
#: the dashboard off), no task state events or timeline sent to GCS.
LOCAL_SYSTEM_CONFIG: dict[str, Any] = {
    "max_direct_call_object_size": 1 << 20,
    "event_stats": False,
    "enable_metrics_collection": False,
    "task_events_report_interval_ms": 0,
    "enable_timeline": False,
}

_PACKAGES = ("runtime", "operators", "checkpoint", "state", "vocabulary")

#: the token of the embedded Rays this process starts (one per process: Ray's driver caches the
#: token it first reads, so a second embedded Ray must use the same)
_EMBEDDED_TOKEN = secrets.token_hex(32)


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


def ensure_ray(address: str | None = None, num_cpus: int | None = None,
               system_config: dict[str, Any] | None = None) -> bool:
    """Make sure this process is connected to Ray.

    Args:
        address: a cluster to join (default: `RAY_ADDRESS` if set, else an embedded local Ray on
            loopback with token authentication, see the module docstring).
        num_cpus: CPUs of an embedded Ray (default: the machine's).
        system_config: Ray system settings of an embedded Ray (default `LOCAL_SYSTEM_CONFIG`).

    Returns:
        True when this call started or joined Ray (the caller then `ray.shutdown()`s), False when
        the process was already connected.

    Raises:
        RayStartError: Ray could not start, the cluster could not be reached, or an embedded Ray
            would not be on loopback only.
    """
    if ray.is_initialized():
        return False
    address = address if address is not None else (os.environ.get("RAY_ADDRESS") or None)
    try:
        if address is not None:
            ray.init(address=address, runtime_env=cluster_runtime_env(), log_to_driver=False)
        else:
            _start_local(num_cpus, LOCAL_SYSTEM_CONFIG if system_config is None else system_config)
    except RayStartError:
        raise
    except Exception as exc:
        where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
        raise RayStartError(f"barrierflow could not start/join {where}: {exc}") from exc
    return True


def _start_local(num_cpus: int | None, system_config: dict[str, Any]) -> None:
    for key, value in LOCAL_ENV.items():
        os.environ.setdefault(key, value)
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.strip().lower() != "token":
        log.warning("RAY_AUTH_MODE=%s: the embedded Ray runs without token authentication; only its "
                    "loopback-only addresses keep other hosts out (any local user can still reach it)", mode)
    elif not os.environ.get("RAY_AUTH_TOKEN") and not os.environ.get("RAY_AUTH_TOKEN_PATH"):
        os.environ["RAY_AUTH_TOKEN"] = _EMBEDDED_TOKEN  # inherited by every process Ray starts
    with _loopback_node():
        # address="local": a new instance, never the cluster a `ray start` on this machine last
        # recorded (Ray's default for address=None, which also tries a stale record's dead address)
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
                 runtime_env=local_runtime_env(),
                 log_to_driver=False, _system_config=system_config, _node_ip_address=LOOPBACK)
    node_ip = ray.util.get_node_ip_address()
    if not is_loopback(node_ip):
        ray.shutdown()
        raise RayStartError(f"the embedded Ray came up on {node_ip}, not {LOOPBACK}: it would listen on a "
                            "network interface, so barrierflow stopped it (set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 "
                            "before importing ray, or join a cluster you configured with address=)")
    if (mode is None or mode.strip().lower() == "token") and not token_auth_enabled():
        log.warning("the embedded Ray runs without token authentication (Ray %s has it off by default; "
                    "barrierflow needs ray>=2.59): only its loopback-only addresses protect it", ray.__version__)


@contextlib.contextmanager
def _loopback_node() -> Iterator[None]:
    """Make `ray.init` keep `_node_ip_address="127.0.0.1"`: Ray turns a loopback address into the
    machine's external one unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` was set before `ray` was
    imported (read once, into `ray_constants.ENABLE_RAY_CLUSTER`). Every Ray process then binds the
    node address. Restored afterwards: joining a cluster later must advertise a reachable address."""
    try:
        from ray._private import ray_constants
    except ImportError:  # pragma: no cover - a Ray without it: the check after start decides
        yield
        return
    previous = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = previous


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP, IPv4-mapped IPv6 included) is 127.0.0.1 or ::1."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip in (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


def token_auth_enabled() -> bool:
    """Whether the connected Ray enforces token authentication (False for a Ray without it)."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
    except ImportError:
        return False
    return bool(is_token_auth_enabled())


def alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]
