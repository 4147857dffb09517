"""`TaskCheckpointing`: a task's part in checkpoints — the coordinator's triggers of a source, the
barrier handler's calls (`CheckpointListener`), the writes' outcomes and the completion and abort
notifications.

Theory of operation
-------------------
* Trigger. A source is triggered by the coordinator (`trigger_source_checkpoint`; a repeated
  trigger is ignored, a late one for an older id declined), any other task by its barrier
  handler (`trigger_checkpoint`). Either way the task takes a synchronous snapshot (operator
  state, keyed state, source offsets), forwards the barrier and hands the snapshot to its
  `SubtaskCheckpointCoordinator`, which writes it through the executor once it is complete and
  acknowledges when the write returns (`on_snapshot_written`).
* Channel state. An unaligned barrier overtakes the task's queued output (output channel state)
  and the input it took but has not processed (input channel state, ahead of what the handler
  adds until `finish_input_channel_state`). An aligned barrier with an alignment timeout that is
  still queued behind output when the timeout expires overtakes it then (`_output_timed_out`,
  Flink applies the timeout to output buffers too): the write waits until the barrier left or
  overtook.
* Completions and aborts. A completion goes to the chain (the sinks commit) and ends a source
  waiting for the job's final checkpoint; a task without a completion listener learns of
  completions from the barriers it receives and from its trigger instead
  (`runtime.jobmaster.coordination.completions`). An abort cancels the in-flight snapshot: its write is
  discarded and never acknowledged.

A part of `runtime.core.task.Task`, which holds the state it works on. Pure: no I/O, no time but
the injected clock and timers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from runtime.core.barriers import AlignmentStats
from runtime.core.operator_chain import SOURCE_OP_KEY
from runtime.core.subtask_checkpoint import TaskSnapshot
from runtime.records.messages import Buffer, CheckpointBarrier, CheckpointOptions
from vocabulary.handles import StateHandle
from vocabulary.reasons import CheckpointFailureReason


class TaskCheckpointing:
    """A task's part in checkpoints (see the module docstring)."""

    def trigger_source_checkpoint(self, checkpoint_id: int, timestamp: float, options: CheckpointOptions,
                                  completed: int | None = None) -> None:
        """The coordinator triggers checkpoint `checkpoint_id` on this source task; `completed`: a
        completed checkpoint it was not notified of (it has no completion listener), applied first.

        A trigger for an id this task already triggered is a repeated control message: ignored
        (a second snapshot of one checkpoint would send a second barrier and write its files
        twice). One for an older id arrived late, after a newer checkpoint's barrier left: its
        barrier could never align downstream, so it is declined.
        """
        self.control_calls["trigger"] += 1
        if completed is not None and completed > self.completed_id:
            self._learn_completion(completed)
        latest = self.checkpoints.latest_checkpoint_id
        if checkpoint_id <= latest:
            if checkpoint_id < latest:
                self.checkpoints.decline(checkpoint_id, CheckpointFailureReason.DECLINED)
            return
        if self.is_finished:
            # A source that already ended (its own final checkpoint completed) still takes part
            # in the checkpoints slower sources need: it acknowledges its final state (all splits
            # read) and sends no barrier, its channels being closed (as Flink's FLIP-147).
            # Declining instead would abort every checkpoint until the slowest source finished.
            barrier = CheckpointBarrier(checkpoint_id, timestamp, options, self.completed_id)
            self.trigger_checkpoint(barrier, AlignmentStats(checkpoint_id), emit_barrier=False)
            return
        barrier = CheckpointBarrier(checkpoint_id, timestamp, options, self.completed_id)
        self.trigger_checkpoint(barrier, AlignmentStats(checkpoint_id, unaligned=options.unaligned))

    # ------------------------------------------------------------------ CheckpointListener

    def trigger_checkpoint(self, barrier: CheckpointBarrier, stats: AlignmentStats, *,
                           emit_barrier: bool = True) -> None:
        """Snapshot synchronously, forward the barrier (unless `emit_barrier` is False: a
        finished source), hand the snapshot over for writing."""
        checkpoint_id = barrier.id
        checkpoints = self.checkpoints
        checkpoints.latest_checkpoint_id = max(checkpoints.latest_checkpoint_id, checkpoint_id)
        self._final_checkpoint_triggered |= barrier.options.forced_aligned
        self.flush()
        snapshot = TaskSnapshot(
            task_id=self.task_id,
            checkpoint_id=checkpoint_id,
            barrier_timestamp=barrier.timestamp,
            stats=stats,
            keyed=self.keyed_backend.snapshot(checkpoint_id),
            sync_time=self.clock.now(),
        )
        snapshot.operator_states.update(self.chain.snapshot_state(checkpoint_id))
        if self.sources is not None and self.sources.readers:
            snapshot.operator_states[SOURCE_OP_KEY] = {"offsets": self.sources.offsets()}
        overtaking = stats.unaligned
        if overtaking:
            # an unaligned barrier can arrive while part of a buffer or of the restored channel
            # state is still unprocessed: that input is still in flight, so it is channel state
            # too (ahead of whatever the handler adds for the same channel)
            for channel, buffer in self._unprocessed_input():
                snapshot.input_channel_state.setdefault(channel, []).append(buffer)
        if emit_barrier:
            if barrier.completed < self.completed_id:  # downstream learns what this task knows
                barrier = dataclasses.replace(barrier, completed=self.completed_id)
            # an overtaking barrier goes ahead of queued output, which becomes channel state
            snapshot.output_channel_state.update(self.writer.put_barrier(barrier, overtake=overtaking))
        entry = checkpoints.start(snapshot, awaiting_channel_state=overtaking and self.num_inputs > 0)
        timeout = barrier.options.alignment_timeout
        if not overtaking and timeout is not None and self.writer.barrier_queued_behind_data(barrier):
            # Flink applies the alignment timeout to output buffers too: if the barrier is still
            # stuck behind queued output when it expires, it overtakes that output, which becomes
            # channel state; so the write waits until the barrier left or overtook.
            entry.awaiting_output = True
            delay = max(0.0, barrier.timestamp + timeout - self.clock.now())
            entry.output_timer = self.timers.schedule(delay, lambda: self._output_timed_out(checkpoint_id))
        checkpoints.maybe_start_write(checkpoint_id)

    def abort_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        """The handler gave up on a checkpoint: tell downstream and the coordinator."""
        self.writer.cancel_checkpoint(checkpoint_id)
        self.checkpoints.cancel(checkpoint_id)
        if reason is not CheckpointFailureReason.CANCELLED:
            self.checkpoints.decline(checkpoint_id, reason)

    def add_input_channel_state(self, checkpoint_id: int, channel: int, buffers: Sequence[Buffer]) -> None:
        self.checkpoints.add_input_channel_state(checkpoint_id, channel, buffers)

    def finish_input_channel_state(self, checkpoint_id: int) -> None:
        self.checkpoints.finish_input_channel_state(checkpoint_id)

    def _barrier_left_outputs(self, checkpoint_id: int) -> None:
        entry = self.checkpoints.in_flight.get(checkpoint_id)
        if entry is None or not entry.awaiting_output or self.writer.barrier_queued(checkpoint_id):
            return
        entry.awaiting_output = False
        if entry.output_timer is not None:
            entry.output_timer.cancel()
        self.checkpoints.maybe_start_write(checkpoint_id)

    def _output_timed_out(self, checkpoint_id: int) -> None:
        entry = self.checkpoints.in_flight.get(checkpoint_id)
        if entry is None or not entry.awaiting_output:
            return
        snapshot = entry.snapshot
        snapshot.output_channel_state.update(self.writer.overtake_with_barrier(checkpoint_id))
        snapshot.stats = dataclasses.replace(snapshot.stats, unaligned=True)
        entry.awaiting_output = False
        self.checkpoints.maybe_start_write(checkpoint_id)

    def on_snapshot_written(
        self, checkpoint_id: int, handles: dict[str, tuple[StateHandle, ...]], async_duration: float = 0.0,
        async_cpu: float = 0.0,
    ) -> bool:
        """The executor finished writing; acknowledge unless the checkpoint was cancelled.

        Returns False when the write was for a cancelled checkpoint (the executor then deletes
        the files it wrote).
        """
        return self.checkpoints.on_snapshot_written(checkpoint_id, handles, async_duration, async_cpu)

    def on_snapshot_failed(self, checkpoint_id: int, error: BaseException) -> None:
        self.checkpoints.on_snapshot_failed(checkpoint_id, error)

    def is_cancelled(self, checkpoint_id: int) -> bool:
        return self.checkpoints.is_cancelled(checkpoint_id)

    # ------------------------------------------------------------------ notifications

    def notify_checkpoint_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        """Checkpoint `checkpoint_id` completed (the coordinator's call). `final`: it is the job's
        final checkpoint (triggered after every source finished), so a source waiting for it may
        end its output."""
        self.control_calls["complete_final" if final else "complete"] += 1
        self._completed(checkpoint_id, final)

    def _completed(self, checkpoint_id: int, final: bool = False) -> None:
        self.completed_id = max(self.completed_id, checkpoint_id)
        self.chain.notify_checkpoint_complete(checkpoint_id)
        self.checkpoints.completed(checkpoint_id)
        if final:
            self._final_checkpoint_completed()

    def _learn_completion(self, checkpoint_id: int) -> None:
        """`checkpoint_id` completed, learned from a barrier or a trigger instead of a notification."""
        self._completed(checkpoint_id)
        self.ports.completion_learned(self.task_id, checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.control_calls["abort"] += 1
        self.checkpoints.cancel(checkpoint_id)
        self.chain.notify_checkpoint_aborted(checkpoint_id)
