"""High availability on the simulator with a real ZooKeeper server: `set_high_availability(
"zookeeper", hosts=...)` and `barrierflow run --zookeeper HOSTS` use that server (the counter, the
store and the election live there), a coordinator crash promotes the standby through it, the run
stays the same as with the in-memory services, and a dead address fails the run naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from checkpoint.io.recovery import HighAvailabilityError
from checkpoint.io.zookeeper import job_path
from runtime import FaultPlan
from runtime.workloads.seeded import SINK, make_env, multiset, random_spec
from tests.api.cli_launcher import job_folder, run_cli
from vocabulary.fault_plan import CoordinatorCrash


def _run(hosts: str | None, cluster_id: str, faults: FaultPlan = FaultPlan()):  # noqa: B008 - immutable
    env = make_env(random_spec(3), mode="aligned")
    env.set_high_availability("zookeeper", hosts=hosts, cluster_id=cluster_id, operation_timeout=2)
    return env.execute("job", executor="sim", seed=3, faults=faults, trace=True)


@pytest.mark.zookeeper
def test_the_simulator_uses_the_server_and_keeps_the_in_memory_run(zk_server, zk_client: KazooClient,
                                                                  cluster_id: str) -> None:
    crash = FaultPlan.of(CoordinatorCrash(at=0.03))
    in_memory = _run(None, "memory", crash)
    on_server = _run(zk_server.hosts, cluster_id, crash)
    # the same run: output, state and checkpoints (ids come from the server's counter, new here)
    assert multiset(on_server.output(SINK)) == multiset(in_memory.output(SINK))
    assert on_server.final_state == in_memory.final_state
    assert [(c.id, c.completed) for c in on_server.checkpoints] == [(c.id, c.completed) for c in in_memory.checkpoints]
    leaders = [event[2] for event in on_server.trace if len(event) > 2 and event[1] == "leader"]
    assert leaders == ["coordinator-1"]  # the standby, elected in ZooKeeper
    path = job_path(cluster_id, "job")
    registered = zk_client.get_children(f"{path}/checkpoints")
    assert registered and int(max(registered)) == max(c.id for c in on_server.completed_checkpoints)
    assert zk_client.get_children(f"{path}/leader") == []  # every session of the run ended with it
    # a second run of the job continues the server's counter
    again = _run(zk_server.hosts, cluster_id)
    assert min(c.id for c in again.checkpoints) > max(c.id for c in on_server.checkpoints)


@pytest.mark.slow
def test_an_unreachable_server_fails_the_simulated_run_naming_it(closed_port: int) -> None:
    with pytest.raises(HighAvailabilityError, match=f"cannot connect to ZooKeeper at 127.0.0.1:{closed_port} within 2 s"):
        _run(f"127.0.0.1:{closed_port}", "dead")


JOB = '''
from operators import CollectSink
from runtime import StreamEnvironment


def build():
    env = StreamEnvironment(parallelism=2)
    env.from_collection([{"app": f"app{i % 3}"} for i in range(2_000)], splits=2) \\
        .key_by("app").count().sink_to(CollectSink("counts"))
    return env
'''


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    return job_folder(tmp_path, JOB)


@pytest.mark.zookeeper
def test_run_zookeeper_on_the_simulator_registers_the_checkpoints_there(zk_server, zk_client: KazooClient,
                                                                       job_dir: Path) -> None:
    done = run_cli(job_dir.parent / "bin", "run", "myjob:build", "--zookeeper", zk_server.hosts,
                   "--interval", "0.001", cwd=job_dir)
    assert done.returncode == 0, done.stderr
    assert "high availability: ZooKeeper at " + zk_server.hosts in done.stdout, done.stdout
    registered = zk_client.get_children(f"{job_path('run-myjob:build', 'build')}/checkpoints")
    assert registered, "no checkpoint was registered in ZooKeeper"


@pytest.mark.slow
def test_run_zookeeper_with_a_dead_address_on_the_simulator_does_not_exit_0(job_dir: Path, closed_port: int) -> None:
    done = run_cli(job_dir.parent / "bin", "run", "myjob:build", "--zookeeper", f"127.0.0.1:{closed_port}",
                   cwd=job_dir)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr  # one line
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{closed_port}" in done.stderr
    assert "Connection refused" in done.stderr, done.stderr
