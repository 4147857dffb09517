"""checkpoint/io/ha_memory.py and checkpoint/io/ha_store.py, scripted: election, fencing, outages,
recovery with corrupt pointers and concurrent modification."""

from __future__ import annotations

import logging

import pytest
from ha_helpers import JOB, ids, make_checkpoint

from checkpoint.io.ha_memory import InMemoryCoordinationService, InMemoryHighAvailabilityServices
from checkpoint.io.ha_store import MAX_RECOVERY_ATTEMPTS, PointerMissingError, decode_pointer
from checkpoint.io.recovery import (
    CheckpointExistsError,
    FencingToken,
    HighAvailabilityError,
    NotLeaderError,
    RecoveryMode,
)
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore


@pytest.fixture
def service() -> InMemoryCoordinationService:
    return InMemoryCoordinationService()


@pytest.fixture
def services(service) -> InMemoryHighAvailabilityServices:
    return InMemoryHighAvailabilityServices(service)


@pytest.fixture
def storage() -> CheckpointStorage:
    return CheckpointStorage(MemoryBlobStore())


def contenders(services, events, names="abc", **kwargs):
    return [services.create_leader_election(JOB, n, on_grant=lambda n=n: events.append(f"+{n}"),
                                            on_revoke=lambda n=n: events.append(f"-{n}"), **kwargs) for n in names]


# -- election --


def test_leader_is_the_earliest_live_contender(services, service):
    events: list[str] = []
    a, b, c = contenders(services, events)
    for election in (a, b, c):
        election.start()
    assert [e.is_leader for e in (a, b, c)] == [True, False, False]
    assert service.leader_of(JOB) == "a" and services.mode is RecoveryMode.ZOOKEEPER
    a.expire_session()
    assert service.leader_of(JOB) == "b"
    b.stop()
    assert service.leader_of(JOB) == "c"
    c.expire_session()  # a rejoined after b, so it is next
    assert service.leader_of(JOB) == "a"
    assert events == ["+a", "-a", "+b", "-b", "+c", "-c", "+a"]
    assert service.num_expired_sessions == 2


def test_expired_contender_without_rejoin_stays_out(services, service):
    events: list[str] = []
    a, b = contenders(services, events, "ab")
    a.rejoin_on_expiry = False
    a.start()
    b.start()
    a.expire_session()
    b.stop()
    assert service.leader_of(JOB) is None
    assert events == ["+a", "-a", "+b", "-b"]
    assert a.session is None and not a.is_leader


def test_elections_of_different_jobs_are_independent(services, service):
    a = services.create_leader_election("job-1", "a")
    b = services.create_leader_election("job-2", "b")
    a.start()
    b.start()
    assert a.is_leader and b.is_leader
    assert a.await_leadership(10.0)


def test_fencing_token_of_a_deposed_leader_is_refused(services, service):
    a, b = contenders(services, [], "ab")
    a.start()
    b.start()
    token = a.fencing_token()
    a.expire_session()
    with pytest.raises(NotLeaderError, match="epoch"):
        service.add_pointer(JOB, 1, b"{}", token)
    with pytest.raises(NotLeaderError, match="leader: 'b'"):
        a.fencing_token()
    service.add_pointer(JOB, 1, b"{}", b.fencing_token())
    with pytest.raises(CheckpointExistsError):
        service.add_pointer(JOB, 1, b"{}", b.fencing_token())


def test_outage_fails_every_call(services, service, storage):
    a = services.create_leader_election(JOB, "a")
    counter = services.create_id_counter(JOB)
    store = services.create_store(JOB, storage, 1)
    service.set_available(False)
    for call in (a.start, counter.start, counter.get_and_increment, store.recover):
        with pytest.raises(HighAvailabilityError, match="unavailable"):
            call()
    service.set_available(True)
    a.start()
    assert a.is_leader and counter.get_and_increment() == 1


def test_expiry_during_outage_leaves_the_contender_out_until_restarted(services, service):
    a, b = contenders(services, [], "ab")
    a.start()
    b.start()
    service.set_available(False)
    a.expire_session()
    service.set_available(True)
    assert service.leader_of(JOB) == "b" and a.session is None


def test_counter_is_shared_by_every_coordinator(service):
    first = InMemoryHighAvailabilityServices(service).create_id_counter(JOB)
    second = InMemoryHighAvailabilityServices(service).create_id_counter(JOB)
    first.start()
    assert [first.get_and_increment(), second.get_and_increment(), first.get_and_increment()] == [1, 2, 3]
    second.set_count(10)
    assert first.get() == 10
    with pytest.raises(ValueError, match="counter"):
        first.set_count(-1)


# -- store --


def test_store_fenced_by_leadership(services, service, storage):
    a, b = contenders(services, [], "ab")
    a.start()
    b.start()
    store_a = services.create_store(JOB, storage, 2, leader_election=a)
    store_a.add_checkpoint(make_checkpoint(storage, 1))
    a.expire_session()
    with pytest.raises(NotLeaderError):
        store_a.add_checkpoint(make_checkpoint(storage, 2))
    assert ids(store_a.get_all_checkpoints()) == [1]
    assert not storage.blob_store.exists(storage.metadata_path(JOB, 2)), "refused: nothing durable remains"
    store_b = services.create_store(JOB, storage, 2, leader_election=b)
    assert ids(store_b.recover()) == [1]
    store_b.add_checkpoint(make_checkpoint(storage, 2))
    assert service.list_pointers(JOB) == [1, 2]


def test_refusal_detected_only_by_the_backend(services, service, storage):
    """The leader checks its token first, but the backend check is what makes fencing safe."""
    a, b = contenders(services, [], "ab")
    a.start()
    b.start()
    store_a = services.create_store(JOB, storage, 2, leader_election=a)
    stale = a.fencing_token()
    a.fencing_token = lambda: stale  # a leader that has not noticed it was deposed
    a.expire_session()
    with pytest.raises(NotLeaderError, match="no longer the leader"):
        store_a.add_checkpoint(make_checkpoint(storage, 1))
    assert service.list_pointers(JOB) == []
    assert not storage.blob_store.exists(storage.metadata_path(JOB, 1))


def test_backend_failure_keeps_the_metadata(services, service, storage):
    store = services.create_store(JOB, storage, 1)
    real_add = service.add_pointer

    def flaky_add(*args):
        service.set_available(False)
        try:
            real_add(*args)
        finally:
            service.set_available(True)

    service.add_pointer = flaky_add
    with pytest.raises(HighAvailabilityError):
        store.add_checkpoint(make_checkpoint(storage, 1))
    assert store.get_all_checkpoints() == []
    assert storage.blob_store.exists(storage.metadata_path(JOB, 1)), "the pointer may exist: keep its target"


def test_retained_drops_pointer_and_files(services, service, storage):
    store = services.create_store(JOB, storage, 2)
    dropped = [ids(store.add_checkpoint(make_checkpoint(storage, i))) for i in (1, 2, 3)]
    assert dropped == [[], [], [1]]
    assert service.list_pointers(JOB) == [2, 3]
    assert storage.list_checkpoint_ids(JOB) == [2, 3]
    path, checksum = decode_pointer(service.get_pointer(JOB, 3), "x")
    assert path == storage.metadata_path(JOB, 3) and len(checksum) == 64


def test_failed_pointer_removal_keeps_the_files(services, service, storage, caplog):
    store = services.create_store(JOB, storage, 1)
    store.add_checkpoint(make_checkpoint(storage, 1))
    service.remove_pointer = lambda *args: (_ for _ in ()).throw(HighAvailabilityError("down"))
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(store.add_checkpoint(make_checkpoint(storage, 2))) == [1]
    assert "could not remove memory:/barrierflow/pv/checkpoints/0000000000000000001" in caplog.text
    assert storage.list_checkpoint_ids(JOB) == [1, 2]


def test_recover_skips_corrupt_pointers_and_keeps_them(services, service, storage, caplog):
    writer = services.create_store(JOB, storage, 3)
    for i in (1, 2, 3):
        writer.add_checkpoint(make_checkpoint(storage, i))
    service.put_pointer(JOB, 3, b'{"metadata_path": 7}')
    reader = services.create_store(JOB, storage, 1)
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(reader.recover()) == [2]
    assert "memory:/barrierflow/pv/checkpoints/0000000000000000003 is corrupt" in caplog.text
    assert service.list_pointers(JOB) == [2, 3]
    assert reader.highest_checkpoint_id_seen == 3


def test_recover_skips_metadata_of_another_checkpoint(services, service, storage, caplog):
    writer = services.create_store(JOB, storage, 2)
    for i in (1, 2):
        writer.add_checkpoint(make_checkpoint(storage, i))
    service.put_pointer(JOB, 2, service.get_pointer(JOB, 1))  # 2 points at checkpoint 1's metadata
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(services.create_store(JOB, storage, 2).recover()) == [1]
    assert "describes checkpoint 1" in caplog.text


def test_recover_retries_when_a_pointer_vanishes(services, service, storage, caplog):
    writer = services.create_store(JOB, storage, 3)
    for i in (1, 2, 3):
        writer.add_checkpoint(make_checkpoint(storage, i))
    reader = services.create_store(JOB, storage, 3)
    real_get = service.get_pointer
    calls = []

    def get_racing_a_removal(job_id, checkpoint_id):
        calls.append(checkpoint_id)
        if len(calls) == 2:
            service.remove_pointer(job_id, 1)  # another coordinator drops 1 after it was listed
            raise PointerMissingError("gone")
        return real_get(job_id, checkpoint_id)

    service.get_pointer = get_racing_a_removal
    with caplog.at_level(logging.WARNING, logger="checkpoint.io.ha_store"):
        assert ids(reader.recover()) == [2, 3]
    assert reader.recovery_attempts == 2 and "concurrent modification" in caplog.text


def test_recover_gives_up_on_a_backend_that_never_settles(services, service, storage):
    reader = services.create_store(JOB, storage, 1)
    real_list = service.list_pointers
    added = []

    def list_while_adding(job_id):
        result = real_list(job_id)
        added.append(len(added) + 1)
        service.put_pointer(job_id, added[-1], b"{}")
        return result

    service.list_pointers = list_while_adding
    with pytest.raises(HighAvailabilityError, match=f"{MAX_RECOVERY_ATTEMPTS} recovery attempts"):
        reader.recover()


def test_discard_all_removes_every_pointer(services, service, storage):
    store = services.create_store(JOB, storage, 2)
    for i in (1, 2):
        store.add_checkpoint(make_checkpoint(storage, i))
    service.put_pointer(JOB, 5, b"junk")
    store.discard_all_checkpoints()
    assert service.list_pointers(JOB) == [] and storage.list_checkpoint_ids(JOB) == []
    assert store.get_latest_checkpoint() is None


def test_discards_on_an_executor_drop_the_pointer_at_once_and_the_files_later(services, service, storage,
                                                                             held_executor):
    store = services.create_store(JOB, storage, 1, discard_executor=held_executor)
    store.add_checkpoint(make_checkpoint(storage, 1))
    store.add_checkpoint(make_checkpoint(storage, 2))
    # the pointer goes before the completion returns (a recovery must not find chk-1); the files later
    assert service.list_pointers(JOB) == [2] and storage.list_checkpoint_ids(JOB) == [1, 2]
    assert len(held_executor.jobs) == 1
    held_executor.run_all()
    assert storage.list_checkpoint_ids(JOB) == [2]
    store.add_checkpoint(make_checkpoint(storage, 3))
    held_executor.run_all()  # recover() waits for the deletes handed over (flush)
    assert ids(store.recover()) == [3] and storage.list_checkpoint_ids(JOB) == [3]


def test_add_validates_job_and_order(services, storage):
    store = services.create_store(JOB, storage, 1)
    store.add_checkpoint(make_checkpoint(storage, 3))
    with pytest.raises(ValueError, match="not newer than the latest retained checkpoint 3"):
        store.add_checkpoint(make_checkpoint(storage, 2))
    with pytest.raises(ValueError, match="job 'other'"):
        store.add_checkpoint(make_checkpoint(storage, 4, job_id="other"))


def test_standalone_token_is_checked_by_the_memory_backend(services, service, storage):
    a = services.create_leader_election(JOB, "a")
    a.start()
    with pytest.raises(NotLeaderError):
        service.add_pointer(JOB, 1, b"{}", FencingToken("a", 12345))


def test_detached_contender_can_start_again(services, service):
    a, b = contenders(services, [], "ab")
    a.rejoin_on_expiry = False
    a.start()
    b.start()
    a.expire_session()
    a.start()
    b.stop()
    assert service.leader_of(JOB) == "a" and a.is_leader
