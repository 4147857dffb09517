"""The streams of the public API: `DataStream`, `KeyedStream` and `DataStreamSink`. Calls on them
only record `Transformation`s in their environment (`runtime.api.transformations`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

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
from operators.sinks import Sink
from operators.transforms import (
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    PassThroughOperator,
)
from operators.watermarks import WatermarkStrategy
from operators.windows.assigners import WindowAssigner
from runtime.api.connected_streams import ConnectedStreams, IntervalJoin
from runtime.api.transformations import Exchange, Transformation, check_callable, check_parallelism
from runtime.api.window_joins import CoGroupedStreams, JoinedStreams
from runtime.api.windowed import WindowedStream
from runtime.core.graph import JobGraphError

if TYPE_CHECKING:
    from runtime.api.environment import StreamEnvironment


class DataStream:
    """A stream of dict records. Transformations return new streams; nothing runs until
    `env.execute()`."""

    def __init__(self, env: StreamEnvironment, node: Transformation, exchange: Exchange | None = None) -> None:
        self._env = env
        self._node = node
        self._exchange = exchange

    def _exchanged(self, kind: str, key_selector: Callable[[Record], Any] | None = None, label: str = "") -> Exchange:
        """An exchange of this stream (of its side output, for a side-output stream)."""
        tag = self._exchange.output_tag if self._exchange is not None else None
        return Exchange(kind, key_selector, label, tag)

    # ------------------------------------------------------------------ stateless transformations

    def _then(self, operator: StreamOperator, base_name: str, name: str | None,
              columns: list[str] | None = None) -> DataStream:
        node = self._env._add_node(base_name, inputs=[(self._node, self._exchange)], operator=operator,
                                   columns=columns, user_name=name)
        return DataStream(self._env, node)

    def map(self, fn: Callable[[Record], Record], name: str | None = None) -> DataStream:
        """One output record per input: `fn(record) -> dict`."""
        check_callable(f"map {name or ''}".strip(), fn)
        return self._then(MapOperator(fn), "map", name)

    def filter(self, fn: Callable[[Record], Any], name: str | None = None) -> DataStream:
        """Keep the records for which `fn(record)` is truthy."""
        check_callable(f"filter {name or ''}".strip(), fn)
        return self._then(FilterOperator(fn), "filter", name, self._node.columns)

    def flat_map(self, fn: Callable[[Record], Iterable[Record] | None], name: str | None = None) -> DataStream:
        """Zero or more output records per input: `fn(record)` returns an iterable of dicts."""
        check_callable(f"flat_map {name or ''}".strip(), fn)
        return self._then(FlatMapOperator(fn), "flat_map", name)

    def map_batches(self, fn: Callable[[Any], Any], name: str | None = None) -> DataStream:
        """Vectorised map: `fn(pyarrow.RecordBatch) -> RecordBatch | Table`, once per buffer."""
        check_callable(f"map_batches {name or ''}".strip(), fn)
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

    def _stream_of(self, node: Transformation) -> DataStream:
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
        check_callable("key_by", key)
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
        return DataStream(self._env, self._node, Exchange("default", output_tag=tag.name))

    # ------------------------------------------------------------------ properties

    def set_parallelism(self, parallelism: int) -> DataStream:
        """Run this stream's operator with `parallelism` subtasks.

        Raises:
            JobGraphError: `parallelism` is not an integer >= 1.
        """
        check_parallelism(self._node, parallelism)
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

    def sink_to(self, sink: Sink) -> DataStreamSink:
        """Send the stream to `sink`; every parallel instance gets its own copy of it.

        Returns:
            A handle to set the sink's parallelism.

        Raises:
            JobGraphError: `sink` is not a `Sink` (a `CollectSink`, a `DiscardingSink`...).
        """
        if not isinstance(sink, Sink):
            raise JobGraphError(f"sink_to: expected a Sink (CollectSink, DiscardingSink...), got "
                                f"{type(sink).__name__} {sink!r}")
        node = self._env._add_node(sink.name, inputs=[(self._node, self._exchange)], operator=sink,
                                   sink_name=sink.sink_name)
        return DataStreamSink(node)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._node.display_name!r})"


class DataStreamSink:
    """What `sink_to` returns: the sink's operator, whose parallelism can still be set."""

    def __init__(self, node: Transformation) -> None:
        self._node = node

    @property
    def sink_name(self) -> str:
        assert self._node.sink_name is not None
        return self._node.sink_name

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        """Run the sink with `parallelism` subtasks (JobGraphError unless an integer >= 1)."""
        check_parallelism(self._node, parallelism)
        self._node.parallelism = parallelism
        return self

    def __repr__(self) -> str:
        return f"DataStreamSink({self.sink_name!r})"


class KeyedStream(DataStream):
    """A stream partitioned by key; keyed operators see the key's state (`ctx.value_state` ...).

    Stateless transformations on a keyed stream are hash partitioned as well.
    """

    def __init__(self, env: StreamEnvironment, node: Transformation, key_selector: Callable[[Record], Any],
                 key_column: str | None, upstream: Exchange | None = None) -> None:
        label = f"key_by({key_column!r})" if key_column is not None else "key_by(<function>)"
        tag = upstream.output_tag if upstream is not None else None
        super().__init__(env, node, Exchange("hash", key_selector, label, tag))
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
        check_callable(f"reduce {name or ''}".strip(), fn)
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
