"""The simulator's invariant checker (`runtime.checker.invariants`).

Clean runs raise nothing and leave behaviour untouched; each invariant is shown to fail on a bug
planted for the test only (monkeypatched, never in the code): that is what proves it can fail.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.coordinator import CheckpointCoordinator
from checkpoint.io.snapshot_writer import SnapshotWriter
from checkpoint.storage.store import StandaloneCompletedCheckpointStore
from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from runtime.checker.invariants import InvariantChecker, InvariantViolation
from runtime.checker.output_invariants import record_key
from runtime.core.input_gate import CheckpointedInputGate
from runtime.core.task import Task
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.result import JobFailedError
from runtime.records.messages import CancelCheckpointMarker
from runtime.sim import executor as sim_executor
from runtime.sim.ports import SimTaskPorts
from runtime.workloads.scenarios import relay_job
from runtime.workloads.seeded import SINK, make_env, multiset, random_spec
from vocabulary.fault_plan import CoordinatorCrash, LostAcknowledgement, TaskCrash

_REFERENCES: dict[int, object] = {}


def reference(job_seed: int):
    if job_seed not in _REFERENCES:
        _REFERENCES[job_seed] = make_env(random_spec(job_seed), mode="none").execute("job", executor="sim", seed=0)
    return _REFERENCES[job_seed]


def violation(env: StreamEnvironment, seed: int = 0, **options) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as info:
        env.execute("job", executor="sim", seed=seed, invariants=True, **options)
    return info.value


# ---------------------------------------------------------------------- clean runs


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["aligned", "unaligned", "timeout", "at_least_once"])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_seed=st.integers(0, 10_000), sim_seed=st.integers(0, 10_000), crashes=st.integers(0, 2),
       lost_acks=st.integers(0, 1), stalls=st.integers(0, 1), storage_failures=st.integers(0, 1),
       coordinator_crashes=st.integers(0, 1))
def test_no_violation_under_the_classic_faults(mode, job_seed, sim_seed, crashes, lost_acks, stalls,
                                               storage_failures, coordinator_crashes) -> None:
    checker = InvariantChecker(reference=reference(job_seed))
    faults = FaultPlan.random(seed=sim_seed, crashes=crashes, lost_acks=lost_acks, stalls=stalls,
                              storage_failures=storage_failures, coordinator_crashes=coordinator_crashes)
    make_env(random_spec(job_seed), mode=mode).execute("job", executor="sim", seed=sim_seed, faults=faults,
                                                       invariants=checker)
    assert checker.checks["credits-conserved"] > 0
    assert checker.checks["committed-output-complete"] == 1


def test_the_checker_checks_every_invariant_on_a_busy_run() -> None:
    checker = InvariantChecker(reference=relay_job().execute("job", executor="sim", seed=0))
    relay_job(max_aligned_bytes=1).execute(  # alignments abort: cancellation markers flow
        "job", executor="sim", seed=7, invariants=checker,
        faults=FaultPlan.of(TaskCrash(task="count[1]", after_records=150), LostAcknowledgement(task="relay", nth=2)))
    assert set(checker.checks) == {
        "checkpoint-ids-increase", "blocked-channel-silent", "credits-conserved", "committed-output-monotonic",
        "committed-output-within-reference", "committed-output-complete", "retained-files-kept",
        "checkpoint-ends-in-time", "checkpoint-end-forwarded", "channel-released-after-checkpoint-end",
    }


def test_the_checker_does_not_change_the_run() -> None:
    runs = []
    for invariants in (False, True):
        env = make_env(random_spec(5), mode="unaligned")
        runs.append(env.execute("job", executor="sim", seed=3, faults=FaultPlan.random(seed=3, crashes=2),
                                trace=True, invariants=invariants))
    assert runs[0].trace == runs[1].trace
    assert runs[0].output(SINK) == runs[1].output(SINK)


def test_a_reference_may_be_records_a_multiset_a_mapping_or_a_result() -> None:
    ref = reference(11)
    records = ref.output(SINK)
    for given_ref in (ref, records, multiset(records), {SINK: records}):
        checker = InvariantChecker(reference=given_ref)
        make_env(random_spec(11)).execute("job", executor="sim", seed=1, invariants=checker)
        assert checker.checks["committed-output-within-reference"] == len(records)


def test_a_bad_reference_is_refused_naming_the_sinks() -> None:
    with pytest.raises(ValueError, match=r"sink\(s\) \['nope'\].*its sinks: \['out'\]"):
        make_env(random_spec(1)).execute("job", executor="sim", invariants=InvariantChecker(reference={"nope": []}))


def test_a_restored_execution_continues_the_earlier_ones_output(tmp_path) -> None:
    # the reference bounds the committer's output, which the earlier execution began
    first_env = relay_job(storage=str(tmp_path), attempts=0)
    first = sim_executor.SimExecutor(first_env.get_job_graph("job"), seed=0,
                                     faults=FaultPlan.of(TaskCrash(task="count[0]", at=0.035)))
    with pytest.raises(JobFailedError):
        first.run()
    assert first.committer.transactions(SINK)
    checker = InvariantChecker(reference=relay_job().execute("job", executor="sim", seed=0))
    relay_job(storage=str(tmp_path / "second")).restore_from(str(tmp_path), job_id="job").execute(
        "job", executor="sim", seed=1, committer=first.committer, invariants=checker)
    assert checker.checks["committed-output-complete"] == 1


def test_invariants_are_off_by_default() -> None:
    result = make_env(random_spec(2)).execute("job", executor="sim", seed=1)
    assert result.output(SINK)


# ---------------------------------------------------------------------- each invariant can fail


def test_a_task_aborting_without_a_cancellation_marker_is_caught(monkeypatch) -> None:
    def abort_silently(self, checkpoint_id, reason):  # the planted bug: no marker downstream
        self.checkpoints.cancel(checkpoint_id)
        if reason.name != "CANCELLED":
            self.ports.decline(self.task_id, checkpoint_id, reason)

    monkeypatch.setattr(Task, "abort_checkpoint", abort_silently)
    error = violation(relay_job(max_aligned_bytes=1))
    assert error.invariant == "checkpoint-end-forwarded"
    assert "relay[" in error.subject and "aborted (alignment buffer full)" in str(error)
    assert "seed=0" in error.replay and "invariants=True" in error.replay


def test_a_lost_cancellation_marker_leaves_a_channel_blocked_after_the_abort(monkeypatch) -> None:
    drain = Task.drain_sendable

    def lose_markers(self):  # the planted bug: the network drops cancellation markers
        return [(ch, p) for ch, p in drain(self) if not isinstance(p, CancelCheckpointMarker)]

    monkeypatch.setattr(Task, "drain_sendable", lose_markers)
    # seed 3: count[0] stays blocked (in other seeds its own alignment overflows and releases it)
    error = violation(relay_job(max_aligned_bytes=1), seed=3)
    assert error.invariant == "channel-released-after-checkpoint-end"
    assert "will never release them" in str(error)


def test_a_credit_not_returned_once_is_caught(monkeypatch) -> None:
    consumed = SimTaskPorts.buffer_consumed
    skipped: list[int] = []

    def forget_once(self, task_id, channel):
        if not skipped and str(task_id) == "count[1]":
            skipped.append(channel)
            return
        consumed(self, task_id, channel)

    monkeypatch.setattr(SimTaskPorts, "buffer_consumed", forget_once)
    error = violation(relay_job())
    assert error.invariant == "credits-conserved"
    assert "-> count[1]" in error.subject and "not the window 2" in str(error)


def test_a_gate_delivering_from_a_blocked_channel_is_caught(monkeypatch) -> None:
    poll = CheckpointedInputGate.poll

    def ignore_blocks(self):  # the planted bug: poll hands out what blocked channels hold
        blocked, self._blocked = self._blocked, set()
        try:
            return poll(self)
        finally:
            self._blocked = blocked

    monkeypatch.setattr(CheckpointedInputGate, "poll", ignore_blocks)
    error = violation(relay_job())
    assert error.invariant == "blocked-channel-silent"
    assert "while the channel was blocked" in str(error)


@pytest.mark.parametrize("storage", ["memory", "disk"])
def test_deleting_a_file_of_a_retained_checkpoint_is_caught(monkeypatch, tmp_path, storage) -> None:
    add = StandaloneCompletedCheckpointStore.add_checkpoint

    def add_and_lose_metadata(self, completed):  # the planted bug: the new checkpoint loses a file
        dropped = add(self, completed)
        if completed.checkpoint_id == 3:
            self.storage.delete_file(completed.metadata_path)
        return dropped

    monkeypatch.setattr(StandaloneCompletedCheckpointStore, "add_checkpoint", add_and_lose_metadata)
    error = violation(relay_job(storage=str(tmp_path) if storage == "disk" else None))
    assert error.invariant == "retained-files-kept"
    assert error.subject == "file job/chk-3/_metadata" and "retained checkpoint 3" in str(error)


def test_a_checkpoint_completing_with_a_deleted_file_is_caught(monkeypatch) -> None:
    write = SnapshotWriter.write

    def write_and_delete(self, snapshot, files):  # the planted bug: a written file goes away
        handles = write(self, snapshot, files)
        if snapshot.checkpoint_id == 2 and str(snapshot.task_id) == "count[0]":
            self.storage.delete_file(next(iter(handles.values()))[0].path)
        return handles

    monkeypatch.setattr(SnapshotWriter, "write", write_and_delete)
    error = violation(relay_job())
    assert error.invariant == "retained-files-kept"
    assert "checkpoint 2" in error.subject and "does not exist (deleted at" in str(error)


def test_a_reused_checkpoint_id_is_caught(monkeypatch) -> None:
    next_id = CheckpointCoordinator._next_checkpoint_id

    def stuck_after_two(self):  # the planted bug: the id counter stops
        return min(next_id(self), 2)

    monkeypatch.setattr(CheckpointCoordinator, "_next_checkpoint_id", stuck_after_two)
    error = violation(relay_job())
    assert error.invariant == "checkpoint-ids-increase"
    assert error.subject == "checkpoint 2"


def test_a_checkpoint_that_never_ends_is_caught(monkeypatch) -> None:
    monkeypatch.setattr(CheckpointCoordinator, "_on_timeout", lambda self, checkpoint_id: None)
    # checkpoint 1 loses an acknowledgement and nothing ends it; the job runs on past its deadline
    error = violation(relay_job(rows=3000, timeout=0.005), faults=FaultPlan.of(LostAcknowledgement(task="count")))
    assert error.invariant == "checkpoint-ends-in-time" and error.subject == "checkpoint 1"
    assert "neither completed nor aborted within its timeout of 0.005 s" in str(error)


def test_a_record_committed_twice_is_caught_at_once(monkeypatch) -> None:
    ref = relay_job().execute("job", executor="sim", seed=0)
    notify = CollectSink.notify_checkpoint_complete

    def commit_again(self, checkpoint_id):  # the planted bug: a sink re-commits under a new id
        committed = [t["txn"] for t in self._pending if t["checkpoint"] == 2]
        notify(self, checkpoint_id)
        for txn in committed:
            self.ctx.committer.commit(self.sink_name, txn + "-again", self.ctx.committer.records(self.sink_name, txn))

    monkeypatch.setattr(CollectSink, "notify_checkpoint_complete", commit_again)
    with pytest.raises(InvariantViolation) as info:
        relay_job().execute("job", executor="sim", seed=0, invariants=InvariantChecker(reference=ref))
    assert info.value.invariant == "committed-output-within-reference"
    assert info.value.subject.endswith("/2-again'") and "committed 2 time(s)" in str(info.value)
    assert info.value.time < 0.05  # when it happened, not at the end of the run


def test_a_lost_record_is_caught_at_the_end(monkeypatch) -> None:
    ref = relay_job().execute("job", executor="sim", seed=0)
    record_commit = CollectCommitter._record_commit

    def drop_one(self, sink, transaction_id, records=None):  # the planted bug: a record vanishes
        if transaction_id.endswith("/2") and records is None:
            records = self.records(sink, transaction_id)[1:]
        return record_commit(self, sink, transaction_id, records)

    monkeypatch.setattr(CollectCommitter, "_record_commit", drop_one)
    with pytest.raises(InvariantViolation) as info:
        relay_job().execute("job", executor="sim", seed=0, invariants=InvariantChecker(reference=ref))
    assert info.value.invariant == "committed-output-complete"
    assert "2 record(s) of the failure-free run are missing and 0 are extra" in str(info.value)  # one per sink subtask


def test_committed_output_taken_back_is_caught(monkeypatch) -> None:
    abort = CollectCommitter.abort_lingering

    def abort_too_much(self, after, before):  # the planted bug: recovery drops a committed transaction
        for txns in self._committed.values():
            if txns:
                txns.popitem()
        return abort(self, after, before)

    monkeypatch.setattr(CollectCommitter, "abort_lingering", abort_too_much)
    error = violation(relay_job(), faults=FaultPlan.of(TaskCrash(task="count[0]", after_records=300)))
    assert error.invariant == "committed-output-monotonic"
    assert "no longer committed" in str(error)


def test_a_dead_coordinator_leaves_no_checkpoint_without_an_end() -> None:
    # a crashed coordinator is shut down, not only stopped: else what it had pending never ends in the
    # history (and its timeout timers still fire, even failing the job over)
    result = relay_job(timeout=0.01).execute(
        "job", executor="sim", seed=0, invariants=True,
        faults=FaultPlan.of(LostAcknowledgement(task="count", nth=1), CoordinatorCrash(at=0.007)))
    shut = [c for c in result.checkpoints if not c.completed and c.failure_reason.name == "COORDINATOR_SHUTDOWN"]
    assert len(shut) == 1
    assert Counter(c.id for c in result.checkpoints).most_common(1)[0][1] == 1


def test_record_key_matches_the_workloads_multiset() -> None:
    records = [{"b": 1, "a": 2}, {"a": 2, "b": 1}]
    assert Counter(record_key(r) for r in records) == multiset(records)


def test_the_simulator_takes_the_checker_it_is_given_and_refuses_a_bare_true() -> None:
    """The checker lives above the simulator (runtime.verify): `execute(invariants=True)` builds it,
    a `SimExecutor` gets it (an `ExecutionObserver`) and says so when handed True."""
    from runtime.sim.executor import SimExecutor

    graph = make_env(random_spec(1)).get_job_graph("job")
    with pytest.raises(TypeError, match="InvariantChecker"):
        SimExecutor(graph, invariants=True)
    checker = InvariantChecker()
    SimExecutor(graph, invariants=checker).run()
    assert checker.checks["credits-conserved"] > 0
