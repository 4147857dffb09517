"""`GraphBuilder`: an environment's recorded transformations as a `JobGraph` — the steps the
`runtime.api.environment` docstring lists."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cloudpickle

from operators.base import StreamOperator
from operators.sources import CollectionSource
from operators.two_input import TwoInputStreamOperator
from runtime.api.transformations import Exchange, Transformation
from runtime.core.graph import (
    JobEdge,
    JobGraph,
    JobGraphError,
    JobVertex,
    OperatorFactory,
)
from runtime.core.partitioners import Broadcast, Forward, KeyGroupHash, PartitionerSpec, Rebalance
from vocabulary.options import (
    RestartStrategy,
)

if TYPE_CHECKING:
    from runtime.api.environment import StreamEnvironment

#: restart strategy of a checkpointed job that did not set one: Flink's default since 1.19,
#: exponential delay (0.1 s, x1.5 per failure, +/-10 % jitter), bounded to 5 restarts in a row so
#: that a record a function always rejects fails the job within seconds (20 restarts took
#: 13.6 s on Ray), while faults an hour apart are each restarted afresh
DEFAULT_RESTART_STRATEGY = RestartStrategy.exponential_delay()


class GraphBuilder:
    """Turns an environment's logical nodes into a `JobGraph` (steps 1-5 of the module docstring)."""

    def __init__(self, env: StreamEnvironment, job_name: str) -> None:
        self.env = env
        self.job_name = job_name

    def build(self) -> JobGraph:
        env = self.env
        nodes = self._live_nodes()
        consumers: dict[int, list[Transformation]] = {n.id: [] for n in nodes}
        for node in nodes:
            for upstream, _ in node.inputs:
                consumers[upstream.id].append(node)
        parallelism = {n.id: n.parallelism or env.parallelism for n in nodes}
        for node in nodes:
            if parallelism[node.id] > env.max_parallelism:
                raise JobGraphError(
                    f"operator {node.display_name!r}: parallelism {parallelism[node.id]} exceeds "
                    f"max_parallelism {env.max_parallelism}"
                )
        names = self._operator_names(nodes)
        specs = {
            (node.id, i): self._partitioner(upstream, node, exchange, parallelism, names)
            for node in nodes
            for i, (upstream, exchange) in enumerate(node.inputs)
        }

        # chaining: head[node] is the first node of the chain node belongs to
        head: dict[int, Transformation] = {}
        chains: dict[int, list[Transformation]] = {}
        for node in nodes:
            if len(node.inputs) == 1 and self._chainable(node, consumers, specs[(node.id, 0)]):
                upstream = node.inputs[0][0]
                head[node.id] = head[upstream.id]
                chains[head[node.id].id].append(node)
            else:
                head[node.id] = node
                chains[node.id] = [node]

        vertices = [self._vertex(chain, parallelism, names) for h, chain in chains.items()]
        vertex_of = {n.id: names[head[n.id].id] for n in nodes}
        edges = [
            JobEdge(vertex_of[upstream.id], vertex_of[node.id], specs[(node.id, i)],
                    exchange is None or exchange.kind == "default",
                    exchange.output_tag if exchange is not None else None,
                    i if isinstance(node.operator, TwoInputStreamOperator) else 0)
            for node in nodes
            if head[node.id] is node
            for i, (upstream, exchange) in enumerate(node.inputs)
        ]
        self._check_picklable(nodes, names)
        return JobGraph(
            job_name=self.job_name,
            vertices=vertices,
            edges=edges,
            parallelism=env.parallelism,
            max_parallelism=env.max_parallelism,
            buffer_size=env.buffer_size,
            buffer_timeout=env.buffer_timeout,
            credits=env.credits,
            checkpoint_config=env.checkpoint_config,
            restart_strategy=self._restart_strategy(),
            high_availability=env.high_availability,
            buffer_debloat=env.buffer_debloat,
            latency_warmup=env.latency_warmup,
            auto_watermark_interval=env.auto_watermark_interval,
        )

    def _live_nodes(self) -> list[Transformation]:
        """Nodes with a path to a sink, in creation (= topological) order."""
        sinks = [n for n in self.env._nodes if n.sink_name is not None]
        if not sinks:
            raise JobGraphError(
                f"job {self.job_name!r} has no sink: add .sink_to(CollectSink(name)) to at least one stream"
            )
        seen: dict[int, Transformation] = {}
        stack = list(sinks)
        while stack:
            node = stack.pop()
            if node.id not in seen:
                seen[node.id] = node
                stack.extend(upstream for upstream, _ in node.inputs)
        return sorted(seen.values(), key=lambda n: n.id)

    @staticmethod
    def _operator_names(nodes: list[Transformation]) -> dict[int, str]:
        """Unique operator names. Sink names must be unique (error otherwise); names the user
        gave are claimed before generated ones; clashes get a `-2`, `-3`, ... suffix."""
        used: set[str] = set()
        names: dict[int, str] = {}
        sinks: set[str] = set()
        for node in nodes:
            if node.sink_name is not None:
                if node.sink_name in sinks:
                    raise JobGraphError(f"two sinks are named {node.sink_name!r}; sink names must be unique")
                sinks.add(node.sink_name)
        ordered = (
            [n for n in nodes if n.sink_name is not None]
            + [n for n in nodes if n.sink_name is None and n.user_name]
            + [n for n in nodes if n.sink_name is None and not n.user_name]
        )
        for node in ordered:
            base = node.display_name
            candidate, suffix = base, 2
            while candidate in used:
                candidate, suffix = f"{base}-{suffix}", suffix + 1
            used.add(candidate)
            names[node.id] = candidate
        return names

    def _partitioner(self, upstream: Transformation, node: Transformation, exchange: Exchange | None,
                     parallelism: dict[int, int], names: dict[int, str]) -> PartitionerSpec:
        same = parallelism[upstream.id] == parallelism[node.id]
        if exchange is None or exchange.kind == "default":
            return Forward() if same else Rebalance()
        if exchange.kind == "forward":
            if not same:
                raise JobGraphError(
                    f"forward() from {names[upstream.id]!r} (parallelism {parallelism[upstream.id]}) to "
                    f"{names[node.id]!r} (parallelism {parallelism[node.id]}) needs equal parallelism; "
                    "use rebalance() instead"
                )
            return Forward()
        if exchange.kind == "rebalance":
            return Rebalance()
        if exchange.kind == "broadcast":
            return Broadcast()
        assert exchange.kind == "hash" and exchange.key_selector is not None, exchange
        return KeyGroupHash(exchange.key_selector, self.env.max_parallelism,
                            operator=f"{exchange.label} -> {names[node.id]}")

    def _chainable(self, node: Transformation, consumers: dict[int, list[Transformation]], spec: PartitionerSpec) -> bool:
        upstream, exchange = node.inputs[0]
        return (
            self.env.chaining
            and (exchange is None or exchange.output_tag is None)  # a side output never chains
            and spec.is_forward
            and len(consumers[upstream.id]) == 1
            and upstream.sink_name is None
            and node.source is None
        )

    def _vertex(self, chain: list[Transformation], parallelism: dict[int, int], names: dict[int, str]) -> JobVertex:
        first = chain[0]
        source = first.source
        if source is not None and first.default_splits:
            source = copy.copy(source)
            source.num_splits = parallelism[first.id]  # type: ignore[attr-defined]
        operators = [n for n in chain if n.operator is not None]
        factories: list[Callable[[], StreamOperator]] = []
        for n in operators:
            template = copy.copy(n.operator)
            assert template is not None
            template.name = names[n.id]
            factories.append(OperatorFactory(template))
        return JobVertex(
            name=names[first.id],
            parallelism=parallelism[first.id],
            max_parallelism=self.env.max_parallelism,
            source=source,
            operator_factories=factories,
            operator_names=[names[n.id] for n in operators],
            sink_names=[n.sink_name for n in chain if n.sink_name is not None],
            default_splits=source is not None and first.default_splits,
            watermark_strategy=first.watermark_strategy,
        )

    @staticmethod
    def _check_picklable(nodes: list[Transformation], names: dict[int, str]) -> None:
        for node in nodes:
            obj: Any = node.operator if node.operator is not None else node.source
            if isinstance(obj, CollectionSource):
                continue  # rows of dicts; Arrow-checked when read. Pickling them all is costly
            try:
                cloudpickle.dumps(obj)
            except Exception as exc:
                raise JobGraphError(
                    f"operator {names[node.id]!r}: its function or object cannot be pickled, which is needed "
                    f"to ship it to tasks ({type(exc).__name__}: {exc}); avoid capturing locks, sockets, "
                    "open files or generators"
                ) from exc

    def _restart_strategy(self) -> RestartStrategy:
        if self.env.restart_strategy is not None:
            return self.env.restart_strategy
        return DEFAULT_RESTART_STRATEGY if self.env.checkpoint_config.enabled else RestartStrategy.no_restart()
