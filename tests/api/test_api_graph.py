"""JobGraph built by hand: validation errors, topological order, channel numbering."""

from __future__ import annotations

import pytest

from operators import CollectionSource, CollectSink
from operators.keyed import ColumnKeySelector
from operators.transforms import MapOperator
from runtime import JobGraph, JobGraphError
from runtime.core.graph import JobEdge, JobVertex, OperatorFactory
from runtime.core.partitioners import Broadcast, Forward, KeyGroupHash, Rebalance
from vocabulary.handles import TaskId


def source(name="src", p=1):
    return JobVertex(name, p, 128, source=CollectionSource([{"k": 1}]))


def op(name, p=1, sink=None, max_p=128):
    template = CollectSink(sink) if sink else MapOperator(lambda r: r, name=name)
    return JobVertex(name, p, max_p, operator_factories=[OperatorFactory(template)],
                     operator_names=[template.name], sink_names=[sink] if sink else [])


def graph(vertices, edges, **kw):
    return JobGraph("job", vertices, edges, **kw)


def test_vertices_are_put_in_topological_order_deterministically():
    a, b, c, s = source("a"), op("b"), op("c"), op("s", sink="out")
    g = graph([s, c, b, a], [JobEdge("a", "b", Forward()), JobEdge("a", "c", Forward()),
                             JobEdge("b", "s", Rebalance()), JobEdge("c", "s", Rebalance())])
    assert [v.name for v in g.vertices] == ["a", "c", "b", "s"]
    assert g.task_ids() == [TaskId("a", 0), TaskId("c", 0), TaskId("b", 0), TaskId("s", 0)]
    assert g.source_task_ids() == [TaskId("a", 0)] and g.sink_names == ["out"]


def test_cycle_is_rejected_naming_the_vertices():
    with pytest.raises(JobGraphError, match=r"cycle through vertices \['b', 'c'\]"):
        graph([source("a"), op("b"), op("c", sink="out")],
              [JobEdge("a", "b", Forward()), JobEdge("b", "c", Forward()), JobEdge("c", "b", Forward())])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: graph([source("a"), op("a", sink="o")], []), "two vertices are named 'a'"),
        (lambda: graph([source("a"), op("s", sink="o")], [JobEdge("a", "x", Forward())]),
         "refers to unknown vertex 'x'"),
        (lambda: graph([source("a", p=2), op("s", p=3, sink="o")], [JobEdge("a", "s", Forward())]),
         "forward edge 'a' -> 's' needs equal parallelism, got 2 and 3"),
        (lambda: graph([source("a"), op("s", sink="o")], [JobEdge("a", "s", "rebalance")]),
         "partitioner must be a PartitionerSpec"),
        (lambda: graph([source("a", p=0), op("s", sink="o")], [JobEdge("a", "s", Rebalance())]),
         "vertex 'a': parallelism must be an integer >= 1, got 0"),
        (lambda: graph([source("a"), op("s", p=4, max_p=2, sink="o")], [JobEdge("a", "s", Rebalance())]),
         "vertex 's': max_parallelism 2 is below its parallelism 4"),
        (lambda: graph([source("a"), op("s", sink="o")], [JobEdge("a", "s", KeyGroupHash(ColumnKeySelector("k"), 64))]),
         "hashes into 64 key groups but 's' has max_parallelism 128"),
        (lambda: graph([source("a"), source("b"), op("s", sink="o")],
                       [JobEdge("a", "b", Forward()), JobEdge("b", "s", Forward())]),
         "source vertex 'b' cannot have input edges"),
        (lambda: graph([source("a"), op("m"), op("s", sink="o")], [JobEdge("a", "s", Forward())]),
         "vertex 'm' has neither a source nor an input edge"),
        (lambda: graph([source("a"), op("m")], [JobEdge("a", "m", Forward())]),
         "job 'job' has no sink"),
        (lambda: graph([source("a"), op("s1", sink="o"), op("s2", sink="o")],
                       [JobEdge("a", "s1", Forward()), JobEdge("a", "s2", Forward())]),
         "two sinks are named 'o' \\(in 's1' and 's2'\\)"),
        (lambda: graph([source("a"), JobVertex("e", 1, 128), op("s", sink="o")],
                       [JobEdge("a", "e", Forward()), JobEdge("e", "s", Forward())]),
         "vertex 'e' has neither a source nor operators"),
        (lambda: graph([source("a"), JobVertex("e", 1, 128, operator_factories=[lambda: None]), op("s", sink="o")],
                       [JobEdge("a", "e", Forward()), JobEdge("e", "s", Forward())]),
         "1 operator factories but 0 operator names"),
        (lambda: graph([JobVertex("a", 1, 128, source="nope"), op("s", sink="o")], [JobEdge("a", "s", Forward())]),
         "source must be an operators.sources.Source"),
    ],
)
def test_malformed_graphs_are_rejected_with_a_named_error(build, message):
    with pytest.raises(JobGraphError, match=message):
        build()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("parallelism", 0, "parallelism must be an integer >= 1, got 0"),
        ("max_parallelism", 40000, r"max_parallelism must be an integer in \[1, 32768\], got 40000"),
        ("buffer_size", 0, "buffer_size must be an integer >= 1, got 0"),
        ("buffer_timeout", -1, "buffer_timeout must be a number >= 0"),
        ("credits", 0, "credits must be an integer >= 1, got 0"),
        ("job_name", "", "job_name must be a non-empty string"),
    ],
)
def test_graph_settings_are_validated(option, value, message):
    kwargs = {option: value}
    if option == "job_name":
        with pytest.raises(JobGraphError, match=message):
            JobGraph("", [source("a"), op("s", sink="o")], [JobEdge("a", "s", Forward())])
        return
    with pytest.raises(JobGraphError, match=message):
        graph([source("a"), op("s", sink="o")], [JobEdge("a", "s", Forward())], **kwargs)


def test_channel_numbering_per_edge_then_upstream_subtask_forward_connects_same_index():
    a, b = source("A", p=2), source("B", p=3)
    c = op("C", p=2, sink="o")
    fwd, hashed = JobEdge("A", "C", Forward()), JobEdge("B", "C", KeyGroupHash(ColumnKeySelector("k"), 128))
    g = graph([a, b, c], [fwd, hashed])
    assert g.input_channels("C", 1) == [(fwd, 1), (hashed, 0), (hashed, 1), (hashed, 2)]
    assert g.input_channels("C", 0) == [(fwd, 0), (hashed, 0), (hashed, 1), (hashed, 2)]
    assert g.output_channels("A", 1) == [(fwd, 1)]
    assert g.output_channels("B", 2) == [(hashed, 0), (hashed, 1)]
    assert g.input_channel_index("C", 1, hashed, 2) == 3
    assert g.input_channel_index("C", 1, fwd, 1) == 0
    with pytest.raises(ValueError, match="does not reach C\\[1\\]"):
        g.input_channel_index("C", 1, fwd, 0)
    assert g.inputs_of("C") == [fwd, hashed] and g.outputs_of("B") == [hashed]


def test_output_channels_are_grouped_per_edge_in_edge_order():
    a = source("A", p=2)
    r, bc = op("R", p=3, sink="o1"), op("BC", p=2, sink="o2")
    e1, e2 = JobEdge("A", "R", Rebalance()), JobEdge("A", "BC", Broadcast())
    g = graph([a, r, bc], [e1, e2])
    assert g.output_channels("A", 0) == [(e1, 0), (e1, 1), (e1, 2), (e2, 0), (e2, 1)]
    assert g.output_groups("A", 1) == [(e1, [0, 1, 2]), (e2, [0, 1])]
    assert g.input_channels("BC", 1) == [(e2, 0), (e2, 1)]


def test_queries_name_unknown_vertices_and_subtasks():
    g = graph([source("a"), op("s", sink="o")], [JobEdge("a", "s", Forward())])
    with pytest.raises(KeyError, match="no vertex named 'zz'"):
        g.inputs_of("zz")
    with pytest.raises(ValueError, match="vertex 's' has no subtask 1"):
        g.input_channels("s", 1)
    assert "a (p=1): Source: collection" in g.describe()


def test_channel_routes_pair_every_output_channel_with_its_input_channel():
    a, b = source("A", p=2), source("B", p=3)
    c = op("C", p=2, sink="o")
    fwd, hashed = JobEdge("A", "C", Forward()), JobEdge("B", "C", KeyGroupHash(ColumnKeySelector("k"), 128))
    g = graph([a, b, c], [fwd, hashed])
    routes = {(r.sender, r.output_channel): (r.receiver, r.input_channel) for r in g.channel_routes()}
    assert routes[(TaskId("A", 1), 0)] == (TaskId("C", 1), 0)
    assert routes[(TaskId("B", 2), 1)] == (TaskId("C", 1), 3)
    assert len(routes) == 2 + 3 * 2


def test_two_edges_between_the_same_vertices_are_two_channels_a_self_union():
    a, u = source("A", p=2), op("U", p=2, sink="o")
    first, second, third = JobEdge("A", "U", Forward()), JobEdge("A", "U", Forward()), JobEdge("A", "U", Rebalance())
    g = graph([a, u], [first, second, third])
    routes = [(r.sender, r.output_channel, r.receiver, r.input_channel) for r in g.channel_routes()]
    # U[1] has channels 0: first A[1], 1: second A[1], 2: third A[0], 3: third A[1]
    assert [(s, o, c) for s, o, rcv, c in routes if rcv == TaskId("U", 1)] == [
        (TaskId("A", 0), 3, 2), (TaskId("A", 1), 0, 0), (TaskId("A", 1), 1, 1), (TaskId("A", 1), 3, 3)]
    inputs = [(r.receiver, r.input_channel) for r in g.channel_routes()]
    assert len(inputs) == len(set(inputs)) == 2 * len(g.input_channels("U", 0))
