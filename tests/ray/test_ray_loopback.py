"""The embedded local Ray is safe by default: every socket its processes listen on
is on 127.0.0.1/::1 (Ray's own defaults are `*` for the GCS, raylet and workers and the machine's
address for the runtime-env agent), the dashboard is off, and token authentication is on."""

from __future__ import annotations

import os
import socket

import pytest

from runtime.ray.cluster import is_loopback, token_auth_enabled

pytestmark = pytest.mark.ray


@pytest.fixture
def ray_processes(ray_session):
    """Every process of the embedded Ray: the driver (its core worker listens too), the processes
    Ray started for the node (GCS, raylet, agents...) and their children (worker processes)."""
    ray = ray_session
    import psutil  # Ray ships it (ray/thirdparty_files), importable once ray is

    @ray.remote(num_cpus=0)
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    probe = Probe.remote()  # at least one worker process besides the idle ones
    actor_pid = ray.get(probe.pid.remote(), timeout=60)
    node = ray._private.worker._global_node
    roots = [psutil.Process(info.process.pid) for infos in node.all_processes.values() for info in infos
             if info.process is not None and info.process.poll() is None]
    processes = {p.pid: p for root in roots for p in [root, *root.children(recursive=True)]}
    processes[os.getpid()] = psutil.Process()
    assert actor_pid in processes, "the actor's worker process is not among the node's processes"
    yield psutil, list(processes.values())
    ray.kill(probe)


def test_every_process_of_the_embedded_ray_listens_on_loopback_only(ray_session, ray_processes) -> None:
    psutil, processes = ray_processes
    assert ray_session.util.get_node_ip_address() == "127.0.0.1"
    listening, names = [], set()
    for process in processes:
        try:
            sockets = process.net_connections(kind="inet")
            name = process.name()
        except psutil.NoSuchProcess:
            continue
        for s in sockets:
            if s.status == psutil.CONN_LISTEN or (s.type == socket.SOCK_DGRAM and s.laddr):
                listening.append((name, process.pid, s.laddr.ip, s.laddr.port))
                names.add(name)
    assert {"gcs_server", "raylet"} <= names, listening  # the check saw the node's servers
    assert any(n.startswith("ray::") for n in names), listening  # and worker processes
    exposed = [entry for entry in listening if not is_loopback(entry[2])]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_the_embedded_ray_has_token_auth_on_and_no_dashboard(ray_session) -> None:
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        pytest.fail("RAY_AUTH_MODE is set to turn token authentication off: unset it to run this test")
    assert token_auth_enabled()
    assert not ray_session._private.worker._global_node.address_info.get("webui_url")
    assert not os.path.exists(os.path.expanduser("~/.ray/auth_token")) or os.environ.get("RAY_AUTH_TOKEN"), \
        "the token should come from RAY_AUTH_TOKEN, not a file barrierflow wrote"


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.2", False), ("127.0.0.2", False), ("*", False),
])
def test_is_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_the_embedded_ray_never_joins_the_cluster_a_ray_start_recorded(closed_port: int) -> None:
    # regression: `ray.init()` without an address joins the cluster the last `ray start` on the
    # machine recorded in $TMPDIR/ray/ray_current_cluster (left behind, with a dead address, by a
    # node stopped by its PID): the embedded Ray refused to start ("num_cpus ... must not be provided")
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    # a short TMPDIR of the test's own: Ray's socket paths under it must fit AF_UNIX's 107 bytes
    tmp = Path(tempfile.mkdtemp(prefix="bf-ray-", dir="/tmp"))
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{closed_port}")
    probe = ("from runtime.ray.cluster import ensure_ray\nimport ray\nensure_ray()\n"
             "print(ray.get_runtime_context().gcs_address)\nray.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    try:
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=180)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    address = done.stdout.strip().splitlines()[-1]
    assert address.startswith("127.0.0.1:") and address != f"127.0.0.1:{closed_port}", done.stdout
