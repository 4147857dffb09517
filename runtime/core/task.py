"""`Task`: one parallel instance of a job vertex — gate, barrier handler, operator chain, outputs.

The task owns the lifecycle (running, awaiting its final checkpoint, finished) and wires its parts:
the operator chain (`runtime/core/operator_chain.py`), the output channels and credits
(`runtime/core/record_writer.py`), its part in checkpoints (`runtime/core/task_checkpointing.py`)
and its snapshots in flight with their channel state (`runtime/core/subtask_checkpoint.py`).

Theory of operation
-------------------
A task is a pure state machine driven by its executor (the simulator or a Ray actor):

* `push(boe)` hands it input from the network; `step()` does one unit of work (one input buffer
  through the chain, or one buffer read from a source split — with `records_per_step` set, at most
  that many records, the rest of an input buffer waiting for the next step) and returns how many
  records it handled so the executor can charge (virtual) time; `drain_sendable()` returns the output the
  executor may send now (data only while the channel has credits; events always);
  `add_credit(ch)` returns a credit when the receiver consumed a buffer.
* Checkpoints (`TaskCheckpointing`): a source is triggered by the coordinator, other tasks by
  their barrier handler, for which the task is the `CheckpointListener`. The task takes a
  synchronous snapshot, forwards the barrier (unaligned: ahead of its queued output, and the
  input it took but has not processed becomes channel state) and hands a `TaskSnapshot` to
  `ports.write_snapshot`; the executor writes it off the task's hot path and calls
  `on_snapshot_written`, upon which the task acknowledges. The barrier leaves before the write
  finishes. A task without a completion listener learns of completions from the barriers it
  receives (`push`) and from its trigger instead of notifications.
* End of input: a source whose splits are exhausted reports `source_finished` and keeps taking
  part in checkpoints until the job's *final* checkpoint — one the coordinator triggered after
  every source finished — completes (`notify_checkpoint_complete(id, final=True)`); only then it
  emits `EndOfPartition`, so every record is covered by a completed checkpoint and no task ends
  while others still need its acknowledgements (Flink FLIP-147). Without checkpointing it ends
  at once.

* Time: `TaskTime` (`runtime/core/task_time.py`) combines the watermarks the gate hands out,
  generates a source's per-split watermarks, and queues the processing-time callbacks operators
  asked for; the task runs what came due at the start of a step and sends what the chain emits
  for time (records, then watermark events on every channel). Side outputs of the chain's last
  operator go to the edges of their tag (`operators.side_outputs`).

* Record types: where records become Arrow — what the task emits, the input of a sink or a
  vectorised operator — each stream is checked for one Arrow type per field, in stream order,
  before partitioning (`runtime/records/record_types.py`), so the outcome does not depend on buffering.

The task never blocks and never does I/O; the executor owns threads, time and the network.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from operators.base import OperatorContext, SinkCommitter, StreamOperator
from operators.columns import Batch, compact, num_rows
from operators.side_outputs import SideOutputs
from operators.sources import SplitReader
from runtime.core.barriers import (
    BarrierAligner,
    BarrierTracker,
    UnalignedBarrierHandler,
)
from runtime.core.barriers.handler import BarrierHandler
from runtime.core.input_gate import CheckpointedInputGate
from runtime.core.operator_chain import SOURCE_OP_KEY, OperatorChain
from runtime.core.record_writer import OutputChannel, RecordWriter
from runtime.core.sink_latency import SinkLatency
from runtime.core.source_reading import SourceReaders
from runtime.core.subtask_checkpoint import (
    SubtaskCheckpointCoordinator,
    TaskPorts,
    TaskRestore,
)
from runtime.core.task_checkpointing import TaskCheckpointing
from runtime.core.task_time import TaskTime
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CancelCheckpointMarker,
    ChannelItem,
    CheckpointBarrier,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
)
from state.key_groups import key_group_range_for_subtask
from state.keyed import KeyedStateBackend
from vocabulary.debloat import BufferDebloater
from vocabulary.handles import TaskId
from vocabulary.options import CheckpointingMode
from vocabulary.ports import Clock, Timers

if TYPE_CHECKING:
    from runtime.core.graph import JobGraph, JobVertex

__all__ = ["Task", "TaskState"]


class TaskState(enum.Enum):
    RUNNING = "running"
    #: a source that read all its splits, waiting for its final checkpoint to complete
    AWAITING_FINAL_CHECKPOINT = "awaiting final checkpoint"
    FINISHED = "finished"


class Task(TaskCheckpointing):
    """One parallel instance of a vertex. See the module docstring."""

    def __init__(
        self,
        task_id: TaskId,
        graph: JobGraph,
        vertex: JobVertex,
        *,
        clock: Clock,
        timers: Timers,
        ports: TaskPorts,
        committer: SinkCommitter,
        restore: TaskRestore | None = None,
        spill_bound_bytes: int = 64 << 20,
        spiller: Any = None,
    ) -> None:
        self.task_id = task_id
        self.graph = graph
        self.vertex = vertex
        self.clock = clock
        self.timers = timers
        self.ports = ports
        self.config = graph.checkpoint_config
        self.checkpointing = self.config is not None and self.config.interval is not None
        self.buffer_size = graph.buffer_size
        self.state = TaskState.RUNNING
        self.restored_from = restore.checkpoint_id if restore else None

        subtask, parallelism = task_id.subtask, vertex.parallelism
        self.keyed_backend = self._create_keyed_backend(restore)
        #: per input channel, the logical input of the chain's head it feeds (`JobEdge.input_index`)
        self.channel_inputs = graph.channel_inputs(vertex.name, subtask)
        self.num_inputs = len(self.channel_inputs)
        self.time = TaskTime(clock, timers, lambda: ports.wake(task_id), channel_inputs=self.channel_inputs,
                             watermarks=graph.watermarks, interval=graph.auto_watermark_interval)
        side_tags = frozenset(e.output_tag for e in graph.outputs_of(vertex.name) if e.output_tag is not None)
        self.side_outputs = SideOutputs(vertex.operator_names[-1] if vertex.operator_names else None, side_tags)
        self.context = OperatorContext(
            operator_name=vertex.name,
            subtask=subtask,
            parallelism=parallelism,
            max_parallelism=vertex.max_parallelism,
            clock=clock,
            committer=committer,
            keyed_backend=self.keyed_backend,
            checkpointing=self.checkpointing,
            restored_checkpoint_id=restore.checkpoint_id if restore else None,
            processing_time=self.time,
            auto_watermark_interval=graph.auto_watermark_interval,
            side_outputs=self.side_outputs,
        )
        self.chain = OperatorChain(vertex, self.context)
        self.writer = RecordWriter(graph, vertex, subtask, self.chain.output_name)
        #: control calls between this task and the coordinator, by kind: received ("trigger",
        #: "complete", "complete_final", "abort") and sent ("ack", "decline"); what a checkpoint
        #: costs in calls (`JobMetrics.control_calls`)
        self.control_calls: Counter[str] = Counter()
        self.checkpoints = SubtaskCheckpointCoordinator(task_id, ports, clock, self.control_calls)
        #: the newest checkpoint this task knows completed, put into the barriers it emits; a task
        #: without a completion listener learns of completions from barriers (or its trigger)
        #: instead of notifications (`runtime.jobmaster.coordination.completions`)
        self.completed_id = 0
        self._completions_from_barriers = not vertex.listens_for_completion

        # inputs
        self.gate: CheckpointedInputGate | None = None
        self.handler: BarrierHandler | None = None
        if vertex.source is None:
            self.handler = self._create_handler()
            self.gate = CheckpointedInputGate(
                self.num_inputs, self.handler, clock=clock,
                spill_bound_bytes=spill_bound_bytes, spiller=spiller,
            )
        #: buffer debloating (`vocabulary.debloat`): the input buffer size announced to the senders
        #: with the credits they get back (None: debloating is off)
        self.debloater: BufferDebloater | None = None
        if self.gate is not None and graph.buffer_debloat is not None:
            self.debloater = BufferDebloater(graph.buffer_debloat, graph.buffer_size, self.num_inputs * graph.credits)

        # sources
        self.sources = SourceReaders(vertex.source, parallelism, subtask, clock) if vertex.source is not None else None
        self._reported_finished = False
        #: the job's final checkpoint (forced aligned) was triggered here: every record came before it
        self._final_checkpoint_triggered = False

        #: restored input channel state (channel, buffer or watermark event), processed before any new input
        self._replay: deque[tuple[int, ChannelItem]] = deque()
        #: at most this many records per step, of an input buffer or read from a source (None: whole
        #: buffers); set by the executor so a step stays short (a barrier, a trigger waits for it)
        self.records_per_step: int | None = None
        #: (channel, rest of the input buffer being processed in parts)
        self._current: tuple[int, Batch] | None = None
        self.records_in = 0
        #: end-to-end latencies of the records reaching this task's sink (`runtime.core.sink_latency`)
        self.sink_latency = SinkLatency(graph.latency_warmup)
        self._measures_latency = bool(vertex.sink_names)
        watermarks = self._restore(restore) if restore is not None else {}
        if self.sources is not None:
            self.time.start_sources(vertex.watermark_strategy, self.sources.split_ids, watermarks,
                                    f"Source: {vertex.source.name}")
            self.sources.watch(self.time.sources)

    @property
    def operators(self) -> list[StreamOperator]:
        return self.chain.operators

    @property
    def outputs(self) -> list[OutputChannel]:
        return self.writer.channels

    @property
    def records_out(self) -> int:
        return self.writer.records_out

    # ------------------------------------------------------------------ construction helpers

    def _create_keyed_backend(self, restore: TaskRestore | None) -> KeyedStateBackend:
        key_groups = key_group_range_for_subtask(
            self.vertex.max_parallelism, self.vertex.parallelism, self.task_id.subtask
        )
        if restore is not None and restore.keyed_snapshots:
            return KeyedStateBackend.restore(
                self.vertex.name, key_groups, self.vertex.max_parallelism, restore.keyed_snapshots
            )
        return KeyedStateBackend(self.vertex.name, key_groups, self.vertex.max_parallelism)

    def _create_handler(self) -> BarrierHandler:
        config = self.config
        if config is None or config.mode is CheckpointingMode.EXACTLY_ONCE:
            if config is not None and config.unaligned:
                return UnalignedBarrierHandler(self.num_inputs, self, clock=self.clock, timers=self.timers)
            return BarrierAligner(
                self.num_inputs, self, clock=self.clock, timers=self.timers,
                max_held_bytes=config.max_aligned_bytes if config else None,
                alignment_timeout=config.alignment_timeout if config else None,
            )
        return BarrierTracker(self.num_inputs, self, clock=self.clock, timers=self.timers)

    def _restore(self, restore: TaskRestore) -> dict[str, float | None]:
        """Restore operator state, source offsets and channel state; returns the restored
        watermark of each source split."""
        for index, op in enumerate(self.operators):
            op.restore_state(restore.operator_states.get(self._op_key(index), {}))
        watermarks: dict[str, Any] = {}
        if self.sources is not None:
            watermarks = self.sources.restore(restore.operator_states.get(SOURCE_OP_KEY, {}).get("offsets", []))
        for ch in sorted(restore.input_channel_state):
            for buffer in restore.input_channel_state[ch]:
                self._replay.append((ch, buffer))
        for ch in sorted(restore.output_channel_state):
            self.outputs[ch].restore(restore.output_channel_state[ch])
        return watermarks

    def _op_key(self, index: int) -> str:
        return self.chain.op_key(index)

    # ------------------------------------------------------------------ input / output

    @property
    def is_source(self) -> bool:
        return self.vertex.source is not None

    def push(self, boe: BufferOrEvent) -> None:
        """Input from the network (the executor keeps per-channel FIFO order). A barrier first
        tells a task without a completion listener of the newest completion it carries."""
        assert self.gate is not None, f"source task {self.task_id} has no inputs"
        payload = boe.payload
        if (type(payload) is CheckpointBarrier and payload.completed > self.completed_id
                and self._completions_from_barriers):
            self._learn_completion(payload.completed)
        self.gate.push(boe)

    def add_credit(self, out_channel: int, buffer_size: int | None = None) -> None:
        """The receiver consumed a buffer of `out_channel`; `buffer_size`: the size it asks for
        (buffer debloating; buffers already cut keep theirs)."""
        self.writer.add_credit(out_channel, buffer_size)

    @property
    def announced_buffer_size(self) -> int | None:
        """The input buffer size this task asks its senders for (None: no debloating)."""
        return self.debloater.buffer_size if self.debloater is not None else None

    @property
    def smallest_announced_buffer_size(self) -> int | None:
        """The smallest input buffer size this task asked for (None: no debloating)."""
        return self.debloater.smallest if self.debloater is not None else None

    def drain_sendable(self) -> list[tuple[int, Buffer | CheckpointBarrier | CancelCheckpointMarker | EndOfPartition]]:
        """Pop everything that may be sent now: buffers while credits last, events always
        (an event behind a buffer without credit waits, keeping channel FIFO)."""
        out = self.writer.drain_sendable()
        if self.checkpoints.in_flight:
            for _, payload in out:
                if isinstance(payload, CheckpointBarrier):
                    self._barrier_left_outputs(payload.id)
        return out

    @property
    def is_backpressured(self) -> bool:
        """True when some output channel has more ready buffers than it has credits for."""
        return self.writer.is_backpressured

    def has_work(self) -> bool:
        if self.state is TaskState.FINISHED:
            return False
        if self.is_backpressured:
            return False
        if self._replay or self._current is not None or self.time.has_due:
            return True
        if self.is_source:
            return self.state is TaskState.RUNNING
        return self.gate is not None and (self.gate.has_data or self.gate.is_finished)

    def next_ready_time(self) -> float | None:
        """For a rate-limited source with nothing due now: when to step again."""
        return self.sources.next_ready_time() if self.sources is not None else None

    def source_lag(self) -> float | None:
        """For a source reading at a rate: how long overdue its next record is (seconds, its
        split being read now; `SplitReader.lag`); None otherwise."""
        return self.sources.lag() if self.sources is not None else None

    @property
    def readers(self) -> list[SplitReader]:
        """A source task's split readers (none for a task with inputs)."""
        return self.sources.readers if self.sources is not None else []

    def pending_output(self) -> bool:
        return self.writer.pending_output()

    # ------------------------------------------------------------------ the work

    def step(self) -> int:
        """Do one unit of work; return the number of records handled (0 = nothing to do now)."""
        if self.state is TaskState.FINISHED or self.is_backpressured:
            return 0
        if self.time.has_due:
            self._run_due()
        if self._current is not None:
            channel, data = self._current
            self._current = None
            return self._process_input(channel, data)
        if self._replay:
            channel, item = self._replay.popleft()
            if not isinstance(item, Buffer):
                self._time_input(channel, item)
                return 0
            return self._process_input(channel, item.batch if self.chain.columnar_input else item.to_records())
        if self.is_source:
            return self._source_step()
        return self._input_step()

    def _input_step(self) -> int:
        gate = self.gate
        assert gate is not None
        boe = gate.poll()
        if boe is None:
            if self.debloater is not None:
                self.debloater.idle(self.clock.now())
            if gate.is_finished and self.state is TaskState.RUNNING:
                self._end_of_input()
            return 0
        payload = boe.payload
        if isinstance(payload, Buffer):
            if self.debloater is not None:
                self.debloater.consumed(payload.num_records, self.clock.now())
            self.ports.buffer_consumed(self.task_id, boe.channel)
            pending = self.handler.pending_checkpoint_id() if self.checkpointing else None
            if pending is not None:
                self.checkpoints.count_processed(pending, payload.size_bytes)
            data = payload.batch if self.chain.columnar_input else payload.to_records()
            handled = self._process_input(boe.channel, data) or 1
            if self.debloater is not None and not gate.has_data:
                self.debloater.idle(self.clock.now())  # until the next buffer arrives, the task idles
            return handled
        if isinstance(payload, Watermark | WatermarkStatus):
            self._time_input(boe.channel, payload)
            return 0
        if isinstance(payload, EndOfPartition) and self.time.valves:
            self._time_input(boe.channel, payload)
        if gate.is_finished and self.state is TaskState.RUNNING:
            self._end_of_input()
        return 0

    def _process_input(self, channel: int, data: Batch) -> int:
        """Run (the first `records_per_step` records of) one input buffer through the chain."""
        limit = self.records_per_step
        if limit is not None and num_rows(data) > limit:
            rest = data.slice(limit) if not isinstance(data, list) else data[limit:]
            self._current = (channel, rest)
            data = data.slice(0, limit) if not isinstance(data, list) else data[:limit]
        return self._run_chain(data, count_in=True, input_index=self.channel_inputs[channel])

    def _unprocessed_input(self) -> list[tuple[int, ChannelItem]]:
        """Input taken from the network but not processed yet, oldest first, per channel."""
        pending: list[tuple[int, ChannelItem]] = []
        if self._current is not None:
            channel, data = self._current
            buffer = Buffer.from_records(data, checked=True) if isinstance(data, list) else Buffer.of(compact(data))
            pending.append((channel, buffer))
        pending.extend(self._replay)
        return pending

    def _source_step(self) -> int:
        if self.state is not TaskState.RUNNING:
            return 0
        assert self.sources is not None
        limit = self.writer.read_size()
        if self.records_per_step is not None:
            limit = min(limit, self.records_per_step)
        read = self.sources.read(limit)
        if read is None:
            if self.sources.exhausted:
                self._source_exhausted()
            return 0  # rate-limited: nothing due yet
        data, events, count = read
        if events:
            self._time_elements(events)
        return self._run_chain(data, count_in=True) or count

    def _source_exhausted(self) -> None:
        events = self.time.source_end()  # the watermark goes to +inf before the final checkpoint
        if events:
            self._time_elements(events)
        self.flush()
        if not self.checkpointing:
            self._end_of_input()
            return
        self.state = TaskState.AWAITING_FINAL_CHECKPOINT
        if not self._reported_finished:
            self._reported_finished = True
            self.ports.source_finished(self.task_id)

    def _run_chain(self, data: Batch, *, count_in: bool, input_index: int = 0) -> int:
        n = num_rows(data)
        if count_in:
            self.records_in += n
        if self._measures_latency and n:
            self.sink_latency.record(data, self.clock.now())
        data = self.chain.process(data, input_index)
        if num_rows(data):
            self.writer.emit(data)
        if self.side_outputs.consumed:
            self.writer.emit_side_outputs(self.side_outputs)
        return n

    # ------------------------------------------------------------------ time

    def _time_input(self, channel: int, event: Watermark | WatermarkStatus | EndOfPartition) -> None:
        """A watermark event (or end of partition) from `channel`: what the valve outputs enters the chain."""
        events = self.time.on_input(channel, event)
        if events:
            self._time_elements(events)

    def _time_elements(self, events: list[Watermark | WatermarkStatus]) -> None:
        """The task's input watermark events enter the chain at its head."""
        self.time.entered_chain(events)
        self.writer.emit_elements(self.chain.push(0, events), self.side_outputs)

    def _run_due(self) -> None:
        """Run the processing-time callbacks that came due: operators', and a source's periodic
        watermark emission."""
        now = self.clock.now()
        for target in self.time.take_due():
            if target is self.time.sources:
                assert self.sources is not None
                self._time_elements(self.time.periodic_events(self.writer.is_backpressured, self.sources.reading))
            else:
                self.writer.emit_elements(self.chain.on_processing_time(target, now), self.side_outputs)

    def flush(self) -> None:
        """Turn partly filled output buffers into buffers (buffer timeout, before events)."""
        self.writer.flush()

    def _end_of_input(self) -> None:
        for tail in self.chain.end_input():
            self.writer.emit_elements([tail], self.side_outputs)
        self._emit_end_of_partition()

    def _emit_end_of_partition(self) -> None:
        self.writer.end_of_partition()
        self.chain.close()
        self.state = TaskState.FINISHED

    def _final_checkpoint_completed(self) -> None:
        """The job's final checkpoint completed: a source waiting for it ends its output."""
        if self.state is TaskState.AWAITING_FINAL_CHECKPOINT:
            self._end_of_input()

    # ------------------------------------------------------------------ inspection

    @property
    def is_finished(self) -> bool:
        return self.state is TaskState.FINISHED

    @property
    def input_ended(self) -> bool:
        """Every record of this execution's input was handled: a source read all its splits;
        another task took the final checkpoint's barrier (forced aligned, it follows every
        record of every channel) or ended."""
        if self.is_source:
            return self.state is not TaskState.RUNNING
        return self._final_checkpoint_triggered or self.state is TaskState.FINISHED

    def keyed_state(self) -> dict[str, dict[Any, Any]]:
        return self.keyed_backend.dump()

    def __repr__(self) -> str:
        return (
            f"Task({self.task_id}, state={self.state.value}, in={self.records_in}, "
            f"out={self.records_out}, in_flight={sorted(self.checkpoints.in_flight)})"
        )
