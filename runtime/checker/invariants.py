"""`InvariantChecker`: the protocol's invariants, checked after every event of a simulator run.

TigerBeetle's VOPR style: instead of comparing only the final output of a run with a reference,
the simulator asks the checker after every event whether the state of the world is still legal,
so a violation is reported at the virtual instant it happens, naming what broke, where and the
one line that replays it. Turned on with `env.execute(..., executor="sim", invariants=True)` (or
`invariants=InvariantChecker(reference=...)` to also bound the committed output); off by default.
A violation raises `InvariantViolation` out of `execute` — it is never taken for a task failure.
It is the simulator's `ExecutionObserver` (`runtime.jobmaster.observer`): the simulator knows the
hooks, not this module, which lives with the verification tools that use it (`runtime.verify`).

The checker observes from outside the tasks and never changes what they do: the simulator calls
it where messages are sent, delivered and credited, checkpoints triggered and notified, and it
wraps (forwarding every call unchanged) each task's `gate.poll` and its handler's listener, the
sinks' committer and the blob store of the checkpoint storage. Every check is incremental: an
event marks what it touched, and only that is checked when it ends.

Invariants (the name is what a violation reports):

* ``checkpoint-ids-increase`` — every checkpoint the coordinator triggers has an id above every
  id triggered before in the run, across task failover and coordinator crashes (HA included).
* ``blocked-channel-silent`` — exactly-once handlers: between the moment a channel hands the
  handler checkpoint c's barrier and c's trigger or abort at that task, the gate hands nothing
  from that channel to the operator chain (modelled from what `poll` returns and what the handler
  tells its task, independently of the gate's own bookkeeping).
* ``credits-conserved`` — per channel and execution attempt: the sender's credits + buffers in
  flight on the network + buffers delivered to the receiver and not yet handed to its chain +
  credits on their way back == the credit window (`graph.credits`).
* ``checkpoint-ends-in-time`` — every triggered checkpoint completes or aborts, with a reason,
  within its timeout plus `slack` (default: ten control delays plus one network delay).
* ``checkpoint-end-forwarded`` — a task that triggers or aborts checkpoint c has, right after,
  an event for c or later (barrier, cancellation marker) or its end of partition on every output
  channel, queued or sent: what releases the downstream channels blocked for c.
* ``channel-released-after-checkpoint-end`` — when a task is told that checkpoint c ended
  (completed, or aborted) while channels are blocked for c, every other open input channel can
  still release them: its sender has not decided on c yet, or sent something for c or later.

* the committed-output and checkpoint-file invariants (`runtime.checker.output_invariants`):
  ``committed-output-monotonic``, ``committed-output-within-reference``,
  ``committed-output-complete``, ``retained-files-kept``.
* the event-time invariants (`runtime.checker.time_invariants`): ``watermark-monotonic``,
  ``timer-fires-once``, ``event-timers-fire-by-end``.

Not covered here: the final keyed state (compare `result.final_state` with a reference run) and
per-channel FIFO order of records (`runtime.workloads.scenarios.check_headers`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from runtime.checker.output_invariants import OutputChecks
from runtime.checker.time_invariants import EventTimeChecks
from runtime.core.barriers import BarrierTracker
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
)
from vocabulary.handles import TaskId
from vocabulary.options import CheckpointingMode
from vocabulary.reasons import CheckpointFailureReason

if TYPE_CHECKING:
    from runtime.core.record_writer import OutputChannel
    from runtime.core.task import Task
    from runtime.sim.executor import SimExecutor

__all__ = ["InvariantChecker", "InvariantViolation"]

#: what an end of partition counts as among checkpoint ids: it releases every checkpoint
_END = float("inf")
_Channel = tuple[TaskId, int]  # (sender, output channel index)


class InvariantViolation(AssertionError):
    """An invariant of the protocol broke during a simulated run.

    Attributes:
        invariant: its name (see the module docstring).
        time: the virtual time (seconds) of the event after which it was found.
        subject: the task, channel, checkpoint or file concerned.
        replay: the `env.execute(...)` call that replays the run.
    """

    def __init__(self, invariant: str, time: float, subject: str, detail: str, replay: str) -> None:
        super().__init__(f"invariant {invariant!r} violated at t={time:.6f} s ({subject}): {detail}; "
                         f"replay: {replay}")
        self.invariant, self.time, self.subject, self.detail, self.replay = invariant, time, subject, detail, replay


class _Alignment:
    """What one exactly-once task's gate may hand out, modelled from outside."""

    __slots__ = ("block_id", "blocked", "closed", "ended")

    def __init__(self) -> None:
        #: the checkpoint whose barrier blocked `blocked` (None: nothing blocked)
        self.block_id: int | None = None
        self.blocked: set[int] = set()
        #: channels that handed over their end of partition
        self.closed: set[int] = set()
        #: highest checkpoint the task triggered or aborted
        self.ended = 0


class InvariantChecker:
    """Checks the invariants of the module docstring on one simulated run.

    Args:
        reference: the failure-free output to bound the committed output by: a `JobResult`, a
            mapping sink name -> records (list of dicts) or multiset (`Counter` of
            `runtime.checker.output_invariants.record_key`),
            or, for a job with one sink, its records or multiset alone.
        slack: seconds a checkpoint may end after its timeout (None: ten control delays plus one
            network delay).

    The simulator calls `bind` once, then the `on_*` hooks, `deployed` after each deployment,
    `after_event` after every event and `finished` at the end. `checks` counts the checks made
    per invariant. An instance may be reused for another run (`bind` starts over).
    """

    def __init__(self, reference: Any = None, *, slack: float | None = None) -> None:
        self.reference = reference
        self.slack = slack
        self.checks: Counter[str] = Counter()
        self._sim: SimExecutor | None = None

    # ------------------------------------------------------------------ set-up

    def bind(self, sim: SimExecutor) -> None:
        """Start checking `sim` (called by `SimExecutor.__init__`, before its storage is used)."""
        self._sim = sim
        graph = sim.graph
        config = graph.checkpoint_config
        self._window = graph.credits
        self._timeout = config.timeout if config is not None else None
        network = sim.network
        self._slack = self.slack if self.slack is not None else 10 * network.control_delay + network.delay_max
        self._exactly_once = config is None or config.interval is None or config.mode is CheckpointingMode.EXACTLY_ONCE
        self.checks = Counter()
        self._violation: InvariantViolation | None = None
        # across the run
        self._last_trigger = 0
        self._last_trigger_event = -1
        self._deadlines: list[tuple[float, int, float]] = []
        self._output = OutputChecks(self, sim, self.reference)
        self._time = EventTimeChecks(self)
        self._reset_attempt()

    def _reset_attempt(self) -> None:
        self._net: dict[_Channel, int] = {}
        self._queued: dict[_Channel, int] = {}
        self._returning: dict[_Channel, int] = {}
        self._dirty: set[_Channel] = set()
        self._emitted: dict[_Channel, float] = {}
        self._decided: dict[TaskId, int] = {}
        self._alignments: dict[TaskId, _Alignment] = {}
        #: task -> (checkpoint it blocks for, checkpoint it was told ended, completed?)
        self._watches: dict[TaskId, tuple[int, int, bool]] = {}

    def committer(self, committer: Any) -> Any:
        """What the tasks get as their committer: `committer`, watched."""
        return self._output.committer(committer)

    def deploying(self) -> None:
        """A deployment restored its checkpoint and cleaned up the committer; tasks come next."""
        self._output.check_committed_kept()

    def deployed(self) -> None:
        """A new execution attempt's tasks exist: watch their gates and handlers."""
        sim = self._require()
        self._reset_attempt()
        for task_id, task in sim.tasks.items():
            if task.handler is None or task.gate is None:
                continue
            alignment = None if isinstance(task.handler, BarrierTracker) else _Alignment()
            if alignment is not None:
                self._alignments[task_id] = alignment
            task.handler.listener = _WatchedListener(task, task_id, self)
            task.gate.poll = self._watch_poll(task_id, task.gate.poll, alignment)  # type: ignore[method-assign]
        self._time.deployed(sim.tasks)

    # ------------------------------------------------------------------ hooks: network and credits

    def on_send(self, sender: TaskId, out_index: int, payload: Any) -> None:
        key = (sender, out_index)
        if isinstance(payload, Buffer):
            self._net[key] = self._net.get(key, 0) + 1
            self._dirty.add(key)
            return
        if isinstance(payload, Watermark | WatermarkStatus):
            self._time.on_send(sender, out_index, payload)
            return
        reach = _END if isinstance(payload, EndOfPartition) else payload.id
        if reach > self._emitted.get(key, 0):
            self._emitted[key] = reach

    def on_deliver(self, receiver: TaskId, channel: int, payload: Any) -> None:
        if isinstance(payload, Buffer):
            key = self._require().channels.reverse[(receiver, channel)]
            self._net[key] = self._net.get(key, 0) - 1
            self._queued[key] = self._queued.get(key, 0) + 1
            self._dirty.add(key)

    def on_credit_returned(self, sender: TaskId, out_index: int) -> None:
        key = (sender, out_index)
        self._returning[key] = self._returning.get(key, 0) + 1
        self._dirty.add(key)

    def on_credit_given(self, sender: TaskId, out_index: int) -> None:
        key = (sender, out_index)
        self._returning[key] = self._returning.get(key, 0) - 1
        self._dirty.add(key)

    def _watch_poll(self, task_id: TaskId, poll: Callable[[], BufferOrEvent | None],
                    alignment: _Alignment | None) -> Callable[[], BufferOrEvent | None]:
        reverse = self._require().channels.reverse
        queued, dirty = self._queued, self._dirty

        def watched_poll() -> BufferOrEvent | None:
            boe = poll()
            if boe is None:
                return None
            channel, payload = boe.channel, boe.payload
            if alignment is not None:
                self._observe_handed_out(task_id, alignment, channel, payload)
            if isinstance(payload, Buffer):
                key = reverse[(task_id, channel)]
                queued[key] = queued.get(key, 0) - 1
                dirty.add(key)
            return boe

        return watched_poll

    def _observe_handed_out(self, task_id: TaskId, alignment: _Alignment, channel: int, payload: Any) -> None:
        self.checks["blocked-channel-silent"] += 1
        if channel in alignment.blocked:
            self._violate("blocked-channel-silent", f"task {task_id}, input channel {channel} "
                          f"(from {self._sender(task_id, channel)}), checkpoint {alignment.block_id}",
                          f"the gate handed {type(payload).__name__} to the operator chain while the channel was "
                          f"blocked: it delivered checkpoint {alignment.block_id}'s barrier, which the task has "
                          f"neither triggered nor aborted yet")
            return
        if isinstance(payload, CheckpointBarrier):
            checkpoint_id = payload.id
            if checkpoint_id <= alignment.ended:
                return  # already triggered or aborted here: nothing blocks
            if alignment.block_id is None or checkpoint_id > alignment.block_id:
                alignment.block_id, alignment.blocked = checkpoint_id, {channel}
            elif checkpoint_id == alignment.block_id:
                alignment.blocked.add(channel)
        elif isinstance(payload, EndOfPartition):
            alignment.closed.add(channel)

    # ------------------------------------------------------------------ hooks: checkpoints

    def on_trigger(self, checkpoint_id: int) -> None:
        """The coordinator triggers `checkpoint_id` (called once per source, in one event)."""
        sim = self._require()
        if checkpoint_id == self._last_trigger and sim.events == self._last_trigger_event:
            return  # the same trigger, for the next source
        self.checks["checkpoint-ids-increase"] += 1
        if checkpoint_id <= self._last_trigger:
            self._violate("checkpoint-ids-increase", f"checkpoint {checkpoint_id}",
                          f"triggered after checkpoint {self._last_trigger} was (ids must strictly increase, "
                          f"across failover and coordinator crashes)")
        self._last_trigger, self._last_trigger_event = max(self._last_trigger, checkpoint_id), sim.events
        if self._timeout is not None:
            heapq.heappush(self._deadlines, (sim.now + self._timeout + self._slack, checkpoint_id, sim.now))

    def on_source_triggered(self, task_id: TaskId, checkpoint_id: int) -> None:
        """Source `task_id` handled the trigger of `checkpoint_id`."""
        task = self._require().tasks.get(task_id)
        if task is not None:
            self._task_ended(task_id, task, checkpoint_id, None)

    def _task_ended(self, task_id: TaskId, task: Task, checkpoint_id: int,
                    reason: CheckpointFailureReason | None) -> None:
        """`task` triggered (`reason` None) or aborted `checkpoint_id`."""
        if checkpoint_id > self._decided.get(task_id, 0):
            self._decided[task_id] = checkpoint_id
        alignment = self._alignments.get(task_id)
        if alignment is not None:
            alignment.ended = max(alignment.ended, checkpoint_id)
            if alignment.block_id is not None and checkpoint_id >= alignment.block_id:
                alignment.block_id, alignment.blocked = None, set()
        for out in task.outputs:
            self.checks["checkpoint-end-forwarded"] += 1
            if not self._carries(task_id, out, checkpoint_id):
                what = "triggered" if reason is None else f"aborted ({reason.value})"
                self._violate("checkpoint-end-forwarded", f"task {task_id}, output channel {out.index} to "
                              f"{out.target}, checkpoint {checkpoint_id}",
                              f"the task {what} checkpoint {checkpoint_id} but its output channel carries no "
                              "barrier or cancellation marker for it (nor a later one, nor its end of partition), "
                              f"so {out.target} may stay blocked for checkpoint {checkpoint_id}")
                return

    def _carries(self, sender: TaskId, out: OutputChannel, checkpoint_id: int) -> bool:
        """Whether `out` sent or queued what releases checkpoint `checkpoint_id` downstream."""
        if self._emitted.get((sender, out.index), 0) >= checkpoint_id:
            return True
        return any(_reach(p) >= checkpoint_id for p in _ends_first(out.queue))

    def on_notified(self, task_id: TaskId, checkpoint_id: int, *, completed: bool) -> None:
        """`task_id` was told checkpoint `checkpoint_id` completed or aborted."""
        alignment = self._alignments.get(task_id)
        if alignment is None or alignment.block_id is None:
            return
        blocked_for = alignment.block_id
        if checkpoint_id == blocked_for or (completed and checkpoint_id > blocked_for):
            # watched until the block ends: what can still release it may be lost later
            self._watches[task_id] = (blocked_for, checkpoint_id, completed)
            self._check_release(task_id)

    def _check_release(self, task_id: TaskId) -> None:
        """A task told its blocking checkpoint ended: can every other open input still release it?"""
        sim = self._require()
        alignment = self._alignments[task_id]
        blocked_for, told, completed = self._watches[task_id]
        task = sim.tasks.get(task_id)
        if alignment.block_id != blocked_for or task is None:
            del self._watches[task_id]  # released, or its execution attempt failed
            return
        for channel in range(task.num_inputs):
            if channel in alignment.blocked or channel in alignment.closed:
                continue
            sender, out_index = sim.channels.reverse[(task_id, channel)]
            self.checks["channel-released-after-checkpoint-end"] += 1
            if self._decided.get(sender, 0) < blocked_for:
                continue  # the sender has not decided yet: its barrier or cancellation may come
            if not self._carries(sender, sim.tasks[sender].outputs[out_index], blocked_for):
                self._violate(
                    "channel-released-after-checkpoint-end",
                    f"task {task_id}, input channels {sorted(alignment.blocked)}, checkpoint {blocked_for}",
                    f"the task was told checkpoint {told} {'completed' if completed else 'aborted'} and still "
                    f"blocks channels {sorted(alignment.blocked)} for checkpoint {blocked_for}, but input channel "
                    f"{channel} will never release them: {sender} already decided on checkpoint "
                    f"{self._decided[sender]} and sent it no barrier or cancellation marker for {blocked_for} "
                    "or later")
                return

    def on_completed(self, completed: Any) -> None:
        """The coordinator made checkpoint `completed` durable (it is retained now)."""
        self._output.on_completed(completed)

    # ------------------------------------------------------------------ after every event, at the end

    def after_event(self) -> None:
        """Check what the event touched; raise the first violation found."""
        if self._dirty:
            self._check_credits()
        if self._watches:
            for task_id in list(self._watches):
                self._check_release(task_id)
        if self._deadlines and self._deadlines[0][0] < self._sim.now:  # type: ignore[union-attr]
            self._check_deadlines()
        if self._violation is not None:
            raise self._violation

    def raise_found(self, error: BaseException) -> None:
        """An event raised `error`: raise the violation found before it, if any, instead."""
        if self._violation is not None:
            raise self._violation from error

    def finished(self, ok: bool) -> None:
        """The run ended (`ok`: successfully). Raises the first violation found."""
        self.after_event()
        self._output.check_committed_kept()
        if ok:
            self._check_reasons()
            self._output.check_output_complete()
            self._time.finished(self._require().graph)
        if self._violation is not None:
            raise self._violation

    def _check_credits(self) -> None:
        tasks = self._require().tasks
        window = self._window
        for key in self._dirty:
            task = tasks.get(key[0])
            if task is None:
                continue
            credits = task.outputs[key[1]].credits
            net, queued, returning = self._net.get(key, 0), self._queued.get(key, 0), self._returning.get(key, 0)
            self.checks["credits-conserved"] += 1
            if credits + net + queued + returning != window:
                receiver, channel = self._require().channels.routes[key]
                self._violate("credits-conserved", f"channel {key[0]} output {key[1]} -> {receiver} input {channel}",
                              f"sender credits {credits} + buffers on the network {net} + buffers at the receiver "
                              f"{queued} + credits on their way back {returning} = "
                              f"{credits + net + queued + returning}, not the window {window}")
                break
        self._dirty.clear()

    def _check_deadlines(self) -> None:
        now = self._require().now
        while self._deadlines and self._deadlines[0][0] < now:
            deadline, checkpoint_id, triggered = heapq.heappop(self._deadlines)
            self.checks["checkpoint-ends-in-time"] += 1
            stats = self._stats_of(checkpoint_id)
            late = stats is None or stats.end_time > deadline
            if late or (not stats.completed and stats.failure_reason is None):
                self._violate("checkpoint-ends-in-time", f"checkpoint {checkpoint_id}",
                              f"triggered at t={triggered:.6f} s, it "
                              + ("neither completed nor aborted" if stats is None else
                                 f"ended at t={stats.end_time:.6f} s" if late else "aborted without a reason")
                              + f" within its timeout of {self._timeout} s (+ {self._slack:.4f} s slack)")
                return

    def _check_reasons(self) -> None:
        for stats in self._require().coordinator_history():
            self.checks["checkpoint-ends-in-time"] += 1
            if not stats.completed and stats.failure_reason is None:
                self._violate("checkpoint-ends-in-time", f"checkpoint {stats.id}", "aborted without a reason")
                return

    def _stats_of(self, checkpoint_id: int) -> Any:
        sim = self._require()
        stats = sim.coordinator.stats.get(checkpoint_id)
        if stats is None:
            stats = next((s for s in reversed(sim.coordinators.history) if s.id == checkpoint_id), None)
        return stats

    # ------------------------------------------------------------------ helpers

    def _violate(self, invariant: str, subject: str, detail: str) -> None:
        if self._violation is not None:
            return  # the first one is the one to replay
        sim = self._require()
        replay = (f"env.execute({sim.graph.job_name!r}, executor='sim', seed={sim.seed}, faults={sim.faults!r}, "
                  "invariants=True)")
        self._violation = InvariantViolation(invariant, sim.now, subject, detail, replay)

    def _sender(self, receiver: TaskId, channel: int) -> str:
        sender, out_index = self._require().channels.reverse[(receiver, channel)]
        return f"{sender} output {out_index}"

    def _require(self) -> SimExecutor:
        if self._sim is None:
            raise RuntimeError("InvariantChecker: not bound to a simulator run (pass it as execute(..., invariants=...))")
        return self._sim

    def __repr__(self) -> str:
        return f"InvariantChecker(checks={sum(self.checks.values())}, violation={self._violation is not None})"


# ---------------------------------------------------------------------- what the checker wraps


class _WatchedListener:
    """A handler's listener (the task), forwarding every call; tells the checker of each trigger
    and abort once the task handled it."""

    __slots__ = ("task", "task_id", "checker")

    def __init__(self, task: Task, task_id: TaskId, checker: InvariantChecker) -> None:
        self.task, self.task_id, self.checker = task, task_id, checker

    def trigger_checkpoint(self, barrier: CheckpointBarrier, stats: Any) -> None:
        self.task.trigger_checkpoint(barrier, stats)
        self.checker._task_ended(self.task_id, self.task, barrier.id, None)

    def abort_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.task.abort_checkpoint(checkpoint_id, reason)
        self.checker._task_ended(self.task_id, self.task, checkpoint_id, reason)

    def add_input_channel_state(self, checkpoint_id: int, channel: int, buffers: Any) -> None:
        self.task.add_input_channel_state(checkpoint_id, channel, buffers)

    def finish_input_channel_state(self, checkpoint_id: int) -> None:
        self.task.finish_input_channel_state(checkpoint_id)


def _reach(payload: Any) -> float:
    """The highest checkpoint an output payload releases downstream (0: none)."""
    if isinstance(payload, CheckpointBarrier | CancelCheckpointMarker):
        return payload.id
    if isinstance(payload, EndOfPartition):
        return _END
    return 0


def _ends_first(queue: Any) -> Iterator[Any]:
    """A queue's payloads, its two ends first (where a task puts a barrier or a marker)."""
    if queue:
        yield queue[-1]
        yield queue[0]
        yield from queue
