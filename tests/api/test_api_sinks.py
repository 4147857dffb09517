"""CollectSink two-phase commit: stage, snapshot (pre-commit), complete, abort, restore-and-commit."""

from __future__ import annotations

import pyarrow as pa
import pytest
from api_fakes import RecordingCommitter, make_ctx

from operators import CollectSink, Sink
from operators.base import DeclaredState


def sink_with(committer: RecordingCommitter, *, subtask: int = 0, checkpointing: bool = True) -> CollectSink:
    sink = CollectSink("pv")
    sink.open(make_ctx(committer=committer, subtask=subtask, checkpointing=checkpointing, keyed=False))
    return sink


def recs(*vs):
    return [{"v": v} for v in vs]


def test_nothing_is_committed_before_the_checkpoint_completes():
    committer = RecordingCommitter()
    sink = sink_with(committer)
    assert sink.process_batch(recs(1, 2)) == []
    state = sink.snapshot_state(1)
    # pre-commit: the records are staged in the external system, only the id is in the state
    assert state == {"pending": [{"txn": "pv/0/1", "checkpoint": 1}]}
    assert committer.staged == {"pv/0/1": recs(1, 2)}
    sink.process_batch(recs(3))  # after barrier 1: goes to the next transaction
    assert committer.calls == []
    sink.notify_checkpoint_complete(1)
    assert committer.calls == ["pv/0/1"] and committer.output("pv") == recs(1, 2)
    assert sink.num_staged == 1 and sink.pending_transactions == []


def test_snapshot_is_not_changed_by_later_records_or_commits():
    sink = sink_with(RecordingCommitter())
    sink.process_batch(recs(1))
    state = sink.snapshot_state(1)
    sink.process_batch(recs(2))
    sink.snapshot_state(2)
    sink.notify_checkpoint_complete(2)
    assert state == {"pending": [{"txn": "pv/0/1", "checkpoint": 1}]}


def test_aborted_checkpoint_transaction_is_committed_by_a_later_completion():
    committer = RecordingCommitter()
    sink = sink_with(committer)
    sink.process_batch(recs(1))
    sink.snapshot_state(1)
    sink.notify_checkpoint_aborted(1)
    assert sink.pending_transactions == ["pv/0/1"]
    sink.process_batch(recs(2))
    state = sink.snapshot_state(2)
    assert [t["txn"] for t in state["pending"]] == ["pv/0/1", "pv/0/2"]  # 2 carries the aborted 1
    sink.notify_checkpoint_complete(2)
    assert committer.calls == ["pv/0/1", "pv/0/2"] and committer.output("pv") == recs(1, 2)


def test_completion_commits_only_transactions_up_to_that_checkpoint():
    committer = RecordingCommitter()
    sink = sink_with(committer)
    for k in (1, 2, 3):
        sink.process_batch(recs(k))
        sink.snapshot_state(k)
    sink.notify_checkpoint_complete(2)
    assert committer.calls == ["pv/0/1", "pv/0/2"] and sink.pending_transactions == ["pv/0/3"]


def test_empty_transactions_are_not_created():
    sink = sink_with(RecordingCommitter())
    assert sink.snapshot_state(1) == {}


def test_restore_commits_pending_transactions_of_the_completed_checkpoint():
    committer = RecordingCommitter()
    before = sink_with(committer)
    before.process_batch(recs(1))
    before.snapshot_state(1)
    before.notify_checkpoint_complete(1)  # committed
    before.process_batch(recs(2))
    state = before.snapshot_state(2)  # checkpoint 2 completes, but the task dies before the notify
    before.process_batch(recs(3))  # staged after 2: lost with the task, replayed by the source

    after = sink_with(committer)
    after.restore_state(state)
    assert committer.output("pv") == recs(1, 2)
    assert after.pending_transactions == [] and after.num_staged == 0


def test_state_written_before_staging_commits_its_records_from_the_state():
    committer = RecordingCommitter()
    sink = sink_with(committer)
    sink.restore_state({"pending": [{"txn": "pv/0/3", "checkpoint": 3, "records": recs(7)}]})
    assert committer.output("pv") == recs(7)


def test_restore_before_open_commits_on_open():
    committer = RecordingCommitter()
    sink = CollectSink("pv")
    sink.restore_state({"pending": [{"txn": "pv/1/4", "checkpoint": 4, "records": recs(9)}]})
    assert committer.calls == []
    sink.open(make_ctx(committer=committer, keyed=False))
    assert committer.output("pv") == recs(9)


def test_commit_is_idempotent_by_transaction_id():
    committer = RecordingCommitter()
    sink = sink_with(committer)
    sink.process_batch(recs(1))
    state = sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    sink_with(committer).restore_state(state)  # restore re-commits txn pv/0/1
    sink_with(committer, subtask=1).restore_state(state)  # and so does another subtask after rescaling
    assert committer.calls == ["pv/0/1"] * 3
    assert committer.output("pv") == recs(1)
    sink.notify_checkpoint_complete(1)  # a duplicate notification commits nothing new
    assert committer.calls == ["pv/0/1"] * 3


def test_without_checkpointing_end_input_commits_the_open_transaction():
    committer = RecordingCommitter()
    sink = sink_with(committer, subtask=2, checkpointing=False)
    sink.process_batch(recs(1, 2))
    assert sink.end_input() == []
    assert committer.calls == ["pv/2/final"] and committer.output("pv") == recs(1, 2)


def test_with_checkpointing_end_input_commits_what_arrived_after_the_final_checkpoint():
    # input ends only after the final checkpoint completed; what arrived after its barrier (with
    # unaligned checkpoints: its channel state) is committed under an id derived from it
    committer = RecordingCommitter()
    sink = sink_with(committer)
    sink.process_batch(recs(1))
    sink.snapshot_state(5)  # the final checkpoint: pending txn 5
    sink.process_batch(recs(2))  # replayed channel state, processed after the snapshot
    sink.end_input()
    assert committer.calls == ["pv/0/5", "pv/0/end-after-5"]
    assert committer.output("pv") == recs(1, 2)
    sink.notify_checkpoint_complete(5)  # late notification: nothing twice
    assert committer.output("pv") == recs(1, 2)


def test_end_input_commits_the_final_transaction_even_with_nothing_open():
    # on Ray the end of partition can reach the sink before the final checkpoint's notification;
    # before the fix the pending transaction was committed at end of input only if records had
    # arrived after the final barrier, otherwise it stayed staged when the job ended (lost)
    committer = RecordingCommitter()
    sink = sink_with(committer)
    sink.process_batch(recs(1, 2))
    sink.snapshot_state(5)
    sink.end_input()
    assert committer.calls == ["pv/0/5"] and committer.output("pv") == recs(1, 2)
    assert sink.pending_transactions == []


@pytest.mark.parametrize("bad", ["", "a/b", 3, None])
def test_sink_name_must_be_a_plain_non_empty_string(bad):
    with pytest.raises(ValueError, match="CollectSink name must be a non-empty string"):
        CollectSink(bad)


# ------------------------------------------------------------------ model-based


from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402


class SinkTwoPhaseCommit(RuleBasedStateMachine):
    """A replaying source feeds the sink; checkpoints are taken, completed (with or without the
    notification arriving), aborted; the task crashes and restores from the latest completed
    checkpoint. Committed output must always be a duplicate-free prefix of the input, and exactly
    the prefix covered by the latest completed checkpoint right after a restore."""

    def __init__(self) -> None:
        super().__init__()
        self.committer = RecordingCommitter()
        self.sink = sink_with(self.committer)
        self.offset = 0  # next record the source emits
        self.next_id = 1
        self.taken: dict[int, tuple[dict, int]] = {}  # id -> (sink state, source offset)
        self.completed = 0  # latest completed checkpoint id (0 = none)

    @rule(n=st.integers(0, 4))
    def stage(self, n):
        self.sink.process_batch([{"v": v} for v in range(self.offset, self.offset + n)])
        self.offset += n

    @rule()
    def snapshot(self):
        self.taken[self.next_id] = (self.sink.snapshot_state(self.next_id), self.offset)
        self.next_id += 1

    @precondition(lambda self: any(k > self.completed for k in self.taken))
    @rule(data=st.data(), notify=st.booleans())
    def complete(self, data, notify):
        k = data.draw(st.sampled_from(sorted(k for k in self.taken if k > self.completed)))
        self.completed = k
        if notify:
            self.sink.notify_checkpoint_complete(k)

    @precondition(lambda self: self.taken)
    @rule(data=st.data())
    def abort(self, data):
        k = data.draw(st.sampled_from(sorted(self.taken)))
        if k != self.completed:
            self.sink.notify_checkpoint_aborted(k)

    @rule()
    def crash_and_restore(self):
        self.sink = sink_with(self.committer)
        self.taken = {k: v for k, v in self.taken.items() if k <= self.completed}
        if self.completed:
            state, self.offset = self.taken[self.completed]
            self.sink.restore_state(state)
        else:
            self.offset = 0
        assert self.committed_values() == list(range(self.offset))

    def committed_values(self):
        return sorted(r["v"] for r in self.committer.output("pv"))

    @invariant()
    def committed_is_a_duplicate_free_prefix_covered_by_a_completed_checkpoint(self):
        values = self.committed_values()
        assert values == list(range(len(values)))
        covered = self.taken[self.completed][1] if self.completed else 0
        assert len(values) <= covered


SinkTwoPhaseCommit.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestSinkTwoPhaseCommit = SinkTwoPhaseCommit.TestCase
TestSinkTwoPhaseCommit.pytestmark = [pytest.mark.slow]  # a long stateful run


def test_collect_committer_keeps_staged_transactions_invisible_until_committed():
    from runtime.jobmaster.committer.collect import CollectCommitter, UnknownTransactionError

    committer = CollectCommitter()
    committer.stage("pv", "pv/0/1", recs(1, 2))
    committer.stage("pv", "pv/0/2", recs(3))
    assert committer.output("pv") == [] and committer.staged_transactions("pv") == ["pv/0/1", "pv/0/2"]
    committer.commit("pv", "pv/0/1")
    committer.commit("pv", "pv/0/1")  # idempotent
    assert committer.output("pv") == recs(1, 2) and committer.duplicate_commits == 1
    assert committer.staged_transactions("pv") == ["pv/0/2"]
    with pytest.raises(UnknownTransactionError, match="pv/0/7.*never staged"):
        committer.commit("pv", "pv/0/7")


def test_collect_committer_aborts_lingering_stages_between_the_restored_checkpoint_and_the_next_id():
    from runtime.jobmaster.committer.collect import CollectCommitter

    committer = CollectCommitter()
    for txn in ("pv/0/3", "pv/0/4", "pv/1/5", "pv/0/7"):
        committer.stage("pv", txn, recs(1))
    committer.stage("other", "other/0/6", recs(2))
    committer.stage("other", "other/0/end-after-3", recs(3))  # not a checkpoint's: left alone
    # restored checkpoint 3 (its sinks commit txns <= 3); the new attempt's ids start at 7
    assert committer.abort_lingering(3, 7) == ["other/0/6", "pv/0/4", "pv/1/5"]
    assert committer.staged_transactions("pv") == ["pv/0/3", "pv/0/7"]
    assert committer.staged_transactions("other") == ["other/0/end-after-3"]
    assert committer.aborted_transactions == 3
    committer.commit("pv", "pv/0/3")  # what the restored checkpoint holds still commits
    assert committer.output("pv") == recs(1)


def test_collect_committer_replaces_a_lingering_stage_and_refuses_to_restage_a_committed_id():
    from runtime.jobmaster.committer.collect import CollectCommitter, TransactionConflictError

    committer = CollectCommitter()
    committer.stage("pv", "pv/0/2", recs(1))  # an attempt that failed before checkpoint 2 completed
    committer.stage("pv", "pv/0/2", recs(1, 2))  # the attempt that replayed those records
    committer.commit("pv", "pv/0/2")
    assert committer.output("pv") == recs(1, 2)
    with pytest.raises(TransactionConflictError, match="pv/0/2.*already committed"):
        committer.stage("pv", "pv/0/2", recs(3))
    assert committer.output("pv") == recs(1, 2)


def test_collect_committer_takes_arrow_batches_and_reads_them_back_as_records():
    import pyarrow as pa

    from runtime.jobmaster.committer.collect import CollectCommitter

    committer = CollectCommitter()
    committer.stage("pv", "pv/0/1", pa.RecordBatch.from_pylist(recs(1, 2)))  # as the Ray committer gets them
    committer.commit("pv", "pv/1/1", pa.RecordBatch.from_pylist(recs(3)))
    committer.commit("pv", "pv/0/1")
    assert committer.records("pv", "pv/0/1") == recs(1, 2)
    assert committer.output("pv") == recs(3, 1, 2) and committer.output("pv") == recs(3, 1, 2)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_sink_chained_into_its_source_task_commits_everything(checkpointing: bool):
    """A sink in the source's own task (generate -> map -> sink, all chained): the source task
    must end its operators' input like any task. Going straight to end of partition would leave the
    sink uncommitted without checkpointing, and the output silently lost."""
    from runtime import StreamEnvironment

    env = StreamEnvironment(parallelism=2)
    if checkpointing:
        env.enable_checkpointing(interval=0.01)
    env.generate(count=25).map(lambda r: {"i": r["i"]}).sink_to(CollectSink("o"))
    assert env.get_job_graph("chained-sink").stages_in_committer
    result = env.execute("chained-sink", executor="sim", seed=3)
    assert sorted(r["i"] for r in result.output("o")) == list(range(25))


def test_collect_committer_names_the_newest_checkpoint_it_committed_output_of():
    from runtime.jobmaster.committer.collect import CollectCommitter, CommittedOutput, transaction_checkpoint

    committer = CollectCommitter()
    assert committer.latest_committed() is None
    committer.commit("pv", "pv/0/final", recs(1))  # no checkpointing: no checkpoint
    assert committer.latest_committed() is None
    for txn in ("pv/0/3", "pv/1/7", "pv/0/5"):
        committer.stage("pv", txn, recs(2))
        committer.commit("pv", txn)
    committer.stage("pv", "pv/0/9", recs(3))  # staged, invisible: not output
    assert committer.latest_committed() == CommittedOutput(7, "pv/1/7")
    committer.commit("other", "other/2/end-after-8", recs(4))
    assert committer.latest_committed() == CommittedOutput(8, "other/2/end-after-8")
    assert [transaction_checkpoint(t) for t in ("a/0/12", "a/0/end-after-4", "a/0/final")] == [12, 4, None]
    # SparkSink's file-name transactions
    assert [transaction_checkpoint(t) for t in ("my-sink-1-7-0a1b2c3d", "my-sink-0-end-after-9", "my-sink-2-final")] \
        == [7, 9, None]


def test_a_discarding_sink_stages_commits_and_keeps_nothing():
    from operators import DiscardingSink

    committer = RecordingCommitter()
    sink = DiscardingSink()
    sink.open(make_ctx(committer=committer, subtask=0, checkpointing=True, keyed=False))
    assert sink.process_batch(recs(1, 2)) == [] and sink.process_columns(pa.RecordBatch.from_pylist(recs(3))) == []
    assert sink.snapshot_state(1) == {}
    sink.notify_checkpoint_complete(1)
    assert sink.end_input() == []
    assert committer.staged == {} and committer.calls == []
    assert repr(sink) == "DiscardingSink('discard')"
    # a sink of its own, not a transactional one: no state, no pending-transaction bookkeeping
    assert isinstance(sink, Sink) and not isinstance(sink, CollectSink)
    assert sink.declared_state() == DeclaredState() and not sink.listens_for_completion()
    with pytest.raises(ValueError, match="DiscardingSink name must be a non-empty string"):
        DiscardingSink("a/b")


def test_sink_to_takes_a_users_own_sink():
    """`Sink` is what `sink_to` takes: a user's sink (here one keeping what it saw in the
    operator, a test double of an external system) ends a job as the built-in ones do."""
    from runtime import StreamEnvironment

    seen: list[dict] = []

    class Remembering(Sink):
        def process_batch(self, records):
            seen.extend(records)
            return []

    env = StreamEnvironment(parallelism=1)
    env.from_collection([{"x": i} for i in range(5)]).sink_to(Remembering("mine"))
    graph = env.get_job_graph("own-sink")
    assert graph.sink_names == ["mine"] and not graph.stages_in_committer
    result = env.execute("own-sink", executor="sim", seed=1)
    assert sorted(r["x"] for r in seen) == [0, 1, 2, 3, 4] and result.output("mine") == []


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_job_into_a_discarding_sink_runs_its_checkpoints_and_commits_nothing(checkpointing: bool):
    """The job's work and checkpoints happen (its keyed counts are all there), its output is
    dropped, and records whose field changes type (which a `CollectSink` refuses) pass."""
    from operators import DiscardingSink
    from runtime import StreamEnvironment

    env = StreamEnvironment(parallelism=2)
    if checkpointing:
        env.enable_checkpointing(interval=0.01)
    rows = [{"k": i % 3} for i in range(60)]
    (env.from_collection(rows, splits=2).key_by("k").count(name="count")
     .map(lambda r: {"n": r["count"] if r["count"] % 2 else str(r["count"])}).sink_to(DiscardingSink()))
    assert not env.get_job_graph("discard").stages_in_committer  # nothing to commit per checkpoint
    result = env.execute("discard", executor="sim", seed=3)
    assert result.output("discard") == [] and result.committer.transactions("discard") == []
    assert result.final_state["count"]["count"] == {0: 20, 1: 20, 2: 20}
    assert bool(result.completed_checkpoints) == checkpointing
