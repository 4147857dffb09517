"""ZooKeeperCheckpointIDCounter against a real server."""

from __future__ import annotations

import multiprocessing

import pytest
from zk_helpers import REPO_ROOT, increment_worker

from checkpoint.io.recovery import HighAvailabilityError
from checkpoint.io.zookeeper import ZooKeeperCheckpointIDCounter, job_path

pytestmark = pytest.mark.zookeeper


def counter_path(cluster_id: str) -> str:
    return f"{job_path(cluster_id, 'job')}/checkpoint-counter"


def test_counter_starts_at_one_and_increments(zk_client, cluster_id):
    counter = ZooKeeperCheckpointIDCounter(zk_client, counter_path(cluster_id))
    counter.start()
    assert counter.get() == 1
    assert [counter.get_and_increment() for _ in range(3)] == [1, 2, 3]
    assert counter.get() == 4
    assert zk_client.get(counter_path(cluster_id))[0] == b"4"


def test_start_keeps_an_existing_count(zk_client, make_client, cluster_id):
    first = ZooKeeperCheckpointIDCounter(zk_client, counter_path(cluster_id))
    first.start()
    first.set_count(41)
    second = ZooKeeperCheckpointIDCounter(make_client(), counter_path(cluster_id))
    second.start()
    assert second.get_and_increment() == 41
    assert first.get() == 42


def test_set_count_rejects_non_positive(zk_client, cluster_id):
    counter = ZooKeeperCheckpointIDCounter(zk_client, counter_path(cluster_id))
    counter.start()
    with pytest.raises(ValueError, match="checkpoint id counter"):
        counter.set_count(0)
    assert counter.get() == 1


def test_counter_not_started_is_a_clear_error(zk_client, cluster_id):
    counter = ZooKeeperCheckpointIDCounter(zk_client, counter_path(cluster_id))
    with pytest.raises(HighAvailabilityError, match="does not exist.*start"):
        counter.get_and_increment()


def test_corrupt_counter_znode_is_named(zk_client, cluster_id):
    counter = ZooKeeperCheckpointIDCounter(zk_client, counter_path(cluster_id))
    counter.start()
    zk_client.set(counter_path(cluster_id), b"seven")
    with pytest.raises(HighAvailabilityError, match="checkpoint-counter holds b'seven'"):
        counter.get()


def test_counter_refuses_when_not_connected(make_client, cluster_id):
    client = make_client()
    counter = ZooKeeperCheckpointIDCounter(client, counter_path(cluster_id))
    counter.start()
    client.stop()
    with pytest.raises(HighAvailabilityError, match="not CONNECTED"):
        counter.get_and_increment()


def test_shutdown_discard_deletes_the_znode(zk_client, cluster_id):
    counter = ZooKeeperCheckpointIDCounter(zk_client, counter_path(cluster_id))
    counter.start()
    counter.shutdown()
    assert zk_client.exists(counter_path(cluster_id)) is not None
    counter.shutdown(discard=True)
    assert zk_client.exists(counter_path(cluster_id)) is None


def test_four_processes_never_share_an_id(zk_server, cluster_id):
    processes, per_process = 4, 60
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=increment_worker,
                           args=(REPO_ROOT, zk_server.hosts, counter_path(cluster_id), per_process, barrier, results))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    taken = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    for ids in taken:
        assert len(ids) == per_process
        assert all(a < b for a, b in zip(ids, ids[1:])), "ids must strictly increase within a process"
    every = sorted(i for ids in taken for i in ids)
    assert every == list(range(1, processes * per_process + 1)), "no duplicate and no gap"
