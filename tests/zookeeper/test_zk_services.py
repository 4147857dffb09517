"""The ZOOKEEPER recovery factory and the server helper / shell script."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from zk_helpers import REPO_ROOT, make_checkpoint

import checkpoint.io.zookeeper_server as zk_server_module
from checkpoint.io.ha_services import create_recovery_factory
from checkpoint.io.recovery import DEFAULT_SESSION_TIMEOUT, HighAvailabilityError, RecoveryMode
from checkpoint.io.zookeeper import (
    ZooKeeperCheckpointIDCounter,
    ZooKeeperCheckpointRecoveryFactory,
    ZooKeeperCompletedCheckpointStore,
)
from checkpoint.io.zookeeper_election import ZooKeeperLeaderElection
from checkpoint.io.zookeeper_server import ZooKeeperServer, four_letter_word, free_port
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore

pytestmark = pytest.mark.zookeeper


def test_fixture_server_answers_ruok(zk_server):
    assert four_letter_word(zk_server.port, "ruok") == "imok"
    assert zk_server.hosts == f"127.0.0.1:{zk_server.port}"
    assert zk_server.pid is not None


def test_a_client_keeps_the_session_timeout_it_asks_for(zk_server):
    """The HA default session (10 s) is what the server grants, not lowered to its maximum; and
    a maximum shorter than two ticks is refused, naming the option."""
    client = KazooClient(hosts=zk_server.hosts, timeout=DEFAULT_SESSION_TIMEOUT)
    client.start(timeout=10)
    try:
        session = f"sid=0x{client.client_id[0]:x},"
        granted = [line for line in four_letter_word(zk_server.port, "cons").splitlines() if session in line]
        assert len(granted) == 1 and ",to=10000," in granted[0], granted
    finally:
        client.stop()
        client.close()
    with pytest.raises(ValueError, match="max_session_timeout"):
        ZooKeeperServer(tick_time_ms=200, max_session_timeout=0.3)


def test_factory_builds_the_design_layout(zk_server, zk_client, cluster_id):
    storage = CheckpointStorage(MemoryBlobStore())
    with create_recovery_factory(RecoveryMode.ZOOKEEPER, hosts=zk_server.hosts, cluster_id=cluster_id) as services:
        assert services.mode is RecoveryMode.ZOOKEEPER
        counter = services.create_id_counter("job-1")
        election = services.create_leader_election("job-1", "jm-0")
        store = services.create_store("job-1", storage, 1, leader_election=election)
        assert isinstance(counter, ZooKeeperCheckpointIDCounter)
        assert isinstance(election, ZooKeeperLeaderElection)
        assert isinstance(store, ZooKeeperCompletedCheckpointStore)
        counter.start()
        election.start()
        assert election.await_leadership(5)
        store.add_checkpoint(make_checkpoint(storage, "job-1", counter.get_and_increment()))
        root = f"/barrierflow/{cluster_id}/job-1"
        assert sorted(zk_client.get_children(root)) == ["checkpoint-counter", "checkpoints", "leader"]
        assert zk_client.get_children(f"{root}/checkpoints") == ["0000000000000000001"]
        election.stop()


def test_factory_validates_its_options():
    with pytest.raises(ValueError, match="hosts"):
        create_recovery_factory("zookeeper")
    with pytest.raises(ValueError, match="cluster_id"):
        create_recovery_factory("zookeeper", hosts="127.0.0.1:1", cluster_id="a/b")
    with pytest.raises(ValueError, match="session_timeout"):
        create_recovery_factory("zookeeper", hosts="127.0.0.1:1", session_timeout=0)
    with pytest.raises(ValueError, match="job_id"):
        ZooKeeperCheckpointRecoveryFactory("127.0.0.1:1").job_path("x/y")


def test_unreachable_zookeeper_is_a_bounded_clear_error():
    services = ZooKeeperCheckpointRecoveryFactory(f"127.0.0.1:{free_port()}", operation_timeout=0.5)
    start = time.monotonic()
    with pytest.raises(HighAvailabilityError, match="cannot connect to ZooKeeper at 127.0.0.1"):
        services.create_id_counter("job")
    assert time.monotonic() - start < 3.0
    services.close()


def test_start_errors_name_what_is_missing(monkeypatch, zk_server, tmp_path):
    with pytest.raises(RuntimeError, match=f"port {zk_server.port} .* is busy"):
        ZooKeeperServer(zk_server.port, tmp_path / "busy").start()
    monkeypatch.setattr(zk_server_module, "ZOOKEEPER_JAR", Path("/nonexistent/zookeeper.jar"))
    with pytest.raises(RuntimeError, match="apt-get install -y zookeeper"):
        ZooKeeperServer(data_dir=tmp_path / "nojar").start()
    monkeypatch.setattr(zk_server_module.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="`java` is not on PATH"):
        ZooKeeperServer(data_dir=tmp_path / "nojava").start()


def test_early_exit_reports_the_log(tmp_path, monkeypatch):
    server = ZooKeeperServer(data_dir=tmp_path / "bad")
    monkeypatch.setattr(server, "write_config", lambda: tmp_path / "missing.cfg")
    with pytest.raises(RuntimeError, match="exited with code"):
        server.start()
    assert server.pid is None


def test_shell_script_start_status_stop(tmp_path):
    script = Path(REPO_ROOT) / "scripts" / "zookeeper.sh"
    data_dir, port = str(tmp_path / "sh"), str(free_port())

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args, data_dir, port], capture_output=True, text=True, timeout=60)

    started = run("start")
    try:
        assert started.returncode == 0, started.stderr
        assert "ZooKeeper started" in started.stdout
        assert run("status").returncode == 0
        assert four_letter_word(int(port), "ruok") == "imok"
        again = run("start")
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    status = run("status")
    assert status.returncode == 1 and "not running" in status.stdout
    assert subprocess.run([str(script), "bogus"], capture_output=True, text=True).returncode == 2


def test_barrierflow_zookeeper_command_starts_and_stops_a_local_server(tmp_path):
    from runtime.cli import main as cli

    args = ["--dir", str(tmp_path / "cli"), "--port", str(free_port())]
    assert cli(["zookeeper", "start", *args]) == 0
    try:
        port = int(args[-1])
        assert four_letter_word(port, "ruok") == "imok"
        assert cli(["zookeeper", "status", *args]) == 0
    finally:
        assert cli(["zookeeper", "stop", *args]) == 0
    assert cli(["zookeeper", "status", *args]) == 1
