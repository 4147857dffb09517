"""Data channels between task actors: ordered pushes, sequence checks, batched credits.

Ordering. A data channel is one sender task -> one receiver task. The sender pushes with direct
actor calls (`receiver.push.remote(channel, seq, payloads)`) and the receiver is a *synchronous,
single-threaded* actor. Ray documents ("Actor Task Execution Order") that such an actor executes
the calls of one submitter in submission order; a sender is one submitter and it submits under
its actor lock, so a channel is FIFO. (Async or threaded actors give no such guarantee.) As a
check, every push carries the sequence number of its first payload; the receiver verifies each
channel's numbers are contiguous and fails the task with `ChannelOrderError` otherwise, which a
failover repairs instead of corrupting state silently. Nothing on the data path uses
`max_task_retries`: a retried call could duplicate or reorder data.

Epochs. Task actors survive a failover and are redeployed for the next execution attempt, so
every data and credit call carries the sender's epoch and a receiver drops calls of any other
epoch (a push submitted just before a failover must not reach the restored task).

Flow control. Credits are counted by the pure `Task` (an output channel holds at most `credits`
buffers in flight). The receiver owes a credit for every buffer its task *consumed* (not merely
received: a buffer held back by barrier alignment keeps its credit, as in Flink). Owed credits
are returned in one `add_credits` call per sender after a round of work, once some channel owes
half its window (`threshold`): about one credit call per half window rather than one per data
call, busy or not (at a steady 5,000 records/s with 5 ms buffer timeouts, returning everything
whenever the receiver went idle meant one credit call per push). A sender never waits on credits
a quiet receiver holds: a channel whose sender has no credit left has all `credits` buffers in
flight or consumed, and once the receiver consumed them it owes the whole window >= threshold.
(A channel held back by alignment is consumed once its alignment ends.) Events (barriers,
cancellation markers, end of partition) need no credit.

In-process channels (`runtime.ray.slots`). A receiver hosted by the sender's own worker actor is
a `LocalSlot`: the push and the returned credits go straight into the peer's mailbox instead of
through Ray, and everything else above holds unchanged — the same sequence numbers, the same
credit counting in the pure `Task`, credits owed on consumption — so only the transport differs.
The payloads go over as the objects the sender queued: a buffer cut from records of one set of
plain fields hands the receiver the producer's list, and its Arrow batch is built only if
something asks for it (`runtime.records.messages.Buffer`); a Ray call pickles the batch. `calls`
counts Ray calls only; `local_calls` the in-process pushes; the receiver's `buffers_as_records`
the buffers that arrived without a batch.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any


class ChannelOrderError(RuntimeError):
    """A push arrived out of sequence on a channel (a transport bug, never expected)."""


class OutputChannels:
    """Sends a task's drained output: out channel -> (receiver actor, receiver's input channel),
    tagged with `epoch`.

    Consecutive payloads for one channel go in one call; each call carries the sequence number
    of its first payload. With a `delay` (a slow link, `vocabulary.links`) every drained batch is
    held that long and sent in order by a timer (`schedule(delay, callback)`, run under the
    actor's lock). A delay spike on one channel (`spike`, the `ChannelDelay` fault) holds what is
    sent on that channel in its window `extra` seconds longer; what follows on that channel
    queues behind it (FIFO), the other channels are not affected.
    """

    def __init__(self, routes: dict[int, tuple[Any, int]], epoch: int, *, delay: float = 0.0,
                 schedule: Callable[[float, Callable[[], None]], Any] | None = None) -> None:
        if delay > 0 and schedule is None:
            raise ValueError("OutputChannels: a delay needs a schedule function")
        self._routes = routes
        self._epoch = epoch
        self._next_seq: dict[int, int] = dict.fromkeys(routes, 0)
        self._delay = delay
        self._schedule = schedule
        self._held: deque[tuple[float, list[tuple[int, Any]]]] = deque()
        self.calls = 0
        #: `ChannelDelay`: out channel -> [(start, end, extra seconds)] (wall times)
        self._spikes: dict[int, list[tuple[float, float, float]]] = {}
        #: batches held by spikes or sent after one: (due, order, out channel, payloads)
        self._spiked: list[tuple[float, int, int, list[Any]]] = []
        self._order = itertools.count()
        self._last_due: dict[int, float] = {}
        self._release_at: float | None = None
        #: pushes to subtasks of the same worker (no Ray call)
        self.local_calls = 0

    def spike(self, out_index: int, start: float, end: float, extra: float) -> None:
        """`ChannelDelay`: what is sent on `out_index` in [start, end) is held `extra` s longer."""
        if self._schedule is None:
            raise ValueError("OutputChannels: a delay spike needs a schedule function")
        self._spikes.setdefault(out_index, []).append((start, end, extra))
        while self._held:  # from now on every batch goes the spiked way (`_send_spiked`), in order
            due, drained = self._held.popleft()
            self._hold(due, drained)

    def _hold(self, due: float, drained: list[tuple[int, Any]]) -> None:
        grouped: dict[int, list[Any]] = {}
        for out_index, payload in drained:
            grouped.setdefault(out_index, []).append(payload)
        for out_index, payloads in grouped.items():
            due_here = max(due, self._last_due.get(out_index, 0.0))
            self._last_due[out_index] = due_here
            heapq.heappush(self._spiked, (due_here, next(self._order), out_index, payloads))

    def send(self, drained: list[tuple[int, Any]]) -> None:
        if not drained:
            return
        if self._spikes:
            self._send_spiked(drained)
            return
        if self._delay > 0:
            self._held.append((time.time() + self._delay, drained))
            if len(self._held) == 1:
                self._schedule(self._delay, self._release)
            return
        self._push(drained)

    def _send_spiked(self, drained: list[tuple[int, Any]]) -> None:
        """Once a channel had a spike: each channel's batch is due after the link delay plus the
        spike it is sent in, never before the channel's previous batch (FIFO)."""
        now = time.time()
        grouped: dict[int, list[tuple[int, Any]]] = {}
        for out_index, payload in drained:
            grouped.setdefault(out_index, []).append((out_index, payload))
        for out_index, batch in grouped.items():
            extra = max((e for start, end, e in self._spikes.get(out_index, ()) if start <= now < end), default=0.0)
            self._hold(now + self._delay + extra, batch)
        self._release()

    def _release(self) -> None:
        """Send the held batches that are due, in order; wait for the next one."""
        now = time.time()
        while self._held and self._held[0][0] <= now:
            self._push(self._held.popleft()[1])
        if self._held:
            self._schedule(self._held[0][0] - now, self._release)
        while self._spiked and self._spiked[0][0] <= now:
            _, _, out_index, payloads = heapq.heappop(self._spiked)
            self._push([(out_index, p) for p in payloads])
        if self._spiked:
            due = self._spiked[0][0]
            if self._release_at is None or due < self._release_at or self._release_at <= now:
                self._release_at = due
                self._schedule(due - now, self._release)

    def _push(self, drained: list[tuple[int, Any]]) -> None:
        grouped: dict[int, list[Any]] = {}
        for out_index, payload in drained:
            grouped.setdefault(out_index, []).append(payload)
        for out_index, payloads in grouped.items():
            receiver, in_channel = self._routes[out_index]
            seq = self._next_seq[out_index]
            self._next_seq[out_index] = seq + len(payloads)
            receiver.push.remote(self._epoch, in_channel, seq, payloads)
            if receiver.local:
                self.local_calls += 1
            else:
                self.calls += 1


class InputChannels:
    """Receiver side: sequence checks per input channel, and credits owed to the senders.

    Args:
        senders: input channel -> (sender name, sender actor, the sender's output channel).
        receiver: this task's name (for error messages).
        epoch: the execution attempt, sent with returned credits.
        threshold: owed credits on one channel that make `return_credits` send.
        submit: how to submit the credit calls (default: at once, on the calling thread).
    """

    def __init__(self, senders: dict[int, tuple[str, Any, int]], receiver: str, epoch: int,
                 threshold: int = 1, submit: Callable[..., Any] | None = None) -> None:
        self._senders = senders
        #: submits a Ray call: `submit(fn, *args)` (a task actor hands its sender thread's, so
        #: the ~0.5 ms of CPU a submission costs is not spent on the work thread)
        self._submit = submit if submit is not None else (lambda fn, *args: fn(*args))
        self._epoch = epoch
        self._receiver = receiver
        self._next_seq: dict[int, int] = dict.fromkeys(senders, 0)
        self._owed: dict[int, int] = defaultdict(int)
        self._threshold = max(1, threshold)
        #: per input channel, buffers received and not consumed yet, and the most there ever were
        #: (credits bound it: a test checks in-process channels keep the bound)
        self._unconsumed: dict[int, int] = defaultdict(int)
        self.max_unconsumed = 0
        #: data buffers that arrived as the sender's records, without an Arrow batch
        self.buffers_as_records = 0

    def check(self, channel: int, seq: int, count: int) -> None:
        """Raises: ChannelOrderError when `seq` is not the next number on `channel`."""
        expected = self._next_seq.get(channel)
        if expected is None:
            raise ChannelOrderError(f"task {self._receiver}: push on unknown input channel {channel}")
        if seq != expected:
            sender = self._senders[channel][0]
            raise ChannelOrderError(
                f"task {self._receiver}: channel {channel} from {sender} delivered seq {seq}, expected {expected}"
            )
        self._next_seq[channel] = expected + count

    def received(self, channel: int, buffers: int, as_records: int = 0) -> None:
        """`buffers` data buffers (credit-bound payloads, not events) arrived on `channel`,
        `as_records` of them without an Arrow batch."""
        self.buffers_as_records += as_records
        n = self._unconsumed[channel] = self._unconsumed[channel] + buffers
        if n > self.max_unconsumed:
            self.max_unconsumed = n

    def consumed(self, channel: int) -> None:
        self._owed[channel] += 1
        self._unconsumed[channel] -= 1

    def return_credits(self, buffer_size: int | None = None) -> None:
        """Once some channel owes at least `threshold`, send every owed credit (one call per
        sender), with the buffer size this task asks its senders for (debloating; None: theirs)."""
        if not self._owed or max(self._owed.values()) < self._threshold:
            return
        by_sender: dict[str, tuple[Any, dict[int, int]]] = {}
        for channel, n in self._owed.items():
            name, handle, out_index = self._senders[channel]
            by_sender.setdefault(name, (handle, {}))[1][out_index] = n
        self._owed.clear()
        for handle, credits in by_sender.values():
            if handle.local:  # a peer in this worker: straight into its mailbox
                handle.add_credits.remote(self._epoch, credits, buffer_size)
            else:
                self._submit(handle.add_credits.remote, self._epoch, credits, buffer_size)
