"""The public API: `StreamEnvironment` (its streams, `DataStream` and `KeyedStream`, are in
`runtime.api.data_stream`; the graph they record is built by `runtime.api.graph_builder`).

Theory of operation
-------------------
Calls on streams only *record* a logical plan: every `map`, `key_by(...).process`, `sink_to`...
adds a `Transformation` (an operator template, its inputs and how each input is exchanged: forward,
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
from typing import Any

from checkpoint.io.recovery import DEFAULT_OPERATION_TIMEOUT, DEFAULT_SESSION_TIMEOUT, HighAvailabilityConfig
from checkpoint.modes import parse_mode
from operators.base import Record
from operators.sources import CollectionSource, GeneratorSource, Source
from operators.watermarks import WatermarkStrategy
from runtime.api.data_stream import DataStream, DataStreamSink, KeyedStream
from runtime.api.graph_builder import DEFAULT_RESTART_STRATEGY, GraphBuilder
from runtime.api.transformations import Transformation
from runtime.checker.invariants import InvariantChecker
from runtime.connectors.parquet import ParquetSource
from runtime.core.graph import (
    JobGraph,
    JobGraphError,
    check_job_name,
    check_latency_warmup,
    check_watermark_interval,
    validate_settings,
)
from runtime.jobmaster.registry import get_executor
from runtime.jobmaster.result import RestoredFrom
from vocabulary.debloat import DEFAULT_TARGET, BufferDebloatConfig
from vocabulary.options import (
    DEFAULT_STORAGE_TIMEOUT,
    CheckpointConfig,
    CheckpointingMode,
    InvalidOptionError,
    RestartStrategy,
)

__all__ = [
    "DEFAULT_RESTART_STRATEGY",
    "DataStream",
    "DataStreamSink",
    "KeyedStream",
    "StreamEnvironment",
]

#: the checkpoint-mode names `enable_checkpointing` takes (`checkpoint.modes`)
API_MODES = ("exactly-once", "at-least-once", "aligned", "unaligned", "aligned-timeout")


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
        self._nodes: list[Transformation] = []
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
        """Checkpoint every `interval` seconds (see `vocabulary.options.CheckpointConfig`).

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
        session_timeout: float = DEFAULT_SESSION_TIMEOUT, operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
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
        See `vocabulary.debloat` for the options and why the default target is 100 ms.

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
                     columns: Sequence[str] | None = None, name: str = "parquet",
                     watermark_strategy: WatermarkStrategy | None = None) -> DataStream:
        """A stream of the rows of Parquet files (`runtime.connectors.parquet.ParquetSource`): a
        file, a directory of them or a list, local or any `pyarrow.fs` URI. One split per row
        group (`split_by="row_group"`) or per file (`"file"`), whatever the parallelism, so a
        restore may rescale; each split replays by row offset. Rows are dicts (None where null),
        or Arrow batches with `vectorised=True`; `columns` reads only those; `watermark_strategy`
        as for `from_collection`.

        Raises:
            JobGraphError: a bad argument, a missing path, a file that is not Parquet or whose
                schema differs from the first file's (each names the file).
        """
        try:
            source = ParquetSource(path, split_by=split_by, vectorised=vectorised, columns=columns, name=name)
        except (OSError, ValueError) as exc:
            raise JobGraphError(str(exc)) from exc
        return self._source(source, default_splits=False, strategy=watermark_strategy)

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

    def _add_node(self, base_name: str, **kwargs: Any) -> Transformation:
        node = Transformation(next(self._ids), base_name, **kwargs)
        self._nodes.append(node)
        return node

    # ------------------------------------------------------------------ building and running

    def get_job_graph(self, job_name: str = "job") -> JobGraph:
        """Build and validate the job graph (what `execute` runs).

        Raises:
            JobGraphError: the topology or an option is invalid (names the operator/option).
        """
        return GraphBuilder(self, job_name).build()

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
        (`runtime.checker.invariants.InvariantChecker`; pass one to bound the output by a reference).
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
        background (`spark_bridge.io.landing`); `execute` waits for the landings before returning.
        Works with any checkpoint storage, in-memory included."""
        from spark_bridge.io.landing import CheckpointLander

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
        every mismatch (see `runtime.jobmaster.restore.match`).

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
        from runtime.jobmaster.committer.durable import start_over

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
        from spark_bridge.io.restore import checkpoint_from_landed

        self._restore_from = checkpoint_from_landed(spark, target, checkpoint_id)
        self._started_over = None
        self._allow_non_restored_state = False
        return self
