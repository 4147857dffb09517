"""Model-based test of the coordinator: random trigger/ack/decline/timeout/time sequences.

After every step the invariants are checked against what the recording gateway saw:
ids strictly increase, at most `max_concurrent` are pending, a checkpoint completes only when
every task acknowledged, every abort has a reason, the store holds exactly the last `retained`
completions (and storage holds no files of anything else), fail_job fires exactly when the
consecutive counted failures exceed `tolerable_failures` (a trigger whose id could not be stored
counts), and pending checkpoints never outlive their timeout. Liveness rules drive the final
checkpoint and periodic triggering; the coordinator's own storage writes (id counter, metadata)
fail at random steps.
"""

from __future__ import annotations

import pytest
from ckpt_testkit import JOB, SRC, TASKS, FailingBlobStore, make_harness
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from checkpoint.ids import COUNTER_FILE, StorageCheckpointIDCounter
from checkpoint.pending import AckResult
from checkpoint.storage.layout import MemoryBlobStore
from vocabulary.options import CheckpointConfig
from vocabulary.reasons import CheckpointFailureReason as R


def _started_counter(storage):
    counter = StorageCheckpointIDCounter(storage, JOB)
    counter.start()
    return counter


configs = st.builds(
    CheckpointConfig,
    interval=st.sampled_from([None, 0.5, 1.0]),
    timeout=st.sampled_from([1.0, 2.5]),
    min_pause=st.sampled_from([0.0, 0.7]),
    max_concurrent=st.integers(1, 3),
    tolerable_failures=st.integers(0, 2),
    retained=st.integers(1, 3),
)
DECLINE_REASONS = [R.DECLINED, R.ALIGNMENT_BUFFER_FULL, R.CANCELLED, R.INPUT_FINISHED]


class CoordinatorMachine(RuleBasedStateMachine):
    @initialize(config=configs, start=st.booleans())
    def setup(self, config: CheckpointConfig, start: bool) -> None:
        self.config = config
        self.blob = FailingBlobStore(MemoryBlobStore())
        self.h = make_harness(config, blob_store=self.blob, final_retry_delay=0.3, id_counter=_started_counter)
        # a failed id-counter write is a trigger that failed: a counted failure, in event order
        self.blob.on_failure = lambda path: (COUNTER_FILE in path and self.h.gateway.events.append(("trigger_failed",)))
        self.c = self.h.coordinator
        self.acked: dict[int, set] = {}
        self.finished_floor: int | None = None
        self.max_triggered = 0
        if start:
            self.c.start()

    # -- rules ---------------------------------------------------------------------------------

    @rule()
    def trigger(self) -> None:
        pending_before = len(self.c.pending_ids)
        result = self.c.trigger_checkpoint()
        if result is R.TOO_MANY_CHECKPOINTS:
            candidate = self.finished_floor is not None and any(
                i > self.finished_floor for i in self.c.pending_ids)
            assert pending_before >= self.config.max_concurrent or candidate
        elif isinstance(result, int):
            assert result > self.max_triggered

    @precondition(lambda self: self.c.pending_ids)
    @rule(i=st.integers(0, 5), t=st.integers(0, len(TASKS) - 1))
    def ack(self, i: int, t: int) -> None:
        pending = self.c.pending_ids
        checkpoint_id = pending[i % len(pending)]
        task = TASKS[t]
        expected = AckResult.DUPLICATE if task in self.acked.get(checkpoint_id, set()) else AckResult.SUCCESS
        result = self.h.ack(task, checkpoint_id, write=expected is AckResult.SUCCESS, alignment_time=0.01 * t)
        assert result is expected
        if result is AckResult.SUCCESS:
            self.acked.setdefault(checkpoint_id, set()).add(task)

    @precondition(lambda self: self.c.pending_ids)
    @rule(i=st.integers(0, 5))
    def ack_all_remaining(self, i: int) -> None:
        pending = self.c.pending_ids
        checkpoint_id = pending[i % len(pending)]
        for task in TASKS:
            if task not in self.acked.get(checkpoint_id, set()) and checkpoint_id in self.c.pending_ids:
                self.ack(pending.index(checkpoint_id), TASKS.index(task))

    @rule(offset=st.integers(-3, 2), t=st.integers(0, len(TASKS) - 1))
    def late_or_unknown_ack(self, offset: int, t: int) -> None:
        checkpoint_id = self.max_triggered + offset
        if checkpoint_id < 1 or checkpoint_id in self.c.pending_ids:
            return
        assert self.h.ack(TASKS[t], checkpoint_id, write=False) is AckResult.DISCARDED

    @precondition(lambda self: self.c.pending_ids)
    @rule(i=st.integers(0, 5), t=st.integers(0, len(TASKS) - 1), reason=st.sampled_from(DECLINE_REASONS))
    def decline(self, i: int, t: int, reason: R) -> None:
        pending = self.c.pending_ids
        checkpoint_id = pending[i % len(pending)]
        assert self.c.receive_decline(TASKS[t], checkpoint_id, reason)
        assert checkpoint_id not in self.c.pending_ids

    @rule(dt=st.sampled_from([0.0, 0.1, 0.3, 0.5, 1.0, 3.0]))
    def advance(self, dt: float) -> None:
        self.h.advance(dt)

    @rule()
    def fail_next_metadata_write(self) -> None:
        self.blob.fail_writes(1, matching="_metadata")

    @rule()
    def fail_next_counter_write(self) -> None:
        """The next trigger cannot persist its id (the coordinator's own storage write fails)."""
        self.blob.fail_writes(1, matching=COUNTER_FILE)

    @rule(s=st.integers(0, len(SRC) - 1))
    def source_finished(self, s: int) -> None:
        already = self.c.all_sources_finished
        self.c.source_finished(SRC[s])
        if self.c.all_sources_finished and not already:
            self.finished_floor = self.max_triggered

    @rule()
    def stop(self) -> None:
        self.c.stop()

    @rule()
    def start(self) -> None:
        self.c.start()

    @precondition(
        lambda self: self.c.all_sources_finished
        and not self.c.is_final_checkpoint_complete
        and not self.c.is_suspended
    )
    @rule()
    def drive_to_final_checkpoint(self) -> None:
        """Liveness: with every task cooperating, the final checkpoint completes promptly."""
        for _ in range(10):
            self.h.advance(0.0)
            for checkpoint_id in self.c.pending_ids:
                for task in TASKS:
                    if checkpoint_id in self.c.pending_ids and task not in self.acked.get(checkpoint_id, set()):
                        self.ack(self.c.pending_ids.index(checkpoint_id), TASKS.index(task))
            if self.c.is_final_checkpoint_complete:
                return
            self.h.advance(0.3)  # the final retry delay
        raise AssertionError(f"final checkpoint did not complete: {self.c!r}")

    @precondition(lambda self: self.c.is_periodic_triggering)
    @rule()
    def periodic_triggering_is_live(self) -> None:
        """Liveness: once nothing is pending, a periodic trigger comes within interval + min_pause."""
        for checkpoint_id in self.c.pending_ids:
            self.c.receive_decline(TASKS[0], checkpoint_id, R.CANCELLED)  # not a counted failure
        if not self.c.is_periodic_triggering:
            return
        before = self.h.gateway.triggered_ids()
        failed_before = self.h.gateway.events.count(("trigger_failed",))
        self.h.advance(self.config.interval + self.config.min_pause + 1e-6)
        if self.h.gateway.events.count(("trigger_failed",)) > failed_before:  # one armed failure
            self.h.advance(self.config.interval + 1e-6)  # the next interval tries again
        assert self.h.gateway.triggered_ids() != before, self.c

    @rule(restore=st.booleans())
    def failover(self, restore: bool) -> None:
        before = set(self.c.pending_ids)
        assert set(self.c.abort_all_pending(R.TASK_FAILURE)) == before
        self.c.restart(SRC, TASKS)
        # an executor restores the latest completed checkpoint (or starts over without one)
        self.c.restored_from(self.c.latest_completed() if restore else None)
        self.finished_floor = None

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def ids_strictly_increase(self) -> None:
        order: list[int] = []
        for _, checkpoint_id, *_ in self.h.gateway.triggers:
            if not order or order[-1] != checkpoint_id:
                assert not order or checkpoint_id > order[-1], order + [checkpoint_id]
                order.append(checkpoint_id)
        if order:
            self.max_triggered = order[-1]

    @invariant()
    def bounded_pending_and_timeouts(self) -> None:
        pending = self.c.pending_ids
        assert len(pending) <= self.config.max_concurrent
        now = self.h.clock.now()
        for checkpoint_id in pending:
            assert now < self.c.get_pending(checkpoint_id).trigger_time + self.config.timeout

    @invariant()
    def every_checkpoint_ends_once_and_completes_only_when_fully_acknowledged(self) -> None:
        gateway = self.h.gateway
        completed = gateway.completed_ids()
        aborted = gateway.aborted()
        pending = set(self.c.pending_ids)
        assert len(completed) == len(set(completed))
        assert not (set(completed) & set(aborted)) and not (pending & (set(completed) | set(aborted)))
        assert set(completed) | set(aborted) | pending == set(gateway.triggered_ids())
        for checkpoint in gateway.completed:
            assert set(checkpoint.acks) == set(TASKS) == self.acked[checkpoint.checkpoint_id]
        assert all(isinstance(reason, R) for reason in aborted.values())
        for stats in self.c.stats.history:
            assert stats.completed == (stats.failure_reason is None)
            assert stats.completed == (stats.id in completed)
            assert stats.num_acknowledged <= stats.num_tasks == len(TASKS)

    @invariant()
    def completion_subsumes_older_pending(self) -> None:
        completed = self.h.gateway.completed_ids()
        if completed:
            assert all(checkpoint_id > max(completed) for checkpoint_id in self.c.pending_ids)

    @invariant()
    def store_keeps_the_last_retained_completions(self) -> None:
        completed = self.h.gateway.completed_ids()
        kept = [c.checkpoint_id for c in self.h.store.get_all_checkpoints()]
        assert kept == completed[-self.config.retained :]
        with_files = {cid for cid in self.c.pending_ids if self.acked.get(cid)}
        assert self.h.storage.list_checkpoint_ids(JOB) == sorted(set(kept) | with_files)
        for checkpoint_id in kept:
            assert self.blob.exists(self.h.storage.metadata_path(JOB, checkpoint_id))

    @invariant()
    def each_completion_is_committed_once_before_any_task_is_told(self) -> None:
        committed: list[int] = []
        for event in self.h.gateway.events:
            if event[0] == "commit":
                committed.append(event[1])
            elif event[0] in ("complete", "completed"):
                assert event[-1] in committed, f"{event} before checkpoint {event[-1]} was committed"
        assert set(committed) == set(self.h.gateway.completed_ids())
        # once per completion; a final checkpoint once more when an execution restored it
        finals = {c.checkpoint_id for c in self.h.gateway.completed if c.properties.get("final")}
        assert all(committed.count(i) == 1 for i in set(committed) - finals), committed

    @invariant()
    def fail_job_exactly_when_tolerable_failures_exceeded(self) -> None:
        count = expected_failures = 0
        seen: set[int] = set()
        for event in self.h.gateway.events:
            if event[0] == "completed":
                count = 0
            elif event[0] == "trigger_failed":
                count += 1
                if count > self.config.tolerable_failures:
                    expected_failures += 1
                    count = 0
            elif event[0] == "abort" and event[2] not in seen:
                seen.add(event[2])
                if event[3].counts_as_failure:
                    count += 1
                    if count > self.config.tolerable_failures:
                        expected_failures += 1
                        count = 0
        assert len(self.h.gateway.failures) == expected_failures
        assert self.c.consecutive_failures == count

    @invariant()
    def final_checkpoint_was_triggered_after_all_sources_finished(self) -> None:
        if self.c.is_final_checkpoint_complete:
            assert self.finished_floor is not None
            final = self.c.final_checkpoint_id
            completed = self.h.gateway.completed_ids()
            assert final in completed
            # the final checkpoint is a new one, or the restored final checkpoint taken again
            restored = [c for c in self.h.store.get_all_checkpoints() if c.checkpoint_id == final]
            assert final > self.finished_floor or (restored and restored[0].properties.get("final"))

    @invariant()
    def one_final_candidate_at_a_time_and_nothing_after_the_final(self) -> None:
        if self.finished_floor is not None:
            # a checkpoint after the final one would stage sink transactions nothing commits
            assert len([i for i in self.c.pending_ids if i > self.finished_floor]) <= 1
            assert not self.c.is_periodic_triggering
        if self.c.is_final_checkpoint_complete:
            assert all(i < self.c.final_checkpoint_id for i in self.c.pending_ids)


CoordinatorMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoordinatorModel = CoordinatorMachine.TestCase
TestCoordinatorModel.pytestmark = [pytest.mark.slow]  # a long stateful run
