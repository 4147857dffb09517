"""ZooKeeperCompletedCheckpointStore against a real server: add/recover/retain/discard, concurrent
modification during recovery, corrupt pointers and metadata."""

from __future__ import annotations

import json
import logging

import pytest
from zk_helpers import make_checkpoint

from checkpoint.io.ha_store import MAX_RECOVERY_ATTEMPTS
from checkpoint.io.recovery import HighAvailabilityError, StandaloneLeaderElection
from checkpoint.io.zookeeper import ZooKeeperCompletedCheckpointStore, job_path
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore

pytestmark = pytest.mark.zookeeper
JOB = "pv"


@pytest.fixture
def storage() -> CheckpointStorage:
    return CheckpointStorage(MemoryBlobStore())


@pytest.fixture
def base(cluster_id) -> str:
    return job_path(cluster_id, JOB)


def ids(checkpoints) -> list[int]:
    return [c.checkpoint_id for c in checkpoints]


def test_add_writes_pointer_and_metadata(zk_client, storage, base):
    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    completed = make_checkpoint(storage, JOB, 7)
    assert store.add_checkpoint(completed) == []
    data, _ = zk_client.get(f"{base}/checkpoints/0000000000000000007")
    pointer = json.loads(data)
    assert pointer["metadata_path"] == completed.metadata_path == storage.metadata_path(JOB, 7)
    assert set(pointer) >= {"metadata_path", "checksum"}
    assert storage.read_metadata(pointer["metadata_path"]) == completed
    assert store.get_latest_checkpoint() is completed


def test_retained_drops_oldest_znodes_and_files(zk_client, storage, base):
    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    dropped = [ids(store.add_checkpoint(make_checkpoint(storage, JOB, i))) for i in (1, 2, 3, 4)]
    assert dropped == [[], [], [1], [2]]
    assert ids(store.get_all_checkpoints()) == [3, 4]
    assert sorted(zk_client.get_children(f"{base}/checkpoints")) == ["0000000000000000003", "0000000000000000004"]
    assert storage.list_checkpoint_ids(JOB) == [3, 4]


def test_recover_in_a_new_store_keeps_latest_and_discards_older(zk_client, make_client, storage, base):
    writer = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=3)
    for i in (1, 2, 3):
        writer.add_checkpoint(make_checkpoint(storage, JOB, i))
    reader = ZooKeeperCompletedCheckpointStore(make_client(), base, storage, retained=1)
    assert ids(reader.recover()) == [3]
    assert reader.get_latest_checkpoint() == writer.get_latest_checkpoint()
    assert reader.recovery_attempts == 1
    assert zk_client.get_children(f"{base}/checkpoints") == ["0000000000000000003"]
    assert storage.list_checkpoint_ids(JOB) == [3]


def test_recover_with_no_checkpoints(zk_client, storage, base):
    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage)
    assert store.recover() == []
    assert store.get_latest_checkpoint() is None


def test_discard_all_removes_znodes_and_files(zk_client, storage, base):
    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    for i in (1, 2):
        store.add_checkpoint(make_checkpoint(storage, JOB, i))
    zk_client.create(f"{base}/checkpoints/0000000000000000009", b"garbage")  # not retained, still removed
    store.discard_all_checkpoints()
    assert store.get_all_checkpoints() == []
    assert zk_client.exists(f"{base}/checkpoints") is None
    assert storage.list_checkpoint_ids(JOB) == []


def test_recover_retries_on_concurrent_modification(zk_client, make_client, storage, base, caplog):
    writer = ZooKeeperCompletedCheckpointStore(make_client(), base, storage, retained=5)
    for i in (1, 2):
        writer.add_checkpoint(make_checkpoint(storage, JOB, i))
    reader = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=5)
    real_get = reader.handles.get
    calls = []

    def get_while_another_coordinator_writes(checkpoint_id):
        calls.append(checkpoint_id)
        if len(calls) == 1:  # another coordinator adds 3 and drops 1 mid-listing
            writer.add_checkpoint(make_checkpoint(storage, JOB, 3))
            zk_client.delete(f"{base}/checkpoints/0000000000000000001")
        return real_get(checkpoint_id)

    reader.handles.get = get_while_another_coordinator_writes
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        recovered = reader.recover()
    assert ids(recovered) == [2, 3]
    assert reader.recovery_attempts >= 2
    assert "concurrent modification" in caplog.text


def test_recover_gives_up_when_the_listing_never_settles(zk_client, make_client, storage, base):
    reader = ZooKeeperCompletedCheckpointStore(zk_client, base, storage)
    other = make_client()
    real_list = reader.handles.list_ids
    created = []

    def list_while_someone_keeps_adding():
        result = real_list()
        created.append(other.create(f"{base}/checkpoints/{len(created) + 1:019d}", b"{}", makepath=True))
        return result

    reader.handles.list_ids = list_while_someone_keeps_adding
    with pytest.raises(HighAvailabilityError, match="kept changing"):
        reader.recover()
    assert reader.recovery_attempts == MAX_RECOVERY_ATTEMPTS


def test_corrupt_pointer_is_skipped_with_a_warning(zk_client, storage, base, caplog):
    writer = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=3)
    for i in (1, 2, 3):
        writer.add_checkpoint(make_checkpoint(storage, JOB, i))
    znode = f"{base}/checkpoints/0000000000000000003"
    zk_client.set(znode, b"\x00not json")
    reader = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=1)
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(reader.recover()) == [2]
    assert znode in caplog.text and "corrupt" in caplog.text
    assert reader.highest_checkpoint_id_seen == 3, "new ids must stay above the skipped checkpoint"
    assert zk_client.exists(znode) is not None, "a corrupt pointer is left for inspection"


def test_corrupt_metadata_is_skipped_with_a_warning(zk_client, storage, base, caplog):
    writer = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    for i in (1, 2):
        writer.add_checkpoint(make_checkpoint(storage, JOB, i))
    path = storage.metadata_path(JOB, 2)
    raw = bytearray(storage.blob_store.get(path))
    raw[raw.index(b"count")] ^= 0x20  # flip one bit inside the body
    storage.blob_store.put(path, bytes(raw))
    reader = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(reader.recover()) == [1]
    assert path in caplog.text


def test_pointer_that_does_not_match_its_metadata_is_skipped(zk_client, storage, base, caplog):
    writer = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    for i in (1, 2):
        writer.add_checkpoint(make_checkpoint(storage, JOB, i))
    znode = f"{base}/checkpoints/0000000000000000002"
    pointer = json.loads(zk_client.get(znode)[0])
    zk_client.set(znode, json.dumps({**pointer, "checksum": "0" * 64}).encode())
    reader = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(reader.recover()) == [1]
    assert "does not match the checksum" in caplog.text and znode in caplog.text


def test_missing_state_file_is_skipped(zk_client, storage, base, caplog):
    writer = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    checkpoints = [make_checkpoint(storage, JOB, i) for i in (1, 2)]
    for completed in checkpoints:
        writer.add_checkpoint(completed)
    lost = checkpoints[1].referenced_paths()[0]
    storage.delete_file(lost)
    reader = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, retained=2)
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(reader.recover()) == [1]
    assert lost in caplog.text


def test_foreign_children_are_ignored(zk_client, storage, base, caplog):
    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage)
    store.add_checkpoint(make_checkpoint(storage, JOB, 1))
    zk_client.create(f"{base}/checkpoints/lock-file", b"")
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.zookeeper"):
        assert ids(ZooKeeperCompletedCheckpointStore(zk_client, base, storage).recover()) == [1]
    assert "lock-file" in caplog.text


def test_add_rejects_old_ids_and_other_jobs(zk_client, storage, base):
    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage)
    store.add_checkpoint(make_checkpoint(storage, JOB, 5))
    with pytest.raises(ValueError, match="not newer"):
        store.add_checkpoint(make_checkpoint(storage, JOB, 5))
    with pytest.raises(ValueError, match="job 'other'"):
        store.add_checkpoint(make_checkpoint(storage, "other", 6))


def test_not_connected_is_a_clear_error(make_client, storage, base):
    client = make_client()
    store = ZooKeeperCompletedCheckpointStore(client, base, storage)
    client.stop()
    with pytest.raises(HighAvailabilityError, match="not CONNECTED"):
        store.recover()


def test_standalone_election_fences_nothing_in_zookeeper(zk_client, storage, base):
    election = StandaloneLeaderElection("solo")
    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage, leader_election=election)
    with pytest.raises(HighAvailabilityError, match="not started"):
        store.add_checkpoint(make_checkpoint(storage, JOB, 1))
    assert storage.list_checkpoint_files(JOB, 1) == [storage.task_owned_dir(JOB, 1) + "/count-0.state"]
    election.start()
    with pytest.raises(HighAvailabilityError, match="names no election znode"):
        store.add_checkpoint(make_checkpoint(storage, JOB, 1))


def test_registering_an_existing_id_is_refused(zk_client, make_client, storage, base, cluster_id):
    from checkpoint.io.recovery import CheckpointExistsError
    from checkpoint.io.zookeeper_election import ZooKeeperLeaderElection

    store = ZooKeeperCompletedCheckpointStore(zk_client, base, storage)
    store.add_checkpoint(make_checkpoint(storage, JOB, 1))
    with pytest.raises(CheckpointExistsError, match="0000000000000000001 already exists"):
        store.handles.add(1, b"{}", None)
    election = ZooKeeperLeaderElection(make_client(), f"{base}/leader", "jm")
    election.start()
    assert election.await_leadership(5)
    with pytest.raises(CheckpointExistsError, match="already exists"):
        store.handles.add(1, b"{}", election.fencing_token())
    election.stop()
