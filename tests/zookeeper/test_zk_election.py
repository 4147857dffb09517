"""ZooKeeperLeaderElection against a real server: failover, forced session expiry, fencing."""

from __future__ import annotations

import time

import pytest
from zk_helpers import SESSION_TIMEOUT, expire_session, make_checkpoint, wait_until

from checkpoint.io.recovery import NotLeaderError
from checkpoint.io.zookeeper import ZooKeeperCheckpointRecoveryFactory, job_path
from checkpoint.io.zookeeper_election import ZooKeeperLeaderElection
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore

pytestmark = pytest.mark.zookeeper
JOB = "pv"
#: a successor takes over when the leader's session closes (4-5 ms measured), not when it would
#: expire: the bound is far from both
FAILOVER_BOUND = SESSION_TIMEOUT / 2


def of(events, name):
    """One contender's own grant/revoke sequence (the order across contenders is a race between
    their threads, as between two coordinator processes)."""
    return [e for e in events if e[1:] == name]


def contender(client, cluster_id, name, events):
    return ZooKeeperLeaderElection(client, f"{job_path(cluster_id, JOB)}/leader", name,
                                   on_grant=lambda: events.append(f"+{name}"),
                                   on_revoke=lambda: events.append(f"-{name}"), timeout=2.0)


def test_first_contender_leads_second_waits(make_client, cluster_id):
    events: list[str] = []
    a = contender(make_client(), cluster_id, "a", events)
    b = contender(make_client(), cluster_id, "b", events)
    a.start()
    assert a.await_leadership(5)
    b.start()
    assert not b.await_leadership(0.3)
    assert (a.is_leader, b.is_leader, events) == (True, False, ["+a"])
    assert a.current_leader() == "a" == b.current_leader()
    a.stop()
    b.stop()


def test_leader_session_closed_other_takes_over_within_bound(make_client, cluster_id):
    events: list[str] = []
    leader_client = make_client()
    a = contender(leader_client, cluster_id, "a", events)
    b = contender(make_client(), cluster_id, "b", events)
    a.start()
    assert a.await_leadership(5)
    b.start()
    time.sleep(0.1)  # b is watching its predecessor
    start = time.monotonic()
    leader_client.stop()  # the leader process dies: its session closes, its znode goes
    assert b.await_leadership(FAILOVER_BOUND), "b must lead within the failover bound"
    assert time.monotonic() - start < FAILOVER_BOUND
    wait_until(lambda: of(events, "a") == ["+a", "-a"] and of(events, "b") == ["+b"], 2.0, "a revoked, b granted")
    assert not a.is_leader
    b.stop()
    a.stop()


def test_three_contenders_fail_over_in_join_order(make_client, cluster_id):
    events: list[str] = []
    clients = [make_client() for _ in range(3)]
    elections = [contender(c, cluster_id, n, events) for c, n in zip(clients, "abc")]
    for election in elections:
        election.start()
        time.sleep(0.05)
    assert elections[0].await_leadership(5)
    clients[0].stop()
    assert elections[1].await_leadership(FAILOVER_BOUND)
    assert not elections[2].is_leader
    elections[1].stop()  # a clean stop hands over too
    assert elections[2].await_leadership(FAILOVER_BOUND)
    wait_until(lambda: [of(events, n) for n in "abc"] == [["+a", "-a"], ["+b", "-b"], ["+c"]], 2.0,
               "grants in join order")
    assert [e for e in events if e[0] == "+"] == ["+a", "+b", "+c"]
    for election in elections:
        election.stop()


def test_forced_session_expiry_deposes_leader_and_fences_its_writes(zk_server, make_client, cluster_id):
    events: list[str] = []
    storage = CheckpointStorage(MemoryBlobStore())
    old_client, new_client = make_client(), make_client()
    old_services = ZooKeeperCheckpointRecoveryFactory(client=old_client, cluster_id=cluster_id, operation_timeout=2)
    new_services = ZooKeeperCheckpointRecoveryFactory(client=new_client, cluster_id=cluster_id, operation_timeout=2)
    old = old_services.create_leader_election(JOB, "old", on_grant=lambda: events.append("+old"),
                                              on_revoke=lambda: events.append("-old"))
    new = new_services.create_leader_election(JOB, "new", on_grant=lambda: events.append("+new"),
                                              on_revoke=lambda: events.append("-new"))
    old_store = old_services.create_store(JOB, storage, 3, leader_election=old)
    old.start()
    assert old.await_leadership(5)
    new.start()
    old_store.add_checkpoint(make_checkpoint(storage, JOB, 1))
    stale_token = old.fencing_token()

    expire_session(old_client, zk_server.hosts)

    assert new.await_leadership(FAILOVER_BOUND)
    wait_until(lambda: "-old" in events, 2.0, "the old leader to step down")
    assert not old.is_leader
    # The deposed leader's store refuses, and what it wrote for the refused checkpoint is removed.
    with pytest.raises(NotLeaderError):
        old_store.add_checkpoint(make_checkpoint(storage, JOB, 2))
    assert not storage.blob_store.exists(storage.metadata_path(JOB, 2))
    # Even a leader that has not noticed yet (it still holds a token) cannot register anything:
    # the multi-op checks its election znode, which died with the expired session.
    with pytest.raises(NotLeaderError, match="lost leadership"):
        old_store.handles.add(2, b"{}", stale_token)
    assert new_client.get_children(f"{job_path(cluster_id, JOB)}/checkpoints") == ["0000000000000000001"]
    # The old contender rejoined with its new session, behind the new leader.
    wait_until(lambda: old.node is not None and new_client.exists(old.node) is not None, 5.0, "old rejoins")
    assert not old.is_leader
    new_store = new_services.create_store(JOB, storage, 3, leader_election=new)
    assert [c.checkpoint_id for c in new_store.recover()] == [1]
    new_store.add_checkpoint(make_checkpoint(storage, JOB, 2))
    # When the new leader goes, the old contender leads again (it is next in line).
    new.stop()
    assert old.await_leadership(FAILOVER_BOUND)
    old.stop()
    assert of(events, "old") == ["+old", "-old", "+old", "-old"]
    assert of(events, "new") == ["+new", "-new"]


def test_stop_revokes_and_removes_the_znode(zk_client, cluster_id):
    events: list[str] = []
    a = contender(zk_client, cluster_id, "a", events)
    a.start()
    assert a.await_leadership(5)
    node = a.node
    a.stop()
    a.stop()  # idempotent
    assert events == ["+a", "-a"]
    assert zk_client.exists(node) is None
    with pytest.raises(NotLeaderError):
        a.fencing_token()


def test_callback_may_stop_the_election(zk_client, cluster_id):
    holder: list[ZooKeeperLeaderElection] = []
    events: list[str] = []
    a = ZooKeeperLeaderElection(zk_client, f"{job_path(cluster_id, JOB)}/leader", "a",
                                on_grant=lambda: holder[0].stop(), on_revoke=lambda: events.append("-a"))
    holder.append(a)
    a.start()
    wait_until(lambda: events == ["-a"], 5.0, "stop from inside the grant callback")
    assert not a.is_leader


def test_failing_callback_is_logged_not_fatal(zk_client, cluster_id, caplog):
    def explode():
        raise RuntimeError("boom")

    a = ZooKeeperLeaderElection(zk_client, f"{job_path(cluster_id, JOB)}/leader", "a", on_grant=explode)
    a.start()
    assert a.await_leadership(5)
    a.stop()
    assert "leader election callback of 'a' failed" in caplog.text and "boom" in caplog.text
