"""Model-based test of the in-memory HA services: three coordinators share one counter, one
pointer store and one election; sessions expire, pointers get corrupted, leaders come and go.

The model tracks the election queue, every coordinator's retained ids, the set of pointers and
which of them are corrupt; after every step the real services must agree with it, and the files in
storage must be exactly those of the checkpoints that have a pointer.
"""

from __future__ import annotations

import json

import pytest
from ha_helpers import JOB, ids, make_checkpoint
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from checkpoint.io.ha_memory import InMemoryCoordinationService, InMemoryHighAvailabilityServices
from checkpoint.io.recovery import NotLeaderError
from checkpoint.storage.layout import CheckpointStorage, MemoryBlobStore

COORDINATORS = 3
coordinator = st.integers(0, COORDINATORS - 1)


class HaServicesMachine(RuleBasedStateMachine):
    @initialize(retained=st.integers(1, 3))
    def setup(self, retained):
        self.retained = retained
        self.service = InMemoryCoordinationService()
        self.storage = CheckpointStorage(MemoryBlobStore())
        self.counter = InMemoryHighAvailabilityServices(self.service).create_id_counter(JOB)
        self.counter.start()
        self.needs_recover = [False] * COORDINATORS
        self.tokens: list = [None] * COORDINATORS
        self.elections, self.stores = [], []
        for i in range(COORDINATORS):
            services = InMemoryHighAvailabilityServices(self.service)  # one per coordinator process
            election = services.create_leader_election(JOB, f"jm-{i}", on_grant=lambda i=i: self._granted(i))
            self.elections.append(election)
            self.stores.append(services.create_store(JOB, self.storage, retained, leader_election=election))
        # the model
        self.queue: list[int] = []
        self.mem: list[list[int]] = [[] for _ in range(COORDINATORS)]
        self.pointers: set[int] = set()
        self.corrupt: set[int] = set()
        self.next_id = 1
        self.last_added = 0

    def _granted(self, i):
        self.needs_recover[i] = True
        self.tokens[i] = self.elections[i].fencing_token()

    # -- election rules --

    @rule(i=coordinator)
    def start(self, i):
        self.elections[i].start()
        if i not in self.queue:
            self.queue.append(i)

    @rule(i=coordinator)
    def stop(self, i):
        self.elections[i].stop()
        if i in self.queue:
            self.queue.remove(i)

    @rule(i=coordinator)
    def expire_session(self, i):
        self.elections[i].expire_session()
        if i in self.queue:  # it rejoins at the back with a new session
            self.queue.remove(i)
            self.queue.append(i)

    # -- checkpoint rules --

    def _model_recover(self, i):
        kept = [c for c in sorted(self.pointers, reverse=True) if c not in self.corrupt][: self.retained]
        kept.reverse()
        self.mem[i] = kept
        if kept:
            for old in [c for c in self.pointers if c < kept[0]]:
                self.pointers.discard(old)
                self.corrupt.discard(old)

    def _recover(self, i):
        recovered = self.stores[i].recover()
        self._model_recover(i)
        assert ids(recovered) == self.mem[i]
        self.needs_recover[i] = False

    @precondition(lambda self: self.queue)
    @rule()
    def leader_recovers(self):
        self._recover(self.queue[0])

    @rule(i=coordinator)
    def add_checkpoint(self, i):
        checkpoint_id = self.counter.get_and_increment()
        assert checkpoint_id == self.next_id, "the shared counter hands out every id once, in order"
        self.next_id += 1
        if self.needs_recover[i] and self.elections[i].is_leader:
            self._recover(i)  # a coordinator recovers when it is granted leadership
        completed = make_checkpoint(self.storage, checkpoint_id)
        leads = bool(self.queue) and self.queue[0] == i
        try:
            dropped = self.stores[i].add_checkpoint(completed)
        except NotLeaderError:
            assert not leads, f"jm-{i} leads but was refused"
            self.storage.discard_checkpoint(JOB, checkpoint_id)  # the coordinator drops the state
            return
        assert leads, f"jm-{i} does not lead but added checkpoint {checkpoint_id}"
        self.pointers.add(checkpoint_id)
        self.mem[i].append(checkpoint_id)
        expected_dropped = self.mem[i][: -self.retained]
        del self.mem[i][: -self.retained]
        for old in expected_dropped:
            self.pointers.discard(old)
            self.corrupt.discard(old)
        assert ids(dropped) == expected_dropped
        assert checkpoint_id > self.last_added, "checkpoint ids strictly increase across leaders"
        self.last_added = checkpoint_id

    @rule(i=coordinator)
    def paused_leader_writes(self, i):
        """A coordinator that once led writes with its old token, as if it never noticed losing
        leadership: only the backend's atomic token check stands in the way."""
        token = self.tokens[i]
        if token is None or (self.queue and self.queue[0] == i and self.elections[i].fencing_token() == token):
            return
        try:
            self.stores[i].handles.add(self.next_id + 1000, b"{}", token)
        except NotLeaderError:
            return
        raise AssertionError(f"jm-{i} registered a checkpoint with a stale token {token}")

    @precondition(lambda self: self.pointers)
    @rule(data=st.data(), kind=st.sampled_from(["empty", "truncated", "missing file", "wrong checksum"]))
    def corrupt_pointer(self, data, kind):
        victim = data.draw(st.sampled_from(sorted(self.pointers)))
        garbage = {
            "empty": b"",
            "truncated": self.service.get_pointer(JOB, victim)[:-3],
            "missing file": b'{"metadata_path": "pv/chk-999/_metadata", "checksum": "0"}',
            "wrong checksum": json.dumps({"metadata_path": self.storage.metadata_path(JOB, victim),
                                          "checksum": "0" * 64}).encode(),
        }[kind]
        self.service.put_pointer(JOB, victim, garbage)
        self.corrupt.add(victim)

    # -- invariants --

    @invariant()
    def one_leader_the_earliest_live_contender(self):
        leaders = [i for i, e in enumerate(self.elections) if e.is_leader]
        assert leaders == self.queue[:1]
        assert self.service.leader_of(JOB) == (f"jm-{self.queue[0]}" if self.queue else None)

    @invariant()
    def pointers_match_the_model(self):
        assert self.service.list_pointers(JOB) == sorted(self.pointers)

    @invariant()
    def files_exist_exactly_for_pointed_checkpoints(self):
        assert self.storage.list_checkpoint_ids(JOB) == sorted(self.pointers)
        for checkpoint_id in self.pointers - self.corrupt:
            assert self.storage.blob_store.exists(self.storage.metadata_path(JOB, checkpoint_id))

    @invariant()
    def stores_match_the_model(self):
        for store, mem in zip(self.stores, self.mem):
            assert ids(store.get_all_checkpoints()) == mem
            assert len(mem) <= self.retained


HaServicesMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
TestHaServices = HaServicesMachine.TestCase
TestHaServices.pytestmark = [pytest.mark.slow]  # a long stateful run
