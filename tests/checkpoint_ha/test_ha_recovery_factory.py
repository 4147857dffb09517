"""checkpoint/io/recovery.py: recovery modes, the standalone services, the always-leader election."""

from __future__ import annotations

import pytest
from ha_helpers import JOB, ids, make_checkpoint

from checkpoint.ids import StandaloneCheckpointIDCounter
from checkpoint.io.ha_services import create_recovery_factory
from checkpoint.io.recovery import (
    HighAvailabilityServices,
    NotLeaderError,
    RecoveryMode,
    StandaloneCheckpointRecoveryFactory,
    StandaloneLeaderElection,
)
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore
from checkpoint.storage.store import StandaloneCompletedCheckpointStore


@pytest.mark.parametrize("text", ["standalone", "STANDALONE", " Standalone "])
def test_recovery_mode_parses_names(text):
    assert RecoveryMode.parse(text) is RecoveryMode.STANDALONE
    assert RecoveryMode.parse(RecoveryMode.ZOOKEEPER) is RecoveryMode.ZOOKEEPER


def test_unknown_recovery_mode_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="invalid recovery mode 'kubernetes': must be one of STANDALONE, ZOOKEEPER"):
        create_recovery_factory("kubernetes")


def test_standalone_services():
    services = create_recovery_factory()
    assert isinstance(services, StandaloneCheckpointRecoveryFactory)
    assert isinstance(services, HighAvailabilityServices)
    assert services.mode is RecoveryMode.STANDALONE
    storage = CheckpointStorage(MemoryBlobStore())
    store = services.create_store(JOB, storage, 2)
    assert isinstance(store, StandaloneCompletedCheckpointStore) and store.retained == 2
    counter = services.create_id_counter(JOB)
    assert isinstance(counter, StandaloneCheckpointIDCounter)
    assert counter.get_and_increment() == 1
    assert services.create_id_counter(JOB).get_and_increment() == 2, "a restarted coordinator continues the ids"
    assert services.create_id_counter("other").get() == 1
    for i in (1, 2, 3):
        store.add_checkpoint(make_checkpoint(storage, i))
    assert ids(services.create_store(JOB, storage, 2).recover()) == [2, 3]


@pytest.mark.parametrize("bad", ["", "a/b", "..", None])
def test_job_ids_are_validated(bad):
    services = create_recovery_factory()
    with pytest.raises(ValueError, match="job_id"):
        services.create_id_counter(bad)
    with pytest.raises(ValueError, match="job_id"):
        services.create_leader_election(bad, "jm")


def test_standalone_election_leads_from_start_to_stop():
    events: list[str] = []
    election = StandaloneLeaderElection("jm", on_grant=lambda: events.append("+"),
                                        on_revoke=lambda: events.append("-"))
    assert not election.is_leader
    with pytest.raises(NotLeaderError, match="'jm' is not started"):
        election.fencing_token()
    election.start()
    election.start()
    assert election.is_leader and election.await_leadership(0)
    assert election.fencing_token().contender_id == "jm"
    election.stop()
    election.stop()
    assert events == ["+", "-"] and not election.is_leader


def test_contender_id_is_validated():
    with pytest.raises(ValueError, match="contender_id"):
        StandaloneLeaderElection("")


def test_retained_is_validated():
    services = create_recovery_factory()
    with pytest.raises(ValueError, match="retained"):
        services.create_store(JOB, CheckpointStorage(MemoryBlobStore()), 0)
