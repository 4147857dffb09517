"""The simulator's network: data channels with credits, and control messages, in virtual time.

* Data: one FIFO per channel (wired from `JobGraph.channel_routes()`, as on Ray). Each message
  gets a seeded delay but is delivered no earlier than the previous message of its channel;
  `NetworkOptions.link_delays` slows everything a task sends (`vocabulary.links`), a
  `ChannelDelay` fault adds to one channel's delay, and a `ChannelStall` holds everything sent to
  a task until it ends.
* Credits: data consumes credits; a consumed buffer sends its credit back after a network delay
  (carrying the buffer size the receiver asks for: buffer debloating); a task whose outputs are
  out of credit stops stepping, so backpressure reaches the sources.
* Control messages (triggers, acknowledgements, notifications) take `control_delay` (or a delay
  drawn from a measured distribution) and meet the fault plan's lost, duplicated and delayed
  messages (`carry_control`; what becomes of the coordinator's is
  `runtime.jobmaster.coordination.control_plane`'s decision, of the tasks' acknowledgements
  `runtime.jobmaster.coordination.task_reports`').

Every delay is drawn from the executor's one `random.Random(seed)`, in event order, so a seed
replays the identical run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.records.messages import BufferOrEvent, CheckpointBarrier
from runtime.sim.costs import quantile
from vocabulary.handles import TaskId
from vocabulary.links import resolve_link_delays

if TYPE_CHECKING:
    from runtime.sim.executor import SimExecutor


@dataclass(frozen=True)
class NetworkOptions:
    """Virtual network and storage timing (seconds)."""

    #: per-message delay, drawn uniformly per message (FIFO per channel is kept regardless)
    delay_min: float = 0.0002
    delay_max: float = 0.002
    #: delay of control messages (triggers, acks, notifications)
    control_delay: float = 0.0005
    #: snapshot write: fixed latency plus size / bandwidth
    write_latency: float = 0.002
    write_bandwidth: float = 200e6
    #: None: every write takes `write_latency`; else each write's latency is drawn uniformly from
    #: [`write_latency`, `write_latency_max`] (a real store's spread: a checkpoint waits for its
    #: slowest subtask, so the spread lengthens it beyond the median write)
    write_latency_max: float | None = None
    #: delay of an acknowledgement reaching the coordinator (None: `control_delay`)
    ack_delay: float | None = None
    #: when given (ascending, the 0th to 100th percentiles at equal steps), each acknowledgement's
    #: delay is drawn from this distribution (inverse CDF, linear between points) instead of
    #: `ack_delay`: a real control path's long tail, which a checkpoint waiting for its slowest
    #: acknowledgement feels in its duration (p50 and p99)
    ack_delay_quantiles: tuple[float, ...] = ()
    #: the same for a trigger reaching a source (instead of `control_delay`): sources triggered
    #: at different times send barriers that arrive apart, which an aligned task waits out
    trigger_delay_quantiles: tuple[float, ...] = ()
    #: task name ("vertex[i]") or vertex name -> extra seconds on everything it sends on its output
    #: channels (a slow link, `vocabulary.links`)
    link_delays: dict[str, float] = field(default_factory=dict)


class SimNetwork:
    """The channels between the tasks of one `SimExecutor` and its control messages.

    Raises:
        ValueError: `options.link_delays` names a task or vertex the job does not have.
    """

    def __init__(self, sim: SimExecutor, options: NetworkOptions) -> None:
        self.sim = sim
        self.options = options
        self._link_delays = resolve_link_delays(options.link_delays, sim.task_ids)
        #: (sender, output channel) -> (receiver, input channel), and back (read by observers;
        #: refilled in place at each deployment)
        self.routes: dict[tuple[TaskId, int], tuple[TaskId, int]] = {}
        self.reverse: dict[tuple[TaskId, int], tuple[TaskId, int]] = {}
        #: when the last message of each (sender, output channel) arrives (FIFO per channel)
        self._last_delivery: dict[tuple[TaskId, int], float] = {}
        #: `ChannelStall`: nothing reaches the task before this time
        self._stalled_until: dict[TaskId, float] = {}

    def build_routes(self) -> None:
        self.routes.clear()
        self.reverse.clear()
        for route in self.sim.graph.channel_routes():
            self.routes[(route.sender, route.output_channel)] = (route.receiver, route.input_channel)
            self.reverse[(route.receiver, route.input_channel)] = (route.sender, route.output_channel)

    def reset(self) -> None:
        """A new deployment: nothing of the failed attempt is in flight."""
        self._last_delivery.clear()

    def stall_input(self, task_id: TaskId, duration: float) -> None:
        """`ChannelStall`: what is sent to `task_id` arrives `duration` from now at the earliest."""
        self._stalled_until[task_id] = self.sim.now + duration

    # ------------------------------------------------------------------ data and credits

    def send_outputs(self, task_id: TaskId) -> None:
        """Put everything `task_id` may send now (it has credit for) on its channels."""
        sim = self.sim
        task = sim.tasks.get(task_id)
        if task is None:
            return
        invariants = sim.invariants
        spikes = sim.schedule is not None and sim.schedule.delays_channels
        link_delay = self._link_delays.get(task_id, 0.0)
        options = self.options
        for out_index, payload in task.drain_sendable():
            receiver, in_ch = self.routes[(task_id, out_index)]
            key = (task_id, out_index)
            delay = sim.rng.uniform(options.delay_min, options.delay_max) + link_delay
            if spikes:
                extra = sim.schedule.channel_delay(receiver, in_ch, sim.now)  # type: ignore[union-attr]
                if extra:
                    sim.trace_event("fault", "ChannelDelay", str(receiver), in_ch, extra)
                    delay += extra
            when = max(sim.now + delay, self._last_delivery.get(key, 0.0),
                       self._stalled_until.get(receiver, 0.0))
            self._last_delivery[key] = when
            if invariants is not None:
                invariants.on_send(task_id, out_index, payload)
            sim.at(when, lambda r=receiver, c=in_ch, p=payload: self._deliver(r, c, p), sim.epoch, "net")

    def _deliver(self, receiver: TaskId, channel: int, payload: Any) -> None:
        sim = self.sim
        task = sim.tasks.get(receiver)
        if task is None:
            return
        stalls = sim.fault_actions
        if stalls.any_held and stalls.held(receiver, lambda: self._deliver(receiver, channel, payload)):
            return
        if sim.invariants is not None:
            sim.invariants.on_deliver(receiver, channel, payload)
        if isinstance(payload, CheckpointBarrier):
            sim.trace_barrier("barrier-in", payload.id, str(receiver), channel)
        try:
            task.push(BufferOrEvent(channel, payload))
        except Exception as exc:
            sim.master.task_failed(receiver, exc)
            return
        self.send_outputs(receiver)  # an overtaking (unaligned) barrier may have been forwarded
        sim.runner.schedule_run(receiver)

    def return_credit(self, epoch: int, receiver: TaskId, in_ch: int) -> None:
        """`receiver` consumed a buffer of `in_ch`: its credit goes back to the sender."""
        sim = self.sim
        sender, out_index = self.reverse[(receiver, in_ch)]
        receiving = sim.tasks.get(receiver)
        # buffer debloating: the credit carries the buffer size the receiver asks for
        buffer_size = receiving.announced_buffer_size if receiving is not None else None
        if sim.invariants is not None:
            sim.invariants.on_credit_returned(sender, out_index)

        def give() -> None:
            task = sim.tasks.get(sender)
            if task is None:
                return
            task.add_credit(out_index, buffer_size)
            if sim.invariants is not None:
                sim.invariants.on_credit_given(sender, out_index)
            self.send_outputs(sender)
            sim.runner.schedule_run(sender)

        sim.at(sim.now + sim.rng.uniform(self.options.delay_min, self.options.delay_max), give, epoch, "credit")

    # ------------------------------------------------------------------ control messages

    def control(self, epoch: int | None, fn: Callable[[], None]) -> None:
        """A control message no fault touches (declines, finished sources, commits)."""
        self.sim.at(self.sim.now + self.options.control_delay, fn, epoch, "control")

    def carry_control(self, kind: str, epoch: int | None, fn: Callable[[], None], copies: int = 1,
                      delay: float = 0.0) -> None:
        """Deliver a control message of `kind` (`fn` at its receiver) `copies` times (0: lost on
        the way), `delay` seconds later than its latency; a copy of an ended `epoch` is dropped."""
        sim = self.sim
        options = self.options
        if kind == "ack" and options.ack_delay_quantiles:  # drawn only then: a run without them draws the same numbers
            latency = quantile(options.ack_delay_quantiles, sim.rng.random())
        elif kind == "trigger" and options.trigger_delay_quantiles:
            latency = quantile(options.trigger_delay_quantiles, sim.rng.random())
        elif kind == "ack" and options.ack_delay is not None:
            latency = options.ack_delay
        else:
            latency = options.control_delay
        when = sim.now + latency + delay
        for copy in range(copies):
            sim.at(when + copy * options.control_delay, fn, epoch, "control")
