"""Unaligned (and aligned-with-timeout) checkpoints restored at another parallelism: the in-flight
data is redistributed (`runtime.jobmaster.restore.channel_rescale`) and the output and state stay exactly once."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from operators import CollectSink
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.core.graph import JobGraph
from runtime.jobmaster.restore.channel_rescale import ChannelRescaleError, redistribute_channel_state
from runtime.jobmaster.result import JobFailedError
from runtime.records.messages import Buffer
from runtime.sim.costs import CostModel
from runtime.sim.executor import SimExecutor
from runtime.verify.swarm import SCRATCH_DIR
from runtime.workloads.seeded import SumAndCountPerKey, multiset
from state.key_groups import key_group_for, subtask_for_key_group
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 23}", "v": i % 7} for i in range(600)]
MAX_PARALLELISM = 128


def job(storage: Path, source: int, keyed: int, sink: int, mode: str) -> StreamEnvironment:
    """source -hash-> count -(forward or rebalance)-> sink, small buffers and credits."""
    env = StreamEnvironment(parallelism=keyed, buffer_size=4, credits=1, buffer_timeout=0.0005)
    env.disable_chaining()  # the same vertices at every parallelism
    modes = {"unaligned": dict(unaligned=True), "timeout": dict(alignment_timeout=0.0)}
    env.enable_checkpointing(interval=0.001, storage=str(storage), retained=2, tolerable_failures=10**6,
                             max_concurrent=2, **modes[mode])
    env.set_restart_strategy(RestartStrategy.no_restart())
    stream = env.from_collection(ROWS, splits=4).set_parallelism(source)
    counted = stream.key_by("key").process(SumAndCountPerKey(), name="count")
    counted.sink_to(CollectSink("out")).set_parallelism(sink)
    return env


def slow(graph: JobGraph) -> CostModel:
    """Every task after the source is slow: backpressure, so checkpoints hold in-flight data."""
    return CostModel(slow_tasks={v.name: 30.0 for v in graph.vertices if not v.is_source})


def reference():
    env = StreamEnvironment(parallelism=1)
    env.from_collection(ROWS, splits=4).key_by("key").process(SumAndCountPerKey(), name="count") \
        .sink_to(CollectSink("out"))
    return env.execute("ref", executor="sim")


_REFERENCE = reference()


def in_flight_bytes(sim: SimExecutor) -> int:
    latest = sim.store.get_latest_checkpoint()
    assert latest is not None, "the crash came before any checkpoint completed"
    return sum(h.size for ack in latest.acks.values()
               for kind in ("input_channels", "output_channels") for h in ack.handles.get(kind, ()))


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
       after=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
       mode=st.sampled_from(["unaligned", "timeout"]), at=st.sampled_from([0.02, 0.05, 0.08]),
       seed=st.integers(0, 3))
# an edge whose exchange follows the parallelism: rebalance in the checkpoint, forward after it
@example(before=(1, 1, 2), after=(1, 1, 1), mode="unaligned", at=0.02, seed=0)
@example(before=(2, 2, 2), after=(1, 3, 2), mode="unaligned", at=0.05, seed=0)
@example(before=(1, 3, 1), after=(3, 1, 3), mode="timeout", at=0.02, seed=1)
@example(before=(3, 2, 1), after=(2, 3, 3), mode="unaligned", at=0.08, seed=2)
def test_rescaled_unaligned_checkpoint_is_exactly_once(before, after, mode, at, seed) -> None:
    with tempfile.TemporaryDirectory(dir=SCRATCH_DIR) as tmp:
        storage = Path(tmp)
        graph = job(storage, *before, mode).get_job_graph("job")
        crash = TaskCrash(task="count[0]", at=at)
        first = SimExecutor(graph, seed=seed, faults=FaultPlan.of(crash), costs=slow(graph))
        with pytest.raises(JobFailedError):
            first.run()
        assert in_flight_bytes(first) > 0, "the restored checkpoint holds no in-flight data"
        env = job(storage / "second", *after, mode).restore_from(str(storage), job_id="job")
        result = env.execute("job", executor="sim", seed=seed, committer=first.committer)
        assert multiset(result.output("out")) == multiset(_REFERENCE.output("out")), (before, after)
        assert result.final_state == _REFERENCE.final_state, (before, after)


# --------------------------------------------------------------------------- unit tests


def graph_of(source: int, keyed: int, sink: int, *, broadcast: bool = False) -> JobGraph:
    env = StreamEnvironment(parallelism=keyed)
    stream = env.from_collection(ROWS, splits=4).set_parallelism(source)
    counted = stream.key_by("key").process(SumAndCountPerKey(), name="count")
    (counted.broadcast() if broadcast else counted).sink_to(CollectSink("out")).set_parallelism(sink)
    return env.get_job_graph("job")


def buffer(ids: list[int]) -> Buffer:
    return Buffer.from_records([ROWS[i] for i in ids])


def ids_of(state) -> dict[int, dict[int, list[int]]]:
    return {subtask: {ch: [r["id"] for b in bs for r in b.to_records()] for ch, bs in inputs.items()}
            for subtask, (inputs, outputs) in state.items() if not outputs}


def owner(record_id: int, parallelism: int) -> int:
    return subtask_for_key_group(MAX_PARALLELISM, parallelism,
                                 key_group_for(ROWS[record_id]["key"], MAX_PARALLELISM))


@pytest.mark.parametrize("new", [1, 2, 3, 5])
def test_keyed_in_flight_records_reach_exactly_their_key_groups_new_owner(new: int) -> None:
    graph = graph_of(2, new, 1)
    count = next(v.name for v in graph.vertices if v.name.startswith("count"))
    source = next(v.name for v in graph.vertices if v.is_source)
    # at parallelism 3: count[d] received ids on channel u (from source[u]); source[u] still
    # holds ids for count[d] on its output channel d
    received = {d: {u: [i for i in range(40) if owner(i, 3) == d and i % 2 == u][:4] for u in range(2)}
                for d in range(3)}
    queued = {u: {d: [i for i in range(40, 120) if owner(i, 3) == d and i % 2 == u][:3] for d in range(3)}
              for u in range(2)}
    state = {count: {d: ({u: [buffer(ids)] for u, ids in by_u.items()}, {}) for d, by_u in received.items()},
             source: {u: ({}, {d: [buffer(ids)] for d, ids in by_d.items()}) for u, by_d in queued.items()}}
    out = redistribute_channel_state(graph, {count: 3, source: 2}, state)
    assert set(out) == {count}, "output state moves to the receivers"
    got = ids_of(out[count])
    everything = sorted(i for by_u in received.values() for ids in by_u.values() for i in ids) + sorted(
        i for by_d in queued.values() for ids in by_d.values() for i in ids)
    assert sorted(i for chs in got.values() for ids in chs.values() for i in ids) == sorted(everything)
    for subtask, channels in got.items():
        for channel, ids in channels.items():
            assert all(owner(i, new) == subtask for i in ids), (subtask, ids)
            sender = channel  # the hash edge's channels are numbered by upstream subtask
            assert all(i % 2 == sender for i in ids)
            for d in range(3):  # per old channel: the receiver's input state, then the sender's output
                old_channel = received[d][sender] + queued[sender][d]
                assert [i for i in ids if i in old_channel] == [i for i in old_channel if owner(i, new) == subtask]


def test_rebalanced_in_flight_records_go_to_one_subtask_each() -> None:
    graph = graph_of(2, 3, 2)  # count (3) -> rebalance -> sink (2)
    sink = next(v.name for v in graph.vertices if v.name.startswith("Sink") or "out" in v.name
                and not v.name.startswith("count"))
    count = next(v.name for v in graph.vertices if v.name.startswith("count"))
    edge = graph.inputs_of(sink)[0]
    assert edge.partitioner.kind == "rebalance"
    state = {sink: {0: ({0: [buffer([1, 2])], 2: [buffer([3])]}, {}), 1: ({1: [buffer([4])]}, {})},
             count: {2: ({}, {1: [buffer([5, 6])]})}}
    graph_after = graph_of(2, 3, 1)
    sink_after = next(v.name for v in graph_after.vertices if v.name == sink)
    out = redistribute_channel_state(graph_after, {sink: 2, count: 3}, state)
    assert ids_of(out[sink_after]) == {0: {0: [1, 2], 1: [4], 2: [3, 5, 6]}}


def test_broadcast_in_flight_data_into_a_rescaled_receiver_is_refused() -> None:
    graph = graph_of(2, 2, 3, broadcast=True)
    sink = next(v.name for v in graph.vertices if not v.is_source and not v.name.startswith("count"))
    count = next(v.name for v in graph.vertices if v.name.startswith("count"))
    state = {sink: {0: ({1: [buffer([1])]}, {})}}
    with pytest.raises(ChannelRescaleError, match=rf"broadcast edge {count!r} -> {sink!r}.*parallelism from 2 to 3"):
        redistribute_channel_state(graph, {sink: 2, count: 2}, state, checkpoint_id=4)
    # the receiver keeps its parallelism: each keeps its own copy
    out = redistribute_channel_state(graph_of(2, 1, 3, broadcast=True), {sink: 3, count: 2},
                                     {sink: {2: ({1: [buffer([1])]}, {})}})
    assert ids_of(out[sink]) == {2: {0: [1]}}


def test_columnar_buffers_split_by_key_group_keep_their_schema() -> None:
    graph = graph_of(1, 2, 1)
    count = next(v.name for v in graph.vertices if v.name.startswith("count"))
    batch = pa.RecordBatch.from_pylist([ROWS[i] for i in range(20)])
    out = redistribute_channel_state(graph, {count: 1}, {count: {0: ({0: [Buffer.of(batch)]}, {})}})
    for subtask, (inputs, _) in out[count].items():
        for buffers in inputs.values():
            assert all(b.batch.schema == batch.schema for b in buffers)
            assert all(owner(r["id"], 2) == subtask for b in buffers for r in b.to_records())
