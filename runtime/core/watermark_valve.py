"""`StatusWatermarkValve`: a task's input watermark from its channels' watermarks and statuses.

Theory of operation (Flink's `StatusWatermarkValve`)
---------------------------------------------------
Every input channel has a watermark (initially `-inf`), a status (active or idle) and an
*aligned* flag: an active channel whose watermark has caught up with the valve's last output.
The valve's watermark is the minimum over the aligned channels; it is output only when it rises
above the last output, so it never goes backwards, and nothing is output before every active
channel delivered a watermark (the minimum is `-inf` until then: a restored task waits for all
of its inputs).

* An idle channel leaves the minimum; when every channel is idle the valve outputs the maximum
  watermark over all channels (if the last channel to go idle was holding it back) and then the
  idle status. Watermarks are ignored on idle channels and while the whole valve is idle.
* A channel becoming active again is aligned only once its watermark is at or above the last
  output, so a lagging channel coming back cannot pull the minimum back; the valve outputs the
  active status if it was idle.
* A channel that ended (its end of partition) is set active at `+inf`: it no longer holds back
  the minimum, and once every channel ended the valve's watermark is `+inf`.

The valve only decides; it returns what to output and knows nothing of the task. A task whose
operator has several logical inputs (a two-input operator) keeps one valve per input and combines
their outputs with `CombinedWatermark` (Flink's `IndexedCombinedWatermarkStatus`): the minimum
over the inputs that are not idle, never backwards, idle once every input is. Pure.
"""

from __future__ import annotations

import math

from runtime.records.messages import Watermark, WatermarkStatus

__all__ = ["CombinedWatermark", "StatusWatermarkValve"]

Output = list[Watermark | WatermarkStatus]


class StatusWatermarkValve:
    """Combines the watermarks and statuses of `num_channels` input channels.

    Raises:
        ValueError: `num_channels` < 1.
    """

    def __init__(self, num_channels: int) -> None:
        if isinstance(num_channels, bool) or not isinstance(num_channels, int) or num_channels < 1:
            raise ValueError(f"StatusWatermarkValve: num_channels must be a positive int, got {num_channels!r}")
        self.num_channels = num_channels
        self.watermarks: list[float] = [-math.inf] * num_channels
        self.idle: list[bool] = [False] * num_channels
        self.aligned: list[bool] = [True] * num_channels
        #: the last watermark output (`-inf`: none yet)
        self.last_output = -math.inf
        #: whether the last status output was idle
        self.is_idle = False

    def input_watermark(self, channel: int, timestamp: float) -> Output:
        """Watermark `timestamp` arrived on `channel`; returns what to output (at most one watermark)."""
        if self.is_idle or self.idle[channel] or not timestamp > self.watermarks[channel]:
            return []
        self.watermarks[channel] = timestamp
        if not self.aligned[channel] and timestamp >= self.last_output:
            self.aligned[channel] = True
        return self._new_minimum()

    def input_status(self, channel: int, status: WatermarkStatus) -> Output:
        """A watermark status arrived on `channel`; returns what to output."""
        out: Output = []
        if status.idle and not self.idle[channel]:
            self.idle[channel] = True
            self.aligned[channel] = False
            if all(self.idle):
                if self.watermarks[channel] == self.last_output:
                    out += self._maximum()
                self.is_idle = True
                out.append(WatermarkStatus.IDLE)  # type: ignore[attr-defined]
            elif self.watermarks[channel] == self.last_output:
                out += self._new_minimum()
        elif not status.idle and self.idle[channel]:
            self.idle[channel] = False
            if self.watermarks[channel] >= self.last_output:
                self.aligned[channel] = True
            if self.is_idle:
                self.is_idle = False
                out.append(WatermarkStatus.ACTIVE)  # type: ignore[attr-defined]
        return out

    def end_of_partition(self, channel: int) -> Output:
        """`channel` ended: it counts as active at `+inf` from now on."""
        out = self.input_status(channel, WatermarkStatus.ACTIVE)  # type: ignore[attr-defined]
        return out + self.input_watermark(channel, math.inf)

    def _new_minimum(self) -> Output:
        candidates = [w for w, aligned in zip(self.watermarks, self.aligned) if aligned]
        if candidates and min(candidates) > self.last_output:
            self.last_output = min(candidates)
            return [Watermark(self.last_output)]
        return []

    def _maximum(self) -> Output:
        highest = max(self.watermarks)
        if highest > self.last_output:
            self.last_output = highest
            return [Watermark(highest)]
        return []

    def __repr__(self) -> str:
        return (f"StatusWatermarkValve(last_output={self.last_output}, idle={self.is_idle}, "
                f"channels={list(zip(self.watermarks, self.idle))})")


class CombinedWatermark:
    """The watermark of an operator with `num_inputs` logical inputs, each fed a valve's output."""

    def __init__(self, num_inputs: int) -> None:
        self.watermarks = [-math.inf] * num_inputs
        self.idle = [False] * num_inputs
        self.last_output = -math.inf
        self.is_idle = False

    def update(self, index: int, outputs: Output) -> Output:
        """Input `index`'s valve output `outputs`; returns what the operator gets."""
        out: Output = []
        for event in outputs:
            if isinstance(event, Watermark):
                self.watermarks[index] = event.timestamp
            else:
                self.idle[index] = event.idle
            if all(self.idle):
                if not self.is_idle:
                    self.is_idle = True
                    out.append(WatermarkStatus.IDLE)  # type: ignore[attr-defined]
                continue
            if self.is_idle:
                self.is_idle = False
                out.append(WatermarkStatus.ACTIVE)  # type: ignore[attr-defined]
            combined = min(w for w, idle in zip(self.watermarks, self.idle) if not idle)
            if combined > self.last_output:
                self.last_output = combined
                out.append(Watermark(combined))
        return out
