"""The public API: `StreamEnvironment`, `DataStream`, `KeyedStream`.

Theory of operation
-------------------
Calls on streams only *record* a logical plan: every `map`, `key_by(...).process`, `sink_to`...
adds a `_Node` (an operator template, its inputs and how each input is exchanged: forward,
rebalance, broadcast or hash by key group). Nothing runs until `env.execute()`, which builds a
`JobGraph` (`get_job_graph`) and hands it to an executor.

Building the graph:

1. keep only nodes that lead to a sink (a stream that goes nowhere is dropped, as in Flink);
2. fix every node's parallelism (its own or the environment's) and every input's partitioner:
   an explicit one, or forward when both sides have equal parallelism and rebalance otherwise;
3. chain: a node joins its input's chain when that is its only input, it is that input's only
   consumer, the edge is forward (so equal parallelism) and chaining is on. `key_by`,
   `rebalance`, `broadcast`, a parallelism change or a fan-out therefore start a new vertex;
4. name operators uniquely (`map`, `map-2`, ...; sources `Source: <name>`, sinks
   `Sink: <name>`); a vertex is named after the head of its chain;
5. validate: what the user can get wrong is checked as early as possible (a bad option when it is
   set, an unknown key column at `key_by`, a non-`KeyedProcessFunction` at `process`) and the
   rest when the graph is built (no sink, duplicate sink names, parallelism, unpicklable user
   functions — the Ray executor ships them with cloudpickle). Every error names the operator or
   option.
"""

from __future__ import annotations

import copy
import itertools
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from checkpoint.io.recovery import DEFAULT_OPERATION_TIMEOUT, HighAvailabilityConfig
from checkpoint.modes import parse_mode
from checkpoint.options import (
    DEFAULT_STORAGE_TIMEOUT,
    CheckpointConfig,
    CheckpointingMode,
    InvalidOptionError,
    RestartStrategy,
)
from operators.assign_timestamps import TimestampsAndWatermarksOperator
from operators.base import Record, StreamOperator
from operators.keyed import (
    ColumnKeySelector,
    CountOperator,
    KeyedProcessFunction,
    KeyedProcessOperator,
    ReduceOperator,
)
from operators.side_outputs import OutputTag
from operators.sinks import CollectSink
from operators.sources import CollectionSource, GeneratorSource, Source
from operators.transforms import (
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    PassThroughOperator,
)
from operators.two_input import TwoInputStreamOperator
from operators.watermarks import WatermarkStrategy
from operators.windows.assigners import WindowAssigner
from runtime.api.connected_streams import ConnectedStreams, IntervalJoin
from runtime.api.window_joins import CoGroupedStreams, JoinedStreams
from runtime.api.windowed import WindowedStream
from runtime.connectors.parquet import ParquetSource
from runtime.core.debloat import DEFAULT_TARGET, BufferDebloatConfig
from runtime.core.graph import (
    JobEdge,
    JobGraph,
    JobGraphError,
    JobVertex,
    OperatorFactory,
    check_job_name,
    check_latency_warmup,
    check_watermark_interval,
    validate_settings,
)
from runtime.core.partitioners import Broadcast, Forward, KeyGroupHash, PartitionerSpec, Rebalance
from runtime.jobmaster.registry import get_executor
from runtime.jobmaster.result import RestoredFrom
from runtime.verify.invariants import InvariantChecker

__all__ = [
    "DEFAULT_RESTART_STRATEGY",
    "DataStream",
    "DataStreamSink",
    "KeyedStream",
    "StreamEnvironment",
]

#: restart strategy of a checkpointed job that did not set one: Flink's default since 1.19,
#: exponential delay (0.1 s, x1.5 per failure, +/-10 % jitter), bounded to 5 restarts in a row so
#: that a record a function always rejects fails the job within seconds (20 restarts took
#: 13.6 s on Ray), while faults an hour apart are each restarted afresh
DEFAULT_RESTART_STRATEGY = RestartStrategy.exponential_delay()

#: the checkpoint-mode names `enable_checkpointing` takes (`checkpoint.modes`)
API_MODES = ("exactly-once", "at-least-once", "aligned", "unaligned", "aligned-timeout")


@dataclass(frozen=True, slots=True)
class _Exchange:
    """How a node's input is partitioned: 'forward', 'rebalance', 'broadcast', 'hash', or
    'default' (as for no exchange: forward at equal parallelism, rebalance otherwise);
    `output_tag`: the input is that side output of the upstream node."""

    kind: str
    key_selector: Callable[[Record], Any] | None = None
    label: str = ""
    output_tag: str | None = None


@dataclass(eq=False)
class _Node:
    """One logical operator of the plan (see the module docstring)."""

    id: int
    base_name: str
    inputs: list[tuple[_Node, _Exchange | None]] = field(default_factory=list)
    operator: StreamOperator | None = None
    source: Source | None = None
    #: the source's split count follows the node's parallelism (from_collection/generate default)
    default_splits: bool = False
    sink_name: str | None = None
    parallelism: int | None = None
    user_name: str | None = None
    #: output fields when known before running (None: decided at runtime)
    columns: list[str] | None = None
    #: a source's watermark strategy (per-split timestamps and watermarks)
    watermark_strategy: WatermarkStrategy | None = None

    @property
    def display_name(self) -> str:
        return self.user_name or self.base_name


def _check_callable(what: str, fn: Any) -> None:
    if not callable(fn):
        raise JobGraphError(f"{what}: expected a function, got {type(fn).__name__} {fn!r}")


def _check_parallelism(node: _Node, parallelism: Any) -> None:
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise JobGraphError(
            f"operator {node.display_name!r}: parallelism must be an integer >= 1, got {parallelism!r}"
        )


class DataStream:
    """A stream of dict records. Transformations return new streams; nothing runs until
    `env.execute()`."""

    def __init__(self, env: StreamEnvironment, node: _Node, exchange: _Exchange | None = None) -> None:
        self._env = env
        self._node = node
        self._exchange = exchange

    def _exchanged(self, kind: str, key_selector: Callable[[Record], Any] | None = None, label: str = "") -> _Exchange:
        """An exchange of this stream (of its side output, for a side-output stream)."""
        tag = self._exchange.output_tag if self._exchange is not None else None
        return _Exchange(kind, key_selector, label, tag)

    # ------------------------------------------------------------------ stateless transformations

    def _then(self, operator: StreamOperator, base_name: str, name: str | None,
              columns: list[str] | None = None) -> DataStream:
        node = self._env._add_node(base_name, inputs=[(self._node, self._exchange)], operator=operator,
                                   columns=columns, user_name=name)
        return DataStream(self._env, node)

    def map(self, fn: Callable[[Record], Record], name: str | None = None) -> DataStream:
        """One output record per input: `fn(record) -> dict`."""
        _check_callable(f"map {name or ''}".strip(), fn)
        return self._then(MapOperator(fn), "map", name)

    def filter(self, fn: Callable[[Record], Any], name: str | None = None) -> DataStream:
        """Keep the records for which `fn(record)` is truthy."""
        _check_callable(f"filter {name or ''}".strip(), fn)
        return self._then(FilterOperator(fn), "filter", name, self._node.columns)

    def flat_map(self, fn: Callable[[Record], Iterable[Record] | None], name: str | None = None) -> DataStream:
        """Zero or more output records per input: `fn(record)` returns an iterable of dicts."""
        _check_callable(f"flat_map {name or ''}".strip(), fn)
        return self._then(FlatMapOperator(fn), "flat_map", name)

    def map_batches(self, fn: Callable[[Any], Any], name: str | None = None) -> DataStream:
        """Vectorised map: `fn(pyarrow.RecordBatch) -> RecordBatch | Table`, once per buffer."""
        _check_callable(f"map_batches {name or ''}".strip(), fn)
        return self._then(MapBatchesOperator(fn), "map_batches", name)

    def union(self, *others: DataStream, name: str | None = None) -> DataStream:
        """Merge this stream with `others` (same records, no ordering guarantee across inputs)."""
        inputs = [(self._node, self._exchange)]
        for other in others:
            if not isinstance(other, DataStream):
                raise JobGraphError(f"union: expected DataStreams, got {type(other).__name__} {other!r}")
            if other._env is not self._env:
                raise JobGraphError("union: streams belong to different StreamEnvironments")
            inputs.append((other._node, other._exchange))
        columns = self._node.columns
        if any(other._node.columns != columns for other in others):
            columns = None
        node = self._env._add_node("union", inputs=inputs, operator=PassThroughOperator(), columns=columns,
                                   user_name=name)
        return DataStream(self._env, node)

    def connect(self, other: DataStream) -> ConnectedStreams:
        """Connect this stream (the first input) with `other` (the second) for one operator of two
        inputs: `.process(CoProcessFunction)`, `.map(CoMapFunction)`, `.flat_map(CoFlatMapFunction)`,
        or `.key_by(key_a, key_b).process(KeyedCoProcessFunction)` (already keyed streams connect
        keyed). Its barriers align across both inputs; its watermark is the lower of theirs.

        Raises:
            JobGraphError: `other` is not a DataStream of the same environment.
        """
        if not isinstance(other, DataStream):
            raise JobGraphError(f"connect: expected a DataStream, got {type(other).__name__} {other!r}")
        if other._env is not self._env:
            raise JobGraphError("connect: streams belong to different StreamEnvironments")
        keys = None
        if isinstance(self, KeyedStream) and isinstance(other, KeyedStream):
            keys = (self.key_selector, other.key_selector)
        return ConnectedStreams(self, other, keys)

    def _stream_of(self, node: _Node) -> DataStream:
        """The stream an operator added with `_add_node` emits."""
        return DataStream(self._env, node)
    def join(self, other: DataStream) -> JoinedStreams:
        """A window join with `other`: `.where(key).equal_to(key).window(assigner).apply(fn)`
        (`runtime.api.window_joins`)."""
        return JoinedStreams(self, other)

    def co_group(self, other: DataStream) -> CoGroupedStreams:
        """A window co-group with `other`: `.where(key).equal_to(key).window(assigner).apply(fn)`."""
        return CoGroupedStreams(self, other)

    # ------------------------------------------------------------------ partitioning

    def rebalance(self) -> DataStream:
        """Round-robin the records over the next operator's subtasks."""
        return DataStream(self._env, self._node, self._exchanged("rebalance"))

    def broadcast(self) -> DataStream:
        """Send every record to every subtask of the next operator."""
        return DataStream(self._env, self._node, self._exchanged("broadcast"))

    def forward(self) -> DataStream:
        """Subtask i feeds subtask i of the next operator (needs equal parallelism)."""
        return DataStream(self._env, self._node, self._exchanged("forward"))

    def key_by(self, key: str | Callable[[Record], Any]) -> KeyedStream:
        """Partition by key: a column name, or a function `record -> key`.

        Keys must be int, str, float, bool, bytes, None or tuples of those.

        Raises:
            JobGraphError: `key` names a column the stream is known not to have.
        """
        if isinstance(key, str):
            columns = self._node.columns
            if columns is not None and key not in columns:
                raise JobGraphError(
                    f"key_by({key!r}): unknown column {key!r}; the stream from operator "
                    f"{self._node.display_name!r} has columns {columns}"
                )
            return KeyedStream(self._env, self._node, ColumnKeySelector(key), key, self._exchange)
        _check_callable("key_by", key)
        return KeyedStream(self._env, self._node, key, None, self._exchange)

    # ------------------------------------------------------------------ event time and side outputs

    def assign_timestamps_and_watermarks(self, strategy: WatermarkStrategy, name: str | None = None) -> DataStream:
        """Give every record a timestamp and the stream watermarks, with `strategy` (a
        `WatermarkStrategy`), in every parallel instance; upstream watermarks are replaced.

        Raises:
            JobGraphError: `strategy` is not a `WatermarkStrategy`.
        """
        if not isinstance(strategy, WatermarkStrategy):
            raise JobGraphError(f"assign_timestamps_and_watermarks: expected a WatermarkStrategy, got "
                                f"{type(strategy).__name__} {strategy!r}")
        return self._then(TimestampsAndWatermarksOperator(strategy), "timestamps/watermarks", name,
                          self._node.columns)

    def get_side_output(self, tag: OutputTag) -> DataStream:
        """The records this stream's operator sent to side output `tag` (`ctx.output(tag, r)`).

        Raises:
            JobGraphError: `tag` is not an `OutputTag`, or this stream has no operator of its own.
        """
        if not isinstance(tag, OutputTag):
            raise JobGraphError(f"get_side_output: expected an OutputTag, got {type(tag).__name__} {tag!r}")
        if self._node.operator is None or self._exchange is not None:
            raise JobGraphError(f"get_side_output({tag.name!r}): call it on the stream an operator returned "
                                f"(process(...)), not on {self._node.display_name!r}"
                                + (" after a repartitioning" if self._exchange is not None else ""))
        return DataStream(self._env, self._node, _Exchange("default", output_tag=tag.name))

    # ------------------------------------------------------------------ properties

    def set_parallelism(self, parallelism: int) -> DataStream:
        """Run this stream's operator with `parallelism` subtasks.

        Raises:
            JobGraphError: `parallelism` is not an integer >= 1.
        """
        _check_parallelism(self._node, parallelism)
        self._node.parallelism = parallelism
        return self

    def name(self, name: str) -> DataStream:
        """Name this stream's operator (made unique with a numeric suffix if needed)."""
        if not isinstance(name, str) or not name.strip():
            raise JobGraphError(f"operator {self._node.display_name!r}: name must be a non-empty string, got {name!r}")
        self._node.user_name = name
        return self

    @property
    def columns(self) -> list[str] | None:
        """The record fields when known before running, else None."""
        return None if self._node.columns is None else list(self._node.columns)

    # ------------------------------------------------------------------ sinks

    def sink_to(self, sink: CollectSink) -> DataStreamSink:
        """Send the stream to `sink`; every parallel instance gets its own copy of it.

        Returns:
            A handle to set the sink's parallelism.

        Raises:
            JobGraphError: `sink` is not a `CollectSink` (or another sink operator).
        """
        if not isinstance(sink, CollectSink):
            raise JobGraphError(f"sink_to: expected a CollectSink, got {type(sink).__name__} {sink!r}")
        node = self._env._add_node(sink.name, inputs=[(self._node, self._exchange)], operator=sink,
                                   sink_name=sink.sink_name)
        return DataStreamSink(node)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._node.display_name!r})"


class DataStreamSink:
    """What `sink_to` returns: the sink's operator, whose parallelism can still be set."""

    def __init__(self, node: _Node) -> None:
        self._node = node

    @property
    def sink_name(self) -> str:
        assert self._node.sink_name is not None
        return self._node.sink_name

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        """Run the sink with `parallelism` subtasks (JobGraphError unless an integer >= 1)."""
        _check_parallelism(self._node, parallelism)
        self._node.parallelism = parallelism
        return self

    def __repr__(self) -> str:
        return f"DataStreamSink({self.sink_name!r})"


class KeyedStream(DataStream):
    """A stream partitioned by key; keyed operators see the key's state (`ctx.value_state` ...).

    Stateless transformations on a keyed stream are hash partitioned as well.
    """

    def __init__(self, env: StreamEnvironment, node: _Node, key_selector: Callable[[Record], Any],
                 key_column: str | None, upstream: _Exchange | None = None) -> None:
        label = f"key_by({key_column!r})" if key_column is not None else "key_by(<function>)"
        tag = upstream.output_tag if upstream is not None else None
        super().__init__(env, node, _Exchange("hash", key_selector, label, tag))
        self.key_selector = key_selector
        self.key_column = key_column

    def process(self, fn: KeyedProcessFunction, name: str | None = None) -> DataStream:
        """Run `fn.process_element(record, ctx)` per record with the record's key current.

        Raises:
            JobGraphError: `fn` is not a `KeyedProcessFunction` instance that implements
                `process_element`, or its `state_names` is not a collection of str.
        """
        what = f"process {name!r}" if name else "process"
        if isinstance(fn, type) and issubclass(fn, KeyedProcessFunction):
            raise JobGraphError(f"{what}: pass an instance, {fn.__name__}(), not the class {fn.__name__}")
        if not isinstance(fn, KeyedProcessFunction):
            raise JobGraphError(
                f"{what}: expected a KeyedProcessFunction instance, got {type(fn).__name__} {fn!r}"
            )
        if type(fn).process_element is KeyedProcessFunction.process_element:
            raise JobGraphError(f"{what}: {type(fn).__name__} does not implement process_element(record, ctx)")
        try:
            operator = KeyedProcessOperator(fn, self.key_selector)
        except TypeError as exc:
            raise JobGraphError(f"{what}: {exc}") from None
        return self._then(operator, "keyed-process", name)

    def interval_join(self, other: KeyedStream) -> IntervalJoin:
        """Join this keyed stream (left) with keyed stream `other` (right) on equal keys and event
        times within bounds: `.between(lower, upper).process(ProcessJoinFunction)` (Flink's
        interval join; both streams need timestamps).

        Raises:
            JobGraphError: `other` is not a KeyedStream of the same environment.
        """
        if not isinstance(other, KeyedStream):
            raise JobGraphError(f"interval_join: expected a KeyedStream (stream.key_by(key)), got "
                                f"{type(other).__name__} {other!r}")
        if other._env is not self._env:
            raise JobGraphError("interval_join: streams belong to different StreamEnvironments")
        return IntervalJoin(self, other)

    def reduce(self, fn: Callable[[Record, Record], Record], name: str | None = None) -> DataStream:
        """Running reduce per key: emits `acc = fn(acc, record)` for every record (the first
        record of a key is its initial `acc`)."""
        _check_callable(f"reduce {name or ''}".strip(), fn)
        return self._then(ReduceOperator(fn, self.key_selector), "reduce", name)

    def count(self, name: str | None = None) -> DataStream:
        """Running count per key: emits `{<key column>: key, "count": n}` for every record
        (`{"key": key, "count": n}` when keyed by a function)."""
        field_name = self.key_column if self.key_column is not None else "key"
        return self._then(CountOperator(self.key_selector, field_name), "count", name, [field_name, "count"])

    def window(self, assigner: WindowAssigner) -> WindowedStream:
        """Cut each key's records into windows (`TumblingEventTimeWindows.of(size)`, ...); finish
        with `.reduce`, `.aggregate`, `.process`, `.count()` or `.sum(field)` (`runtime.api.windowed`).

        Raises:
            JobGraphError: `assigner` is not a `WindowAssigner` instance.
        """
        return WindowedStream(self, assigner)


class StreamEnvironment:
    """Where a job is defined and executed.

    Args:
        parallelism: default number of subtasks per operator.
        max_parallelism: number of key groups (upper bound for rescaling keyed state).
        buffer_size: records per network buffer.
        buffer_timeout: seconds after which a partly filled buffer is sent anyway.
        credits: buffers in flight per channel (credit-based flow control).

    Raises:
        JobGraphError: an option is out of range (the message names it).
    """

    def __init__(self, parallelism: int = 1, *, max_parallelism: int = 128, buffer_size: int = 256,
                 buffer_timeout: float = 0.01, credits: int = 8) -> None:
        validate_settings(parallelism=parallelism, max_parallelism=max_parallelism, buffer_size=buffer_size,
                          buffer_timeout=buffer_timeout, credits=credits)
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.buffer_size = buffer_size
        self.buffer_timeout = buffer_timeout
        self.credits = credits
        self.checkpoint_config = CheckpointConfig()
        self.restart_strategy: RestartStrategy | None = None
        self.high_availability: HighAvailabilityConfig | None = None
        self.buffer_debloat: BufferDebloatConfig | None = None
        self.latency_warmup = 0.0
        self.auto_watermark_interval = 0.2
        self.chaining = True
        self._nodes: list[_Node] = []
        self._ids = itertools.count()
        #: Spark bridge hooks: checkpoint listeners and a checkpoint to start from (see below)
        self._checkpoint_listeners: list[Any] = []
        self._restore_from: tuple[Any, Any] | None = None
        #: `restore_from` found no completed checkpoint: why the next `execute` starts from the beginning
        self._started_over: str | None = None
        self._allow_non_restored_state = False

    # ------------------------------------------------------------------ configuration

    def enable_checkpointing(
        self,
        interval: float,
        mode: CheckpointingMode | str = CheckpointingMode.EXACTLY_ONCE,
        unaligned: bool = False,
        alignment_timeout: float | None = None,
        timeout: float = 600.0,
        min_pause: float = 0.0,
        max_concurrent: int = 1,
        tolerable_failures: int = 0,
        retained: int = 1,
        storage: str | None = None,
        storage_timeout: float = DEFAULT_STORAGE_TIMEOUT,
        max_aligned_bytes: int | None = None,
        state_backend: str = "memory",
        file_merging: bool = False,
        compaction_threshold: float | None = 2.0,
        max_file_size: int = 64 << 20,
    ) -> StreamEnvironment:
        """Checkpoint every `interval` seconds (see `checkpoint.options.CheckpointConfig`).

        `mode` is the guarantee (`CheckpointingMode`, "exactly-once", "at-least-once") or a mode
        name that also says how barriers travel: "aligned", "unaligned", "aligned-timeout" (needs
        `alignment_timeout`); see `checkpoint.modes`.

        Raises:
            InvalidOptionError: an option is out of range or options conflict (names the option).
        """
        if interval is None:
            raise InvalidOptionError("interval", interval, "must be a number of seconds > 0 to enable checkpointing")
        profile = parse_mode(mode, accepted=API_MODES)
        if profile.name in ("aligned", "aligned-timeout") and unaligned:
            raise InvalidOptionError("unaligned", unaligned, f"conflicts with mode={profile.name!r}")
        if profile.alignment_timeout and alignment_timeout is None:
            raise InvalidOptionError("alignment_timeout", None, f"mode {profile.name!r} needs one, in seconds")
        mode, unaligned = profile.mode, unaligned or profile.unaligned
        config = CheckpointConfig(
            interval=interval, mode=mode, unaligned=unaligned, alignment_timeout=alignment_timeout,
            timeout=timeout, min_pause=min_pause, max_concurrent=max_concurrent,
            tolerable_failures=tolerable_failures, retained=retained, storage=storage,
            storage_timeout=storage_timeout,
            max_aligned_bytes=max_aligned_bytes, state_backend=state_backend, file_merging=file_merging,
            compaction_threshold=compaction_threshold, max_file_size=max_file_size,
        )
        config.validate()
        self.checkpoint_config = config
        return self

    def set_high_availability(
        self, mode: str = "zookeeper", *, hosts: str | None = None, cluster_id: str = "default",
        session_timeout: float = 10.0, operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
    ) -> StreamEnvironment:
        """Make the checkpoint coordinator highly available (Flink's HA services): checkpoint ids and
        completed checkpoints live in the HA services and a standby coordinator takes over by
        leader election. `mode`: "zookeeper" or "standalone". With `hosts` both executors use
        that ZooKeeper server; without, the simulator plays ZooKeeper's role with its in-memory
        HA services (same interface, `runtime.sim.high_availability`) and Ray refuses.
        `operation_timeout`: seconds any one ZooKeeper call, connecting included, may take (5 s);
        an unreachable ZooKeeper fails the job within it, naming the hosts.

        Raises:
            ValueError: an unknown mode, a timeout <= 0, or "zookeeper" without `hosts` on Ray
                (checked when the job starts).
        """
        self.high_availability = HighAvailabilityConfig.of(mode, hosts=hosts, cluster_id=cluster_id,
                                                           session_timeout=session_timeout,
                                                           operation_timeout=operation_timeout)
        return self

    def set_buffer_debloating(
        self, enabled: bool = True, *, target: float = DEFAULT_TARGET, period: float = 0.01, samples: int = 10,
        threshold: float = 0.25, min_buffer_size: int = 1,
    ) -> StreamEnvironment:
        """Buffer debloating (Flink FLIP-183, off by default): every task sizes its in-flight
        input to `target` seconds of its measured throughput by announcing a smaller buffer size
        (records, at least `min_buffer_size`, at most `buffer_size`) to its senders, so aligned
        barriers wait behind, and unaligned checkpoints persist, less data under backpressure.
        See `runtime.core.debloat` for the options and why the default target is 100 ms.

        Raises:
            BufferDebloatError: an option out of range (the message names it).
        """
        if not enabled:
            self.buffer_debloat = None
            return self
        config = BufferDebloatConfig(target=target, period=period, samples=samples, threshold=threshold,
                                     min_buffer_size=min_buffer_size)
        config.validate()
        self.buffer_debloat = config
        return self

    def set_latency_warmup(self, seconds: float) -> StreamEnvironment:
        """Leave the first `seconds` of records out of the end-to-end latency figures
        (`JobMetrics.latencies`): a sink task does not measure a record stamped (`created_at`)
        less than `seconds` after the earliest stamp it saw, and counts it in
        `JobMetrics.latency_warmup_records` instead. For due-stamped sources
        (`generate(stamp="due")`), whose schedule runs from the moment each reader is created:
        the records due while the job is still starting up would otherwise read as latency.
        0 (the default) measures every record.

        Raises:
            JobGraphError: `seconds` is not a finite number >= 0.
        """
        check_latency_warmup(seconds)
        self.latency_warmup = float(seconds)
        return self

    def set_auto_watermark_interval(self, seconds: float) -> StreamEnvironment:
        """Emit watermarks every `seconds` of processing time (Flink's default: 0.2; virtual
        seconds on the simulator, wall seconds on Ray), in every source and
        `assign_timestamps_and_watermarks` instance.

        Raises:
            JobGraphError: `seconds` is not a finite number > 0.
        """
        check_watermark_interval(seconds)
        self.auto_watermark_interval = float(seconds)
        return self

    def set_restart_strategy(self, strategy: RestartStrategy) -> StreamEnvironment:
        """How failed jobs restart: `RestartStrategy.exponential_delay(...)`,
        `failure_rate(...)`, `fixed_delay(attempts, delay)` or `no_restart()`. Default:
        `DEFAULT_RESTART_STRATEGY` (exponential delay, 5 restarts in a row) when checkpointing,
        no restart otherwise.

        Raises:
            JobGraphError: `strategy` is not a `RestartStrategy`.
        """
        if not isinstance(strategy, RestartStrategy):
            raise JobGraphError(
                "set_restart_strategy: expected RestartStrategy.exponential_delay(...), .failure_rate(...), "
                f".fixed_delay(...) or .no_restart(), got {strategy!r}"
            )
        strategy.validate()
        self.restart_strategy = strategy
        return self

    def disable_chaining(self) -> StreamEnvironment:
        """Run every operator in its own vertex (more tasks, more channels; useful in tests)."""
        self.chaining = False
        return self

    # ------------------------------------------------------------------ sources

    def from_collection(self, rows: Sequence[Record], splits: int | None = None, name: str = "collection", *,
                        watermark_strategy: WatermarkStrategy | None = None) -> DataStream:
        """A stream of `rows` (dicts) cut into `splits` contiguous splits (default: the source's
        parallelism); a split replays by offset after a failure. `watermark_strategy`: stamp and
        watermark every split on its own (as Flink's sources do; the split's watermark is
        checkpointed with its offset).

        Raises:
            JobGraphError: a row is not a dict, `splits` < 1, or `watermark_strategy` is not a
                `WatermarkStrategy`.
        """
        if isinstance(rows, dict | str | bytes) or not isinstance(rows, Iterable):
            raise JobGraphError(f"from_collection: rows must be a list of dicts, got {type(rows).__name__}")
        try:
            source = CollectionSource(rows, 1 if splits is None else splits, name=name)
        except (TypeError, ValueError) as exc:
            raise JobGraphError(str(exc)) from exc
        return self._source(source, default_splits=splits is None, strategy=watermark_strategy)

    def from_source(self, source: Source, name: str | None = None, *,
                    watermark_strategy: WatermarkStrategy | None = None) -> DataStream:
        """A stream read from any `operators.sources.Source` (`watermark_strategy`: as for
        `from_collection`).

        Raises:
            JobGraphError: `source` is not a `Source`, or `watermark_strategy` not a `WatermarkStrategy`.
        """
        if not isinstance(source, Source):
            raise JobGraphError(f"from_source: expected an operators.sources.Source, got {type(source).__name__}")
        if name is not None:
            source = copy.copy(source)
            source.name = name
        return self._source(source, default_splits=False, strategy=watermark_strategy)

    def from_parquet(self, path: str | Sequence[str], *, split_by: str = "row_group", vectorised: bool = False,
                     columns: Sequence[str] | None = None, name: str = "parquet") -> DataStream:
        """A stream of the rows of Parquet files (`runtime.connectors.parquet.ParquetSource`): a
        file, a directory of them or a list, local or any `pyarrow.fs` URI. One split per row
        group (`split_by="row_group"`) or per file (`"file"`), whatever the parallelism, so a
        restore may rescale; each split replays by row offset. Rows are dicts (None where null),
        or Arrow batches with `vectorised=True`; `columns` reads only those.

        Raises:
            JobGraphError: a bad argument, a missing path, a file that is not Parquet or whose
                schema differs from the first file's (each names the file).
        """
        try:
            source = ParquetSource(path, split_by=split_by, vectorised=vectorised, columns=columns, name=name)
        except (OSError, ValueError) as exc:
            raise JobGraphError(str(exc)) from exc
        return self._source(source, default_splits=False)

    def generate(self, count: int | None = None, rate: float | None = None,
                 fn: Callable[[int], Record] | None = None, duration: float | None = None,
                 name: str = "generator", *, timestamp_field: str | None = "created_at",
                 batch_fn: Callable[[Any], Any] | None = None, stamp: str = "read",
                 watermark_strategy: WatermarkStrategy | None = None) -> DataStream:
        """A generator source: record i is `fn(i)` (default `{"i": i}`) plus `created_at`, the
        task clock when it was read (`stamp="read"`) or, with a rate, when it was due under the
        rate (`stamp="due"`: an open-loop stream, so a due record's wait to be read counts as
        latency); rate-limited to `rate` records/s over all splits when set.
        Vectorised: `batch_fn(indices)` returns the records of a numpy array of indices as one
        Arrow batch (or Table, or dict of columns), which flows on without dicts through the
        operators that take columns (`map_batches`, keyed `count`, `CollectSink`).
        See `GeneratorSource` for `count`/`duration`; `watermark_strategy` as for `from_collection`.

        Raises:
            JobGraphError: an argument is out of range.
        """
        try:
            source = GeneratorSource(count, rate, fn, duration, name=name, timestamp_field=timestamp_field,
                                     batch_fn=batch_fn, stamp=stamp)
        except ValueError as exc:
            raise JobGraphError(str(exc)) from exc
        return self._source(source, default_splits=True, strategy=watermark_strategy)

    def _source(self, source: Source, *, default_splits: bool, strategy: WatermarkStrategy | None = None) -> DataStream:
        if strategy is not None and not isinstance(strategy, WatermarkStrategy):
            raise JobGraphError(f"source {source.name!r}: watermark_strategy must be a WatermarkStrategy, got "
                                f"{type(strategy).__name__} {strategy!r}")
        columns = source.columns()
        node = self._add_node(f"Source: {source.name}", source=source, default_splits=default_splits,
                              columns=None if columns is None else list(columns), watermark_strategy=strategy)
        return DataStream(self, node)

    def _add_node(self, base_name: str, **kwargs: Any) -> _Node:
        node = _Node(next(self._ids), base_name, **kwargs)
        self._nodes.append(node)
        return node

    # ------------------------------------------------------------------ building and running

    def get_job_graph(self, job_name: str = "job") -> JobGraph:
        """Build and validate the job graph (what `execute` runs).

        Raises:
            JobGraphError: the topology or an option is invalid (names the operator/option).
        """
        return _GraphBuilder(self, job_name).build()

    def execute(self, job_name: str = "job", executor: str = "sim", **kwargs: Any) -> Any:
        """Build the job graph and run it to completion on `executor`.

        Args:
            job_name: the job's name (and default job id).
            executor: a registered executor (`runtime.jobmaster.registry`): "sim" (deterministic
                simulator; kwargs e.g. `seed`, `faults`) or "ray" (kwargs e.g. `address`).

        Returns:
            The executor's `JobResult` (`result.output(sink)`, `result.checkpoints`, ...).

        Raises:
            JobGraphError: invalid topology, options or job name (`check_job_name`), or an unknown
                executor; raised before anything starts.
            runtime.StateMismatchError: the job does not match the checkpoint it restores
                (`restore_from`), raised before anything runs.

        `invariants=True` (simulator) checks the protocol's invariants after every event
        (`runtime.verify.invariants.InvariantChecker`; pass one to bound the output by a reference).
        """
        check_job_name(job_name)  # before anything starts: it names the job's directories
        if kwargs.get("job_id") is not None:
            check_job_name(kwargs["job_id"], "job_id")
        run_job = get_executor(executor)
        graph = self.get_job_graph(job_name)
        if kwargs.get("invariants") is True:  # the per-event checker (an `ExecutionObserver`)
            kwargs["invariants"] = InvariantChecker()
        if self._restore_from is not None:
            kwargs.setdefault("restore_from", self._restore_from)
            if self._allow_non_restored_state:
                kwargs.setdefault("allow_non_restored_state", True)
        if self._started_over is not None and kwargs.get("committer") is not None:
            # starting over: no checkpoint of the earlier execution completed, so nothing it staged
            # can ever commit; this execution's checkpoint ids may repeat its ids, and would
            kwargs["committer"].abort_lingering(0, sys.maxsize)  # commit those stages a second time
        listeners = list(self._checkpoint_listeners)
        if listeners:
            kwargs.setdefault("checkpoint_listeners", listeners)
        try:
            result = run_job(graph, **kwargs)
        finally:
            for listener in listeners:
                listener.close()
        if self._started_over is not None:  # `restore_from` found no completed checkpoint
            result.restored_from = RestoredFrom(None, None, {}, self._started_over)
            result.restored_checkpoints.insert(0, None)
        return result

    # ------------------------------------------------------------------ Spark bridge hooks

    def land_checkpoints_to(self, spark: Any, target: str) -> StreamEnvironment:
        """Land every completed checkpoint of the next `execute` with Spark under `target`, in the
        background (`spark_bridge.landing`); `execute` waits for the landings before returning.
        Works with any checkpoint storage, in-memory included."""
        from spark_bridge.landing import CheckpointLander

        self._checkpoint_listeners.append(CheckpointLander(spark, target))
        return self

    def restore_from(self, checkpoints: str, job_id: str | None = None, checkpoint_id: int | None = None, *,
                     allow_non_restored_state: bool = False, run_id: str | None = None) -> StreamEnvironment:
        """Start the next `execute` from a checkpoint in a checkpoint directory (any parallelism:
        key groups and source splits are redistributed). Checkpoint storage is trusted input:
        restore from directories only you (or your jobs) write.

        The job must match the checkpoint: its operators, their keyed and operator state names,
        and its sources' splits (a source whose `splits` was not given takes the checkpoint's).
        `execute` checks this before anything runs and raises `runtime.StateMismatchError` naming
        every mismatch (see `runtime.jobmaster.restore_match`).

        Args:
            checkpoints: the checkpoint storage (a local path or `pyarrow.fs` URI), as given to
                `enable_checkpointing(storage=...)`; it must exist (it is never created).
            job_id: the job whose checkpoints to use (default: the only job there).
            checkpoint_id: which checkpoint (default: the newest run's newest that verifies;
                corrupt newer ones are skipped with a warning naming the file).
            allow_non_restored_state: drop the checkpoint's state that the job does not use (an
                operator it no longer has, a renamed state) with a warning listing it, instead of
                failing (Flink's `allowNonRestoredState`). Source splits must match even so: other
                splits would duplicate or lose input.
            run_id: the newest valid checkpoint of this run (`JobResult.run_id`, shown by
                `barrierflow checkpoints ls`) instead of the newest run's.

        Raises:
            checkpoint.io.tools.CheckpointToolError: no such directory, job, run or checkpoint, or
                none valid (the message names the path and every bad file).
        """
        from checkpoint.io.tools import NoCompletedCheckpointError, load_checkpoint
        from runtime.jobmaster.durable_committer import start_over

        self._started_over = None
        try:
            self._restore_from = load_checkpoint(checkpoints, job_id=job_id, checkpoint_id=checkpoint_id,
                                                 run_id=run_id)
        except NoCompletedCheckpointError as exc:
            self._restore_from = None
            self._started_over = start_over(exc)
        self._allow_non_restored_state = allow_non_restored_state
        return self

    def restore_from_landed(self, spark: Any, target: str, checkpoint_id: int | None = None) -> StreamEnvironment:
        """Start the next `execute` from checkpoint `checkpoint_id` (default: the latest) landed at
        `target` by the Spark bridge, instead of from scratch.

        Raises:
            spark_bridge.LandingError: nothing (or not that checkpoint) is landed there.
        """
        from spark_bridge.restore import checkpoint_from_landed

        self._restore_from = checkpoint_from_landed(spark, target, checkpoint_id)
        self._started_over = None
        self._allow_non_restored_state = False
        return self


class _GraphBuilder:
    """Turns an environment's logical nodes into a `JobGraph` (steps 1-5 of the module docstring)."""

    def __init__(self, env: StreamEnvironment, job_name: str) -> None:
        self.env = env
        self.job_name = job_name

    def build(self) -> JobGraph:
        env = self.env
        nodes = self._live_nodes()
        consumers: dict[int, list[_Node]] = {n.id: [] for n in nodes}
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
        head: dict[int, _Node] = {}
        chains: dict[int, list[_Node]] = {}
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

    def _live_nodes(self) -> list[_Node]:
        """Nodes with a path to a sink, in creation (= topological) order."""
        sinks = [n for n in self.env._nodes if n.sink_name is not None]
        if not sinks:
            raise JobGraphError(
                f"job {self.job_name!r} has no sink: add .sink_to(CollectSink(name)) to at least one stream"
            )
        seen: dict[int, _Node] = {}
        stack = list(sinks)
        while stack:
            node = stack.pop()
            if node.id not in seen:
                seen[node.id] = node
                stack.extend(upstream for upstream, _ in node.inputs)
        return sorted(seen.values(), key=lambda n: n.id)

    @staticmethod
    def _operator_names(nodes: list[_Node]) -> dict[int, str]:
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

    def _partitioner(self, upstream: _Node, node: _Node, exchange: _Exchange | None,
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

    def _chainable(self, node: _Node, consumers: dict[int, list[_Node]], spec: PartitionerSpec) -> bool:
        upstream, exchange = node.inputs[0]
        return (
            self.env.chaining
            and (exchange is None or exchange.output_tag is None)  # a side output never chains
            and spec.is_forward
            and len(consumers[upstream.id]) == 1
            and upstream.sink_name is None
            and node.source is None
        )

    def _vertex(self, chain: list[_Node], parallelism: dict[int, int], names: dict[int, str]) -> JobVertex:
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
    def _check_picklable(nodes: list[_Node], names: dict[int, str]) -> None:
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

