"""StreamEnvironment/DataStream: chaining, names, partitioners chosen, validation, dispatch."""

from __future__ import annotations

import sys
import threading
import types

import cloudpickle
import pytest

from operators import CollectSink, KeyedProcessFunction
from operators.keyed import KeyedProcessOperator
from runtime import CheckpointingMode, JobGraphError, RestartStrategy, StreamEnvironment
from runtime.api.environment import DEFAULT_RESTART_STRATEGY
from runtime.core.partitioners import Broadcast, Forward, KeyGroupHash, Rebalance
from vocabulary.options import InvalidOptionError

ROWS = [{"app": f"a{i % 3}", "v": i} for i in range(12)]


class CountPerKey(KeyedProcessFunction):
    def __init__(self):
        self.opened = 0

    def open(self, ctx):
        self.opened += 1

    def process_element(self, record, ctx):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {"app": ctx.key, "count": count.value()}


def shape(graph):
    """[(vertex, parallelism, chained operator names)] and [(src, partitioner kind, dst)]."""
    return (
        [(v.name, v.parallelism, v.operator_names) for v in graph.vertices],
        [(e.source, e.partitioner.kind, e.target) for e in graph.edges],
    )


def test_forward_operators_chain_and_key_by_breaks_the_chain():
    env = StreamEnvironment(parallelism=2)
    counts = env.from_collection(ROWS).map(lambda r: {"app": r["app"]}).key_by("app").process(CountPerKey())
    counts.sink_to(CollectSink("pv"))
    vertices, edges = shape(env.get_job_graph("pv"))
    assert vertices == [("Source: collection", 2, ["map"]), ("keyed-process", 2, ["keyed-process", "Sink: pv"])]
    assert edges == [("Source: collection", "hash", "keyed-process")]


def test_rebalance_broadcast_parallelism_change_and_fan_out_break_chains():
    env = StreamEnvironment(parallelism=2)
    src = env.from_collection(ROWS)
    src.rebalance().map(lambda r: r).sink_to(CollectSink("a"))
    src.broadcast().filter(lambda r: True).sink_to(CollectSink("b"))
    src.map(lambda r: r, name="wide").set_parallelism(3).sink_to(CollectSink("c"))
    vertices, edges = shape(env.get_job_graph())
    assert vertices == [
        ("Source: collection", 2, []),
        ("map", 2, ["map", "Sink: a"]),
        ("filter", 2, ["filter", "Sink: b"]),
        ("wide", 3, ["wide"]),
        ("Sink: c", 2, ["Sink: c"]),
    ]
    assert edges == [
        ("Source: collection", "rebalance", "map"),
        ("Source: collection", "broadcast", "filter"),
        ("Source: collection", "rebalance", "wide"),
        ("wide", "rebalance", "Sink: c"),
    ]


def test_explicit_forward_chains_and_disable_chaining_splits_everything():
    env = StreamEnvironment(parallelism=2)
    env.from_collection(ROWS).forward().map(lambda r: r).sink_to(CollectSink("o"))
    assert shape(env.get_job_graph())[0] == [("Source: collection", 2, ["map", "Sink: o"])]
    env.disable_chaining()
    vertices, edges = shape(env.get_job_graph())
    assert [v[0] for v in vertices] == ["Source: collection", "map", "Sink: o"]
    assert {kind for _, kind, _ in edges} == {"forward"}


def test_operator_names_are_unique_and_deterministic():
    env = StreamEnvironment()
    s = env.from_collection(ROWS).map(lambda r: r).map(lambda r: r).map(lambda r: r, name="map-2")
    s.union(env.from_collection(ROWS)).sink_to(CollectSink("o"))
    g = env.get_job_graph()
    names = [n for v in g.vertices for n in v.operator_names]
    assert [v.name for v in g.vertices] == ["Source: collection", "Source: collection-2", "union"]
    assert names == ["map", "map-3", "map-2", "union", "Sink: o"]
    assert [v.name for v in env.get_job_graph().vertices] == [v.name for v in g.vertices]


def test_union_feeds_one_vertex_from_several_edges():
    env = StreamEnvironment(parallelism=2)
    a = env.from_collection(ROWS[:5])
    b = env.from_collection(ROWS[5:]).set_parallelism(1)
    a.union(b.rebalance()).sink_to(CollectSink("o"))
    g = env.get_job_graph()
    (union,) = [v for v in g.vertices if v.name == "union"]
    assert [e.partitioner.kind for e in g.inputs_of("union")] == ["forward", "rebalance"]
    assert len(g.input_channels("union", 1)) == 2  # forward a[1], rebalance b[0]
    assert union.operator_names == ["union", "Sink: o"]


def test_implicit_edges_forward_on_equal_parallelism_rebalance_otherwise():
    env = StreamEnvironment(parallelism=2)
    env.from_collection(ROWS).set_parallelism(1).map(lambda r: r).sink_to(CollectSink("o"))
    (edge,) = env.get_job_graph().edges
    assert isinstance(edge.partitioner, Rebalance)
    env2 = StreamEnvironment(parallelism=2)
    env2.from_collection(ROWS).key_by(lambda r: r["v"] % 2).count().sink_to(CollectSink("o"))
    (edge,) = env2.get_job_graph().edges
    assert isinstance(edge.partitioner, KeyGroupHash) and edge.partitioner.max_parallelism == 128
    assert isinstance(Forward(), Forward) and isinstance(Broadcast(), Broadcast)


def test_sources_split_by_their_final_parallelism_unless_splits_given():
    env = StreamEnvironment(parallelism=2)
    env.from_collection(ROWS).set_parallelism(3).sink_to(CollectSink("a"))
    env.from_collection(ROWS, splits=5).sink_to(CollectSink("b"))
    env.generate(count=10).set_parallelism(4).sink_to(CollectSink("c"))
    counts = [(v.name, len(v.source.splits())) for v in env.get_job_graph().vertices if v.source]
    assert counts == [("Source: collection", 3), ("Source: collection-2", 5), ("Source: generator", 4)]


def test_operator_factories_create_fresh_instances_with_own_function_copies():
    env = StreamEnvironment()
    fn = CountPerKey()
    env.from_collection(ROWS).key_by("app").process(fn).sink_to(CollectSink("o"))
    (vertex,) = [v for v in env.get_job_graph().vertices if not v.source]
    first, second = vertex.operator_factories[0](), vertex.operator_factories[0]()
    assert isinstance(first, KeyedProcessOperator) and first is not second and first.fn is not second.fn
    assert first.fn is not fn and first.name == "keyed-process"
    sink_a, sink_b = vertex.operator_factories[1](), vertex.operator_factories[1]()
    sink_a.process_batch([{"x": 1}])
    assert sink_b.num_staged == 0 and sink_a.sink_name == "o" and sink_a.name == "Sink: o"


def test_job_graph_round_trips_through_cloudpickle():
    env = StreamEnvironment(parallelism=2)
    env.enable_checkpointing(0.5)
    env.from_collection(ROWS).map(lambda r: {**r, "w": 1}).key_by("app").count().sink_to(CollectSink("o"))
    clone = cloudpickle.loads(cloudpickle.dumps(env.get_job_graph("j")))
    assert [v.name for v in clone.vertices] == ["Source: collection", "count"]
    (mapper,) = clone.vertices[0].operator_factories
    assert mapper().fn({"v": 1}) == {"v": 1, "w": 1}
    assert clone.checkpoint_config.interval == 0.5


def test_count_knows_its_columns_and_key_by_checks_known_columns():
    env = StreamEnvironment()
    counts = env.from_collection(ROWS).key_by("app").count()
    assert counts.columns == ["app", "count"]
    counts.key_by("count")  # fine
    with pytest.raises(JobGraphError, match=r"key_by\('nope'\): unknown column 'nope'; the stream from operator "
                                            r"'filter' has columns \['app', 'v'\]"):
        env.from_collection(ROWS).filter(lambda r: True).key_by("nope")
    env.from_collection(ROWS).map(lambda r: r).key_by("anything")  # unknown until runtime
    gen = env.generate(count=3)
    assert gen.columns == ["i", "created_at"]
    with pytest.raises(JobGraphError, match="unknown column 'x'"):
        gen.key_by("x")


# ------------------------------------------------------------------ validation errors


def test_job_without_sink_is_an_error_but_a_dangling_stream_is_fine():
    env = StreamEnvironment()
    env.from_collection(ROWS).map(lambda r: r)
    with pytest.raises(JobGraphError, match="job 'j' has no sink: add .sink_to"):
        env.get_job_graph("j")
    env.from_collection(ROWS).sink_to(CollectSink("o"))
    assert [v.name for v in env.get_job_graph().vertices] == ["Source: collection"]  # dangling one dropped


def test_two_sinks_with_the_same_name_are_an_error():
    env = StreamEnvironment()
    s = env.from_collection(ROWS)
    s.sink_to(CollectSink("pv"))
    s.map(lambda r: r).sink_to(CollectSink("pv"))
    with pytest.raises(JobGraphError, match="two sinks are named 'pv'"):
        env.get_job_graph()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_parallelism_below_one_is_an_error(bad):
    with pytest.raises(JobGraphError, match=f"parallelism must be an integer >= 1, got {bad!r}"):
        StreamEnvironment(parallelism=bad)
    env = StreamEnvironment()
    with pytest.raises(JobGraphError, match=f"operator 'map': parallelism must be an integer >= 1, got {bad!r}"):
        env.from_collection(ROWS).map(lambda r: r).set_parallelism(bad)


def test_max_parallelism_below_parallelism_is_an_error():
    with pytest.raises(JobGraphError, match=r"max_parallelism \(4\) must be >= parallelism \(8\)"):
        StreamEnvironment(parallelism=8, max_parallelism=4)
    env = StreamEnvironment(max_parallelism=4)
    env.from_collection(ROWS).map(lambda r: r, name="big").set_parallelism(5).sink_to(CollectSink("o"))
    with pytest.raises(JobGraphError, match="operator 'big': parallelism 5 exceeds max_parallelism 4"):
        env.get_job_graph()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"buffer_size": 0}, "buffer_size must be an integer >= 1, got 0"),
        ({"buffer_timeout": -0.5}, "buffer_timeout must be a number >= 0"),
        ({"credits": 0}, "credits must be an integer >= 1, got 0"),
        ({"max_parallelism": 0}, "max_parallelism must be an integer in"),
    ],
)
def test_environment_options_out_of_range(kwargs, message):
    with pytest.raises(JobGraphError, match=message):
        StreamEnvironment(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"interval": -1}, "interval"),
        ({"interval": None}, "interval"),
        ({"interval": 1, "timeout": 0}, "timeout"),
        ({"interval": 1, "max_concurrent": 0}, "max_concurrent"),
        ({"interval": 1, "mode": CheckpointingMode.AT_LEAST_ONCE, "unaligned": True}, "unaligned"),
        ({"interval": 1, "mode": "sometimes"}, "mode"),
    ],
)
def test_checkpoint_options_out_of_range_name_the_option(kwargs, option):
    with pytest.raises(InvalidOptionError, match=f"invalid checkpoint option {option}="):
        StreamEnvironment().enable_checkpointing(**kwargs)


def test_unpicklable_function_is_an_error_naming_the_operator():
    lock = threading.Lock()
    env = StreamEnvironment()
    env.from_collection(ROWS).map(lambda r: (lock, r)[1], name="locked").sink_to(CollectSink("o"))
    with pytest.raises(JobGraphError, match="operator 'locked': its function or object cannot be pickled"):
        env.get_job_graph()


def test_keyed_process_function_must_be_one():
    ks = StreamEnvironment().from_collection(ROWS).key_by("app")
    with pytest.raises(JobGraphError, match="process: expected a KeyedProcessFunction instance, got function"):
        ks.process(lambda record, ctx: [record])
    with pytest.raises(JobGraphError, match=r"pass an instance, CountPerKey\(\), not the class"):
        ks.process(CountPerKey)

    class Empty(KeyedProcessFunction):
        pass

    with pytest.raises(JobGraphError, match="'counter': Empty does not implement process_element"):
        ks.process(Empty(), name="counter")


def test_forward_with_a_parallelism_change_is_an_error():
    env = StreamEnvironment(parallelism=2)
    env.from_collection(ROWS).forward().map(lambda r: r).set_parallelism(3).sink_to(CollectSink("o"))
    with pytest.raises(JobGraphError, match=r"forward\(\) from 'Source: collection' \(parallelism 2\) to 'map' "
                                            r"\(parallelism 3\) needs equal parallelism"):
        env.get_job_graph()


def test_bad_arguments_to_sources_sinks_and_transformations():
    env = StreamEnvironment()
    with pytest.raises(JobGraphError, match="row 0 is a int"):
        env.from_collection([1, 2])
    with pytest.raises(JobGraphError, match="rows must be a list of dicts, got dict"):
        env.from_collection({"a": 1})
    with pytest.raises(JobGraphError, match="splits must be an integer >= 1, got 0"):
        env.from_collection(ROWS, splits=0)
    with pytest.raises(JobGraphError, match="generate: rate must be a number > 0"):
        env.generate(rate=-3)
    with pytest.raises(JobGraphError, match="from_source: expected an operators.sources.Source"):
        env.from_source([1])
    stream = env.from_collection(ROWS)
    with pytest.raises(JobGraphError, match="map: expected a function, got int"):
        stream.map(3)
    with pytest.raises(JobGraphError, match=r"sink_to: expected a Sink \(CollectSink, DiscardingSink...\), got list"):
        stream.sink_to([])
    with pytest.raises(JobGraphError, match="name must be a non-empty string"):
        stream.name("")
    with pytest.raises(JobGraphError, match="set_restart_strategy: expected RestartStrategy"):
        env.set_restart_strategy("fixed")


def test_restart_strategy_defaults_follow_checkpointing():
    env = StreamEnvironment()
    env.from_collection(ROWS).sink_to(CollectSink("o"))
    assert env.get_job_graph().restart_strategy == RestartStrategy.no_restart()
    assert not env.get_job_graph().checkpointing_enabled
    env.enable_checkpointing(1.0)
    assert env.get_job_graph().restart_strategy == DEFAULT_RESTART_STRATEGY
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.5))
    assert env.get_job_graph().restart_strategy == RestartStrategy.fixed_delay(3, 0.5)


def test_from_source_name_and_sink_parallelism():
    from operators import CollectionSource

    env = StreamEnvironment(parallelism=2)
    src = CollectionSource(ROWS, splits=2)
    env.from_source(src, name="clicks").sink_to(CollectSink("o")).set_parallelism(1)
    g = env.get_job_graph()
    assert [(v.name, v.parallelism) for v in g.vertices] == [("Source: clicks", 2), ("Sink: o", 1)]
    assert src.name == "collection"  # the user's object is not renamed


# ------------------------------------------------------------------ execute


def test_execute_dispatches_to_the_sim_executor_with_kwargs(monkeypatch):
    import runtime.sim.executor as sim

    calls = []
    monkeypatch.setattr(sim, "run_job", lambda graph, **kw: calls.append((graph.job_name, kw)) or "result")
    env = StreamEnvironment()
    env.from_collection(ROWS).sink_to(CollectSink("o"))
    assert env.execute("pv", seed=7) == "result"
    assert calls == [("pv", {"seed": 7})]


def test_execute_dispatches_to_ray_lazily_and_rejects_unknown_executors(monkeypatch):
    fake = types.ModuleType("runtime.ray.executor")
    fake.run_job = lambda graph, **kw: ("ray", graph.job_name, kw)
    monkeypatch.setitem(sys.modules, "runtime.ray", types.ModuleType("runtime.ray"))
    monkeypatch.setitem(sys.modules, "runtime.ray.executor", fake)
    env = StreamEnvironment()
    env.from_collection(ROWS).sink_to(CollectSink("o"))
    assert env.execute("j", executor="ray", address="auto") == ("ray", "j", {"address": "auto"})
    with pytest.raises(JobGraphError, match=r"unknown executor 'spark'; registered executors: sim, ray"):
        env.execute(executor="spark")


def test_union_rejects_foreign_streams():
    env, other = StreamEnvironment(), StreamEnvironment()
    a = env.from_collection(ROWS)
    with pytest.raises(JobGraphError, match="union: expected DataStreams, got list"):
        a.union([1])
    with pytest.raises(JobGraphError, match="union: streams belong to different StreamEnvironments"):
        a.union(other.from_collection(ROWS))


def test_end_to_end_on_the_simulator_without_checkpointing():
    """Smoke test of the graph shapes through the real Task and simulator."""
    import pyarrow.compute as pc

    env = StreamEnvironment(parallelism=2, buffer_size=16)
    src = env.from_collection(ROWS * 10)
    src.filter(lambda r: r["v"] % 2 == 0).key_by("app").count().sink_to(CollectSink("counts"))
    src.rebalance().map_batches(lambda b: b.set_column(1, "v", pc.add(b.column("v"), 1))).set_parallelism(3) \
        .sink_to(CollectSink("plus1"))
    env.generate(count=30, fn=lambda i: {"k": i % 3, "n": 1}).key_by("k") \
        .reduce(lambda a, r: {**a, "n": a["n"] + r["n"]}).broadcast().flat_map(lambda r: [r, r]) \
        .sink_to(CollectSink("reduced"))
    result = env.execute("smoke", executor="sim", seed=3)
    counts = result.output("counts")
    assert len(counts) == 60 and {max(r["count"] for r in counts if r["app"] == a) for a in ("a0", "a1", "a2")} == {20}
    assert sorted(r["v"] for r in result.output("plus1")) == sorted(r["v"] + 1 for r in ROWS * 10)
    reduced = result.output("reduced")
    assert len(reduced) == 30 * 2 * 2 and max(r["n"] for r in reduced) == 10


@pytest.mark.parametrize(("name", "why"), [
    ("a/b", "contains '/'"),
    ("a\\b", "contains '\\\\'"),
    ("..", "is '..'"),
    (".", "is '.'"),
    ("", "is empty"),
    (" ", "starts or ends with whitespace"),
    (" pv", "starts or ends with whitespace"),
    ("\n", "contains the non-printable character U+000A"),
    ("pv\u202egnp.exe", "contains the non-printable character U+202E"),
    ("pv\u200b", "contains the non-printable character U+200B"),
    ("x" * 201, "is 201 characters long"),
])
@pytest.mark.parametrize("executor", ["sim", "ray"])
def test_a_job_name_that_is_no_plain_directory_name_is_refused_before_anything_starts(name: str, why: str,
                                                                                       executor: str) -> None:
    """A job's name is its checkpoint directory's name: refused up front, naming it and the rule (on
    Ray a '/' would otherwise kill the coordinator actor's constructor after Ray started)."""
    env = StreamEnvironment()
    env.from_collection([{"k": 1}]).sink_to(CollectSink("out"))
    with pytest.raises(JobGraphError) as refused:
        env.execute(name, executor=executor)  # Ray is not started: the name is checked first
    assert f"invalid job name {name!r}: it {why}" in str(refused.value), str(refused.value)
    assert "1 to 200 printable characters" in str(refused.value)
    with pytest.raises(JobGraphError, match=r"invalid job_id 'a/b': it contains '/'"):
        env.execute("fine", executor=executor, job_id="a/b")


@pytest.mark.parametrize("name", ["pv", "page views 2026", "ünï-cödé_job.v2", "x" * 200])
def test_plain_job_names_are_accepted(name: str) -> None:
    env = StreamEnvironment()
    env.from_collection([{"k": 1}]).sink_to(CollectSink("out"))
    assert env.execute(name, executor="sim").output("out") == [{"k": 1}]
