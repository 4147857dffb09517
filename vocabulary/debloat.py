"""Buffer debloating (Flink FLIP-183): size a task's in-flight input to a target time.

Theory of operation
-------------------
Under backpressure every credit of every input channel holds a full buffer, so an aligned
barrier waits behind `channels x credits x buffer_size` records and an unaligned one persists
them. Most of that data buys no throughput: a slow task only needs enough queued input to stay
busy until the next buffer arrives. Debloating keeps the number of buffers (the credit window)
and shrinks each buffer, like Flink: the receiving task measures its throughput, wants
`throughput x target` records in flight over all its input channels, and announces the buffer
size that gives (`desired / (channels x credits)`) to its senders, who cut their buffers for it
at that size. The configured `buffer_size` stays the upper bound, so in-flight data never exceeds
the credit window it had without debloating.

* `ThroughputMeter`: records consumed per second of time the task had input; time it spent idle
  (nothing to consume) is left out, as in Flink, so a task with headroom measures its capacity
  rather than its arrival rate and keeps large buffers.
* `BufferDebloater`: every `period` seconds, the new size is an exponential moving average over
  `samples` periods (one step may at most double the size, so it grows as fast as it shrinks),
  clamped to [`min_buffer_size`, `buffer_size`]; a change smaller than `threshold` of the last
  announced size is not announced (min and max always are).

Sizes count records (our buffers are cut by record count; Flink's by bytes). Time is injected:
every method takes `now`. Pure: no clock, no I/O.

Target. The in-flight data must outlast a credit round trip (else the receiver starves and
throughput drops) and be short next to the checkpoint interval (it is what an aligned barrier
waits behind). Flink's default, 1 s, suits production jobs checkpointing every few minutes.
Here `DEFAULT_TARGET` is 100 ms, measured on Ray with 2 loaded cores: a credit round trip there
is Ray calls and thread hand-offs, tens of ms under load, and under backpressure targets of
10-40 ms cost the slow subtask 35-70 % of its throughput, 100 ms about 5 %. Where a round trip
is ~2 ms and free of CPU (the simulator's network), 10 ms costs ~3 %.
"""

from __future__ import annotations

from dataclasses import dataclass

#: seconds of the receiver's throughput kept in flight (see the module docstring)
DEFAULT_TARGET = 0.1


class BufferDebloatError(ValueError):
    """An invalid debloating option (the message names it)."""


@dataclass(frozen=True)
class BufferDebloatConfig:
    """Debloating options (Flink's `taskmanager.network.memory.buffer-debloat.*`).

    Attributes:
        target: seconds of measured throughput to keep in flight over all input channels.
        period: seconds between recalculations of the buffer size.
        samples: periods the moving average spans (Flink: 20; fewer here, as runs are short).
        threshold: smallest relative change announced (0.25 = 25 %).
        min_buffer_size: smallest buffer, in records.
    """

    target: float = DEFAULT_TARGET
    period: float = 0.01
    samples: int = 10
    threshold: float = 0.25
    min_buffer_size: int = 1

    def validate(self) -> None:
        """Raises: BufferDebloatError naming the first bad option."""
        for name in ("target", "period"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise BufferDebloatError(f"buffer debloating: {name} must be a number of seconds > 0, got {value!r}")
        for name in ("samples", "min_buffer_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BufferDebloatError(f"buffer debloating: {name} must be an integer >= 1, got {value!r}")
        value = self.threshold
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
            raise BufferDebloatError(f"buffer debloating: threshold must be a fraction in [0, 1), got {value!r}")


class ThroughputMeter:
    """Records per second over the time the task had input (Flink's `ThroughputCalculator`)."""

    def __init__(self) -> None:
        self._records = 0
        self._measured = 0.0
        self._since: float | None = None  # None: paused (idle)
        self.last_rate = 0.0

    def consumed(self, records: int, now: float) -> None:
        """`records` were taken from the input; measuring resumes if it was paused."""
        if self._since is None:
            self._since = now
        self._records += records

    def idle(self, now: float) -> None:
        """The task ran out of input: its idle time until the next `consumed` is not measured."""
        if self._since is not None:
            self._measured += max(0.0, now - self._since)
            self._since = None

    def rate(self, now: float) -> float:
        """The throughput since the last call (the previous one if no time was measured)."""
        if self._since is not None:
            self._measured += max(0.0, now - self._since)
            self._since = now
        if self._measured > 0:
            self.last_rate = self._records / self._measured
        self._records, self._measured = 0, 0.0
        return self.last_rate


class BufferDebloater:
    """The buffer size a task announces to its senders (see the module docstring).

    Args:
        config: the debloating options.
        max_buffer_size: the job's buffer size (records): the upper bound and the start.
        num_buffers: buffers in flight at most over all input channels (channels x credits).

    Raises:
        BufferDebloatError: a bad option, or `num_buffers` < 1.
    """

    def __init__(self, config: BufferDebloatConfig, max_buffer_size: int, num_buffers: int) -> None:
        config.validate()
        if num_buffers < 1:
            raise BufferDebloatError(f"buffer debloating needs at least one input buffer, got {num_buffers!r}")
        self.config = config
        self.max_buffer_size = max_buffer_size
        self.min_buffer_size = min(config.min_buffer_size, max_buffer_size)
        self.num_buffers = num_buffers
        self.meter = ThroughputMeter()
        self._alpha = 2.0 / (config.samples + 1)
        self._average = float(max_buffer_size)
        #: the size last announced to the senders (records)
        self.buffer_size = max_buffer_size
        #: the smallest size it announced (`buffer_size` is the latest)
        self.smallest = max_buffer_size
        self._next_at: float | None = None

    def consumed(self, records: int, now: float) -> int | None:
        """`records` were consumed at `now`; returns a new buffer size to announce, or None."""
        self.meter.consumed(records, now)
        if self._next_at is None:
            self._next_at = now + self.config.period
            return None
        if now < self._next_at:
            return None
        self._next_at = now + self.config.period
        return self.recalculate(self.meter.rate(now))

    def idle(self, now: float) -> None:
        """The task has no input to consume (its idle time does not count as throughput)."""
        self.meter.idle(now)

    def recalculate(self, throughput: float) -> int | None:
        """One step of the moving average for `throughput` (records/s); the new size if it is
        worth announcing, else None."""
        desired = throughput * self.config.target / self.num_buffers
        step = min(desired, 2.0 * self._average)
        self._average += self._alpha * (step - self._average)
        self._average = max(self.min_buffer_size, min(self._average, self.max_buffer_size))
        size = round(self._average)
        if self._skip(size):
            return None
        self.buffer_size = size
        self.smallest = min(self.smallest, size)
        return size

    def _skip(self, size: int) -> bool:
        if size == self.buffer_size:
            return True
        if size <= self.min_buffer_size or size >= self.max_buffer_size:
            return False
        return abs(size - self.buffer_size) < self.buffer_size * self.config.threshold
