"""Separate Ray nodes for the cluster tests: each node is a `ray start --block` process on a
loopback address with token authentication, as a user starts one per machine; it is stopped — or
killed, as when its machine dies — through the PIDs of its processes (`ray stop` would stop every
Ray on the machine, other people's included).

The head listens on 127.0.0.1 (with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`: Ray otherwise turns
127.0.0.1 into the machine's network address); worker nodes, which that switch refuses to start,
take 127.0.0.2, 127.0.0.3... — loopback addresses too, which Ray leaves alone. A driver on the
head's "machine" joins at 127.0.0.1 (with the switch too: Ray would resolve the address it joins the
same way) and is the head's.

Every node of a cluster shares one environment (`RayCluster.env`): the token, a temporary
directory of the cluster's own (Ray's session files and its "current cluster" note, so no other
`ray.init()` on the machine finds this cluster), the code (`PYTHONPATH`) and whatever the caller
adds (the S3 endpoint and credentials). Health checks every 500 ms notice a dead node in ~2 s.

If a node does not start, `RayNodeError` carries its log (the tests then fail with it, never skip).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
#: the `ray` command of this interpreter
RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]
#: node-death detection in ~2 s instead of ~15-30 s
HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                 "health_check_initial_delay_ms": 500, "health_check_timeout_ms": 500}
#: seconds a node may take to start on a loaded machine
START_TIMEOUT = 120.0
_STARTED = "Ray runtime started."


class RayNodeError(RuntimeError):
    """A Ray node did not start (the message carries its log)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RayNode:
    """One `ray start --block` process and the processes it starts."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> RayNode:
        """Start the node and wait until `ray start` reports it up.

        Raises:
            RayNodeError: it exited or did not come up within `START_TIMEOUT`.
        """
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([*RAY_CLI, "start", "--block", *self.args], env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if _STARTED in self.log_path.read_text(errors="replace"):
                return self
            if self.process.poll() is not None:
                raise RayNodeError(f"Ray {self.name} node exited with code {self.process.returncode}: {self.log()}")
            time.sleep(0.2)
        self.stop()
        raise RayNodeError(f"Ray {self.name} node did not start within {START_TIMEOUT:g} s: {self.log()}")

    def pids(self) -> list[int]:
        """The `ray start` process and every process it started (GCS, raylet, agents, workers)."""
        if self.process is None:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root.pid] + [p.pid for p in root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> list[int]:
        """SIGKILL every process of the node at once, as when its machine dies; the PIDs killed."""
        pids = self.pids()
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        _wait_gone(pids, 30)
        if self.process is not None:
            self.process.wait(timeout=30)
        return pids

    def stop(self) -> None:
        """Stop the node: SIGTERM to `ray start` (it stops its processes), then SIGKILL to any of
        them still alive after 30 s."""
        if self.process is None:
            return
        pids = self.pids()
        _signal(self.process.pid, signal.SIGTERM)
        if _wait_gone(pids, 30):
            for pid in pids:
                _signal(pid, signal.SIGKILL)
            _wait_gone(pids, 30)
        with contextlib.suppress(subprocess.TimeoutExpired):  # killed above
            self.process.wait(timeout=30)

    def listening(self) -> list[tuple[str, int, str, int]]:
        """`(process name, pid, address, port)` of every socket the node's processes listen on."""
        found = []
        for pid in self.pids():
            try:
                process = psutil.Process(pid)
                name, sockets = process.name(), process.net_connections(kind="inet")
            except psutil.NoSuchProcess:
                continue
            found += [(name, pid, s.laddr.ip, s.laddr.port) for s in sockets
                      if s.status == psutil.CONN_LISTEN or (s.type == socket.SOCK_DGRAM and s.laddr)]
        return found

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:] or "(no output)"
        except OSError as exc:
            return f"(no log: {exc})"


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of `pids` is alive (zombies count as gone); those still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


class RayCluster:
    """A head node and worker nodes on loopback addresses, token authentication on.

    Args:
        tmp_dir: the cluster's own directory (logs, Ray's session files); keep it short: Ray's
            socket paths under it must fit in ~107 bytes.
        env: variables every node and driver gets on top of this process's environment.
    """

    def __init__(self, tmp_dir: Path, env: dict[str, str] | None = None) -> None:
        self.tmp_dir = Path(tmp_dir)
        (self.tmp_dir / "tmp").mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.token = secrets.token_hex(32)
        base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
        # the head's and the drivers' switch: 127.0.0.1 stays 127.0.0.1 (worker nodes set it to 1)
        self.env = {**base, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                    "TMPDIR": str(self.tmp_dir / "tmp"),
                    "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH")) if p),
                    **(env or {})}
        self.head: RayNode | None = None
        self.workers: list[RayNode] = []

    @property
    def address(self) -> str:
        """The head's GCS address, what `ray start --address`, `address=` and `--address` take."""
        return f"127.0.0.1:{self.port}"

    def start(self, workers: int = 1) -> RayCluster:
        """Start the head and `workers` worker nodes (one CPU each).

        Raises:
            RayNodeError: a node did not start (the nodes started so far are stopped).
        """
        try:
            self.head = RayNode("head", ["--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
                                         "--include-dashboard=false", "--num-cpus=1", "--disable-usage-stats",
                                         *_client_server_port(),
                                         f"--system-config={json.dumps(HEALTH_CHECKS)}"],
                                self.env, self.tmp_dir).start()
            for _ in range(workers):
                self.add_worker()
        except RayNodeError:
            self.stop()
            raise
        return self

    def add_worker(self) -> RayNode:
        """Start one more worker node, on the next loopback address (127.0.0.2, 127.0.0.3, ...)."""
        number = len(self.workers) + 1
        node = RayNode(f"worker-{number}",
                       [f"--address={loopback_name()}:{self.port}", f"--node-ip-address=127.0.0.{1 + number}",
                        "--num-cpus=1",
                        f"--dashboard-agent-listen-port={free_port()}", "--disable-usage-stats"],
                       {**self.env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}, self.tmp_dir)
        self.workers.append(node)
        return node.start()

    def stop(self) -> None:
        """Stop every node by its PIDs, workers first."""
        for node in [*self.workers, *([self.head] if self.head else [])]:
            node.stop()


def _client_server_port() -> list[str]:
    """A free port for the head's Ray Client server where `ray[client]` is installed (it starts one,
    on 10001 unless told); nothing otherwise (`ray start` refuses the option without grpc)."""
    return [f"--ray-client-server-port={free_port()}"] if importlib.util.find_spec("grpc") else []


def loopback_name() -> str:
    """How a worker node names the head at 127.0.0.1: a name /etc/hosts gives 127.0.0.1 other than
    `localhost` (with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`, which a worker node needs, Ray turns
    the address `127.0.0.1` or `localhost` into the machine's network address when it has a default
    route, where the head does not listen), else `127.0.0.1`."""
    try:
        lines = Path("/etc/hosts").read_text().splitlines()
    except OSError:
        return "127.0.0.1"
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if fields and fields[0] == "127.0.0.1":
            names = [name for name in fields[1:] if name != "localhost"]
            if names:
                return names[0]
    return "127.0.0.1"
