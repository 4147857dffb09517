"""A ZooKeeper server restart (same port and data directory): checkpoints and counter survive,
calls made while it is down fail fast and clearly, and leadership comes back."""

from __future__ import annotations

import time

import pytest
from zk_helpers import SESSION_TIMEOUT, make_checkpoint, new_client, wait_until

from checkpoint.io.ha_services import create_recovery_factory
from checkpoint.io.recovery import HighAvailabilityError
from checkpoint.io.zookeeper_server import ZooKeeperServer
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore

pytestmark = pytest.mark.zookeeper
JOB = "pv"
#: a call blocked until this would take this long: failing fast means well within it
OPERATION_TIMEOUT = 10.0


@pytest.fixture
def own_server(tmp_path):
    server = ZooKeeperServer(data_dir=tmp_path / "zk")
    server.start()
    yield server
    server.stop()


def test_restart_keeps_checkpoints_and_counter(own_server):
    storage = CheckpointStorage(MemoryBlobStore())
    services = create_recovery_factory("zookeeper", hosts=own_server.hosts, cluster_id="restart",
                                       session_timeout=SESSION_TIMEOUT, operation_timeout=OPERATION_TIMEOUT)
    events: list[str] = []
    try:
        election = services.create_leader_election(JOB, "jm-1", on_grant=lambda: events.append("+"),
                                                   on_revoke=lambda: events.append("-"))
        election.start()
        assert election.await_leadership(5)
        counter = services.create_id_counter(JOB)
        counter.start()
        store = services.create_store(JOB, storage, 2, leader_election=election)
        store.recover()
        for _ in range(3):
            store.add_checkpoint(make_checkpoint(storage, JOB, counter.get_and_increment()))

        own_server.stop()
        wait_until(lambda: not election.is_leader, 5.0, "leadership revoked while disconnected")
        start = time.monotonic()
        with pytest.raises(HighAvailabilityError, match="not CONNECTED"):
            counter.get_and_increment()
        with pytest.raises(HighAvailabilityError):
            store.add_checkpoint(make_checkpoint(storage, JOB, 99))
        assert time.monotonic() - start < OPERATION_TIMEOUT / 2, "calls while SUSPENDED must fail fast, not block"

        own_server.start()
        # at the latest once the restarted server expires the old session, whose lock node it
        # restored: a client that lost its session waits that long (seen in a full suite run)
        assert election.await_leadership(SESSION_TIMEOUT + 10.0), "leadership regained after the restart"
        assert counter.get_and_increment() == 4
        recovered = services.create_store(JOB, storage, 2, leader_election=election).recover()
        assert [c.checkpoint_id for c in recovered] == [2, 3]
        assert events[:2] == ["+", "-"] and events[-1] == "+"
        election.stop()
    finally:
        services.close()


def test_fresh_client_after_restart_sees_everything(own_server):
    storage = CheckpointStorage(MemoryBlobStore())
    with create_recovery_factory("zookeeper", hosts=own_server.hosts, cluster_id="cold") as services:
        counter = services.create_id_counter(JOB)
        counter.start()
        store = services.create_store(JOB, storage, 1)
        store.add_checkpoint(make_checkpoint(storage, JOB, counter.get_and_increment()))
    own_server.restart()
    client = new_client(own_server.hosts)
    try:
        assert client.get("/barrierflow/cold/pv/checkpoint-counter")[0] == b"2"
        assert client.get_children("/barrierflow/cold/pv/checkpoints") == ["0000000000000000001"]
    finally:
        client.stop()
        client.close()
