"""The job graph: vertices (chained operators), edges (partitioners), channel numbering.

Theory of operation
-------------------
`StreamEnvironment` (runtime/api/environment.py) turns the user's streams into a `JobGraph`; executors turn
every vertex into `parallelism` tasks. A `JobVertex` is one operator chain: an optional source at
its head, then `operator_factories` (called afresh for every task attempt, so no two tasks ever
share an operator instance). A `JobEdge` connects two vertices through a `PartitionerSpec`.

Channel numbering (both executors rely on it; it is the only place it is defined):

* input channels of subtask `s` of vertex `v`: for each input edge of `v` in edge order, for each
  upstream subtask `u` in order — except that a forward edge connects `u == s` only. A task with
  inputs `[forward A (p=2), hash B (p=3)]` as subtask 1 has channels `0: A[1]`, `1: B[0]`,
  `2: B[1]`, `3: B[2]`.
* output channels of subtask `s`: for each output edge in edge order, for each downstream subtask
  in order (forward: only `s`), i.e. grouped per edge; the partitioner of an edge with `k`
  channels at this sender addresses them `0..k-1`.
* the two ends of every channel: `JobGraph.channel_routes()` (what both executors wire up). Edges
  are told apart by identity, never by their end vertices: a stream unioned with itself has two
  edges between the same vertices, hence two channels per pair of subtasks.

`JobGraph` validates itself on construction (a hand-built graph is checked as thoroughly as one
the API built): names, parallelism, edges, forward-edge parallelism, cycles, sinks. Errors are
`JobGraphError`s naming the vertex or option.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from operators.base import StreamOperator
from operators.sources import Source
from runtime.core.partitioners import KeyGroupHash, PartitionerSpec
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from vocabulary.options import CheckpointConfig, RestartStrategy

#: Flink's upper bound for max parallelism (key groups are 15-bit)
MAX_MAX_PARALLELISM = 1 << 15


class JobGraphError(ValueError):
    """A malformed topology or option; the message names the operator/vertex/option."""


#: the longest job name: it is a directory name (255 bytes on most file systems)
JOB_NAME_MAX = 200
JOB_NAME_RULE = (f"a job name is its checkpoint directory's name: 1 to {JOB_NAME_MAX} printable characters, "
                 "no '/' or '\\', not '.' or '..', no leading or trailing whitespace")


def check_job_name(name: object, what: str = "job name") -> str:
    """`name` if it can be a job's directory name; else JobGraphError naming it, what is wrong and the rule.

    Printable (`str.isprintable`) excludes control characters (a newline), format characters (bidi
    overrides, zero-width spaces: a name that displays as another) and separators but the space.
    """
    if not isinstance(name, str):
        raise JobGraphError(f"invalid {what} {name!r}: it is a {type(name).__name__}, not a str; {JOB_NAME_RULE}")
    why = None
    if not name:
        why = "is empty"
    elif name in (".", ".."):
        why = f"is {name!r}"
    elif len(name) > JOB_NAME_MAX:
        why = f"is {len(name)} characters long"
    elif "/" in name or "\\" in name:
        why = f"contains {'/' if '/' in name else chr(92)!r}"
    elif not name.isprintable():
        odd = next(c for c in name if not c.isprintable())
        why = f"contains the non-printable character U+{ord(odd):04X}"
    elif name != name.strip():
        why = "starts or ends with whitespace"
    if why is not None:
        raise JobGraphError(f"invalid {what} {name!r}: it {why}; {JOB_NAME_RULE}")
    return name


class OperatorFactory:
    """Creates a fresh operator from a template: a deep copy per call.

    The copy gives every task attempt its own operator — and its own copy of function *objects*
    such as a `KeyedProcessFunction` instance (plain functions and lambdas are shared; Python does
    not copy them). Picklable whenever the template is (with cloudpickle).
    """

    __slots__ = ("template",)

    def __init__(self, template: StreamOperator) -> None:
        self.template = template

    def __call__(self) -> StreamOperator:
        return copy.deepcopy(self.template)

    @property
    def name(self) -> str:
        return self.template.name

    def __getstate__(self) -> StreamOperator:
        return self.template

    def __setstate__(self, template: StreamOperator) -> None:
        self.template = template

    def __repr__(self) -> str:
        return f"OperatorFactory({self.template.name!r})"


@dataclass
class JobVertex:
    """One operator chain, run as `parallelism` tasks.

    Attributes:
        name: unique in the graph; also the task id prefix (`TaskId(name, subtask)`).
        parallelism: number of tasks.
        max_parallelism: number of key groups of this vertex's keyed state.
        source: the source at the head of the chain, or None for a vertex with inputs.
        operator_factories: the chained operators after the source, in chain order.
        operator_names: their names (unique in the graph), parallel to `operator_factories`.
        sink_names: names of the sinks (`operators.sinks.Sink`) in this chain.
        default_splits: the source's number of splits was not given and follows the parallelism
            (`from_collection(rows)`, `generate(...)`); a restore keeps the checkpoint's instead.
        watermark_strategy: the source's `WatermarkStrategy` (per-split timestamps and
            watermarks), or None.
    """

    name: str
    parallelism: int
    max_parallelism: int
    source: Source | None = None
    operator_factories: list[Callable[[], StreamOperator]] = field(default_factory=list)
    operator_names: list[str] = field(default_factory=list)
    sink_names: list[str] = field(default_factory=list)
    default_splits: bool = False
    watermark_strategy: Any = None

    @property
    def is_source(self) -> bool:
        return self.source is not None

    @property
    def is_rate_limited(self) -> bool:
        """A source that reads at a rate (records fall due over time), not as fast as it can."""
        return self.source is not None and getattr(self.source, "rate", None) is not None

    def task_ids(self) -> list[TaskId]:
        return [TaskId(self.name, s) for s in range(self.parallelism)]

    @property
    def listens_for_completion(self) -> bool:
        """Whether an operator of the chain must hear of every completion at once
        (`StreamOperator.listens_for_completion`: a user listener, a sink committing its own
        transactions; not a `CollectSink`, whose transactions the global committer commits); an
        operator not built from a template counts as listening."""
        for factory in self.operator_factories:
            template = getattr(factory, "template", None)
            if template is None or template.listens_for_completion():
                return True
        return False

    @property
    def stages_in_committer(self) -> bool:
        """Whether a sink of the chain stages its transactions in the job's committer
        (`CollectSink.staged_in_committer`), so each completed checkpoint has something to commit
        there; an operator not built from a template counts as staging."""
        for factory in self.operator_factories:
            template = getattr(factory, "template", None)
            if template is None or getattr(template, "staged_in_committer", False):
                return True
        return False

    @property
    def needs_watermarks(self) -> bool:
        """Whether the chain makes or uses event time: a source strategy, or an operator whose
        `needs_watermarks()` says so (timestamp assigners, timers, windows)."""
        if self.watermark_strategy is not None:
            return True
        return any(getattr(getattr(f, "template", None), "needs_watermarks", _no)() for f in self.operator_factories)

    @property
    def chain_description(self) -> str:
        """Flink-style `"Source: collection -> map -> Sink: pv"`."""
        head = [f"Source: {self.source.name}"] if self.source is not None else []
        return " -> ".join(head + self.operator_names)


@dataclass(frozen=True, eq=False)
class JobEdge:
    """`source` vertex -> `target` vertex through `partitioner` (vertex names).

    `follows_parallelism`: no exchange was asked for, so the partitioner follows the parallelism
    (forward when equal, rebalance otherwise): a checkpoint taken at other parallelism may have
    had the other one (`runtime.jobmaster.restore.channel_rescale` reads its channels so).
    `output_tag`: the edge carries the side output of that name of the source vertex's last
    operator (`operators.side_outputs`), not its main output.
    `input_index`: which logical input of the target's first operator the edge feeds (0 but for
    an operator with several inputs; a union's edges all feed its one input).
    """

    source: str
    target: str
    partitioner: PartitionerSpec
    follows_parallelism: bool = False
    output_tag: str | None = None
    input_index: int = 0

    @property
    def is_forward(self) -> bool:
        return self.partitioner.is_forward

    def __repr__(self) -> str:
        kind = getattr(self.partitioner, "kind", self.partitioner)
        side = f", side output {self.output_tag!r}" if self.output_tag is not None else ""
        return f"JobEdge({self.source!r} -[{kind}{side}]-> {self.target!r})"


@dataclass(frozen=True)
class ChannelRoute:
    """One channel: output channel `output_channel` of `sender` feeds input channel
    `input_channel` of `receiver`."""

    sender: TaskId
    output_channel: int
    receiver: TaskId
    input_channel: int


@dataclass(eq=False)
class JobGraph:
    """A validated job graph; `vertices` end up in a deterministic topological order.

    Raises:
        JobGraphError: on construction, for any malformed vertex, edge or option.
    """

    job_name: str
    vertices: list[JobVertex]
    edges: list[JobEdge]
    parallelism: int = 1
    max_parallelism: int = 128
    buffer_size: int = 256
    buffer_timeout: float = 0.01
    credits: int = 8
    checkpoint_config: CheckpointConfig | None = None
    restart_strategy: RestartStrategy | None = None
    #: `checkpoint.io.recovery.HighAvailabilityConfig`, or None (standalone)
    high_availability: Any = None
    #: `vocabulary.debloat.BufferDebloatConfig`, or None (buffers keep `buffer_size`)
    buffer_debloat: Any = None
    #: seconds of stamps a sink task leaves out of its latency histogram, from the earliest
    #: `created_at` it saw (`StreamEnvironment.set_latency_warmup`; 0: every record)
    latency_warmup: float = 0.0
    #: seconds between periodic watermark emissions (`StreamEnvironment.set_auto_watermark_interval`)
    auto_watermark_interval: float = 0.2

    def __post_init__(self) -> None:
        validate_settings(
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            buffer_size=self.buffer_size,
            buffer_timeout=self.buffer_timeout,
            credits=self.credits,
        )
        check_latency_warmup(self.latency_warmup)
        if not isinstance(self.job_name, str) or not self.job_name:
            raise JobGraphError(f"job_name must be a non-empty string, got {self.job_name!r}")
        self._by_name: dict[str, JobVertex] = {}
        for vertex in self.vertices:
            _validate_vertex(vertex)
            if vertex.name in self._by_name:
                raise JobGraphError(f"two vertices are named {vertex.name!r}; vertex names must be unique")
            self._by_name[vertex.name] = vertex
        self._inputs: dict[str, list[JobEdge]] = {v.name: [] for v in self.vertices}
        self._outputs: dict[str, list[JobEdge]] = {v.name: [] for v in self.vertices}
        for edge in self.edges:
            self._validate_edge(edge)
            self._outputs[edge.source].append(edge)
            self._inputs[edge.target].append(edge)
        self.vertices = self._topological_order()
        self._validate_topology()
        check_watermark_interval(self.auto_watermark_interval)
        #: the job has event time: sources emit watermarks (at least `+inf` when they end) and
        #: every task combines and forwards them (`runtime.core.task_time`); without it none travel
        self.watermarks = any(v.needs_watermarks for v in self.vertices)

    # ------------------------------------------------------------------ validation

    def _validate_edge(self, edge: JobEdge) -> None:
        for end in (edge.source, edge.target):
            if end not in self._by_name:
                raise JobGraphError(f"edge {edge!r} refers to unknown vertex {end!r}")
        if not isinstance(edge.partitioner, PartitionerSpec):
            raise JobGraphError(f"edge {edge!r}: partitioner must be a PartitionerSpec, got {edge.partitioner!r}")
        src, dst = self._by_name[edge.source], self._by_name[edge.target]
        if edge.partitioner.is_forward and src.parallelism != dst.parallelism:
            raise JobGraphError(
                f"forward edge {edge.source!r} -> {edge.target!r} needs equal parallelism, got "
                f"{src.parallelism} and {dst.parallelism} (use rebalance() to change parallelism)"
            )
        if isinstance(edge.input_index, bool) or not isinstance(edge.input_index, int) or edge.input_index < 0:
            raise JobGraphError(f"edge {edge!r}: input_index must be an integer >= 0, got {edge.input_index!r}")
        if edge.output_tag is not None and (not isinstance(edge.output_tag, str) or not src.operator_factories):
            raise JobGraphError(f"edge {edge!r}: a side output needs a tag name and a vertex with operators")
        if isinstance(edge.partitioner, KeyGroupHash) and edge.partitioner.max_parallelism != dst.max_parallelism:
            raise JobGraphError(
                f"edge {edge.source!r} -> {edge.target!r} hashes into {edge.partitioner.max_parallelism} key "
                f"groups but {edge.target!r} has max_parallelism {dst.max_parallelism}"
            )

    def _topological_order(self) -> list[JobVertex]:
        """Kahn's algorithm; ties broken by the given vertex order (deterministic)."""
        indegree = {v.name: len(self._inputs[v.name]) for v in self.vertices}
        position = {v.name: i for i, v in enumerate(self.vertices)}
        ready = sorted((n for n, d in indegree.items() if d == 0), key=position.__getitem__)
        order: list[JobVertex] = []
        while ready:
            name = ready.pop(0)
            order.append(self._by_name[name])
            for edge in self._outputs[name]:
                indegree[edge.target] -= 1
                if indegree[edge.target] == 0:
                    ready.append(edge.target)
                    ready.sort(key=position.__getitem__)
        if len(order) != len(self.vertices):
            stuck = [v.name for v in self.vertices if indegree[v.name] > 0]
            raise JobGraphError(f"the job graph has a cycle through vertices {stuck}")
        return order

    def _validate_topology(self) -> None:
        for vertex in self.vertices:
            inputs = self._inputs[vertex.name]
            if vertex.source is not None and inputs:
                raise JobGraphError(f"source vertex {vertex.name!r} cannot have input edges")
            if vertex.source is None and not inputs:
                raise JobGraphError(f"vertex {vertex.name!r} has neither a source nor an input edge")
        sinks: dict[str, str] = {}
        for vertex in self.vertices:
            for sink in vertex.sink_names:
                if sink in sinks:
                    raise JobGraphError(
                        f"two sinks are named {sink!r} (in {sinks[sink]!r} and {vertex.name!r}); sink names must be unique"
                    )
                sinks[sink] = vertex.name
        if not sinks:
            raise JobGraphError(
                f"job {self.job_name!r} has no sink: add .sink_to(CollectSink(name)) to at least one stream"
            )

    # ------------------------------------------------------------------ queries

    def vertex(self, name: str) -> JobVertex:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no vertex named {name!r}; vertices: {list(self._by_name)}") from None

    @property
    def source_vertices(self) -> list[JobVertex]:
        return [v for v in self.vertices if v.source is not None]

    @property
    def sink_names(self) -> list[str]:
        return [s for v in self.vertices for s in v.sink_names]

    @property
    def stages_in_committer(self) -> bool:
        """Whether any sink of the job stages its transactions in the committer
        (`JobVertex.stages_in_committer`): else a completed checkpoint has nothing to commit."""
        return any(v.stages_in_committer for v in self.vertices)

    @property
    def checkpointing_enabled(self) -> bool:
        return self.checkpoint_config is not None and self.checkpoint_config.interval is not None

    def task_ids(self) -> list[TaskId]:
        """Every task, vertex by vertex in topological order."""
        return [t for v in self.vertices for t in v.task_ids()]

    def source_task_ids(self) -> list[TaskId]:
        return [t for v in self.source_vertices for t in v.task_ids()]

    def inputs_of(self, name: str) -> list[JobEdge]:
        """Input edges of vertex `name`, in edge order."""
        self.vertex(name)
        return list(self._inputs[name])

    def outputs_of(self, name: str) -> list[JobEdge]:
        """Output edges of vertex `name`, in edge order."""
        self.vertex(name)
        return list(self._outputs[name])

    def input_channels(self, vertex: str, subtask: int) -> list[tuple[JobEdge, int]]:
        """`(edge, upstream_subtask)` per input channel of `vertex[subtask]`, by channel index."""
        self._check_subtask(vertex, subtask)
        channels: list[tuple[JobEdge, int]] = []
        for edge in self._inputs[vertex]:
            if edge.is_forward:
                channels.append((edge, subtask))
            else:
                channels.extend((edge, u) for u in range(self._by_name[edge.source].parallelism))
        return channels

    def channel_inputs(self, vertex: str, subtask: int) -> list[int]:
        """Per input channel of `vertex[subtask]`, the logical input it feeds (`JobEdge.input_index`)."""
        return [edge.input_index for edge, _ in self.input_channels(vertex, subtask)]

    def output_channels(self, vertex: str, subtask: int) -> list[tuple[JobEdge, int]]:
        """`(edge, downstream_subtask)` per output channel of `vertex[subtask]`, grouped per edge."""
        return [(edge, d) for edge, targets in self.output_groups(vertex, subtask) for d in targets]

    def output_groups(self, vertex: str, subtask: int) -> list[tuple[JobEdge, list[int]]]:
        """Per output edge: the downstream subtasks its channels `0..k-1` lead to."""
        self._check_subtask(vertex, subtask)
        return [
            (edge, [subtask] if edge.is_forward else list(range(self._by_name[edge.target].parallelism)))
            for edge in self._outputs[vertex]
        ]

    def channel_routes(self) -> list[ChannelRoute]:
        """Every channel of the job: which output channel of which task feeds which input channel."""
        inputs: dict[tuple[JobEdge, TaskId, int], int] = {}
        for vertex in self.vertices:
            for receiver in vertex.task_ids():
                for index, (edge, upstream) in enumerate(self.input_channels(vertex.name, receiver.subtask)):
                    inputs[(edge, receiver, upstream)] = index
        routes: list[ChannelRoute] = []
        for vertex in self.vertices:
            for sender in vertex.task_ids():
                for index, (edge, downstream) in enumerate(self.output_channels(vertex.name, sender.subtask)):
                    receiver = TaskId(edge.target, downstream)
                    routes.append(ChannelRoute(sender, index, receiver, inputs[(edge, receiver, sender.subtask)]))
        return routes

    def input_channel_index(self, vertex: str, subtask: int, edge: JobEdge, upstream_subtask: int) -> int:
        """The input channel of `vertex[subtask]` that `edge` from `upstream_subtask` arrives on.

        Raises:
            ValueError: that upstream subtask does not connect to `vertex[subtask]` through `edge`.
        """
        for index, (e, u) in enumerate(self.input_channels(vertex, subtask)):
            if e is edge and u == upstream_subtask:
                return index
        raise ValueError(f"{edge!r} from subtask {upstream_subtask} does not reach {vertex}[{subtask}]")

    def _check_subtask(self, vertex: str, subtask: int) -> None:
        parallelism = self.vertex(vertex).parallelism
        if not 0 <= subtask < parallelism:
            raise ValueError(f"vertex {vertex!r} has no subtask {subtask} (parallelism {parallelism})")

    def __iter__(self) -> Iterator[JobVertex]:
        return iter(self.vertices)

    def describe(self) -> str:
        """One line per vertex and edge, for logs and the CLI."""
        lines = [f"job {self.job_name!r}"]
        for v in self.vertices:
            lines.append(f"  {v.name} (p={v.parallelism}): {v.chain_description}")
            lines.extend(f"    -[{e.partitioner.kind}{'' if e.output_tag is None else f' side output {e.output_tag!r}'}]-> "
                         f"{e.target}" for e in self._outputs[v.name])
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"JobGraph({self.job_name!r}, vertices={[v.name for v in self.vertices]}, edges={len(self.edges)})"


def _validate_vertex(vertex: JobVertex) -> None:
    if not isinstance(vertex.name, str) or not vertex.name:
        raise JobGraphError(f"vertex name must be a non-empty string, got {vertex.name!r}")
    _check_int(f"vertex {vertex.name!r}: parallelism", vertex.parallelism, 1)
    _check_int(f"vertex {vertex.name!r}: max_parallelism", vertex.max_parallelism, 1, MAX_MAX_PARALLELISM)
    if vertex.max_parallelism < vertex.parallelism:
        raise JobGraphError(
            f"vertex {vertex.name!r}: max_parallelism {vertex.max_parallelism} is below its parallelism "
            f"{vertex.parallelism}"
        )
    if len(vertex.operator_factories) != len(vertex.operator_names):
        raise JobGraphError(
            f"vertex {vertex.name!r}: {len(vertex.operator_factories)} operator factories but "
            f"{len(vertex.operator_names)} operator names"
        )
    if vertex.source is not None and not isinstance(vertex.source, Source):
        raise JobGraphError(f"vertex {vertex.name!r}: source must be an operators.sources.Source, got {vertex.source!r}")
    if vertex.source is None and not vertex.operator_factories:
        raise JobGraphError(f"vertex {vertex.name!r} has neither a source nor operators")


def _check_int(what: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise JobGraphError(f"{what} must be an integer {allowed}, got {value!r}")


def _no() -> bool:
    return False


def check_watermark_interval(seconds: float) -> None:
    """Raises: JobGraphError: `seconds` is not a finite number > 0."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < float("inf"):
        raise JobGraphError(f"auto_watermark_interval must be a finite number > 0 (seconds), got {seconds!r}")


def check_latency_warmup(seconds: float) -> None:
    """Raises: JobGraphError: `seconds` is not a finite number >= 0."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < float("inf"):
        raise JobGraphError(f"latency_warmup must be a finite number >= 0 (seconds), got {seconds!r}")


def validate_settings(
    *, parallelism: int, max_parallelism: int, buffer_size: int, buffer_timeout: float, credits: int
) -> None:
    """Check the environment-wide execution options.

    Raises:
        JobGraphError: naming the option, its value and the allowed range.
    """
    _check_int("parallelism", parallelism, 1)
    _check_int("max_parallelism", max_parallelism, 1, MAX_MAX_PARALLELISM)
    if max_parallelism < parallelism:
        raise JobGraphError(f"max_parallelism ({max_parallelism}) must be >= parallelism ({parallelism})")
    _check_int("buffer_size", buffer_size, 1)
    if isinstance(buffer_timeout, bool) or not isinstance(buffer_timeout, int | float) or not buffer_timeout >= 0:
        raise JobGraphError(f"buffer_timeout must be a number >= 0 (seconds), got {buffer_timeout!r}")
    _check_int("credits", credits, 1)
