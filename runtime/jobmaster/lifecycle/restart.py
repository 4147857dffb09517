"""Applying a `RestartStrategy`: Flink's `RestartBackoffTimeStrategy`, shared by both executors.

Theory of operation
-------------------
An executor reports every global failover with `notify_failure(now)` (its own clock: virtual
seconds on the simulator, wall seconds on Ray), then asks `can_restart()`; if yes it waits
`backoff_time` before redeploying, else the job fails and `exhausted()` says why. Errors no
restart can fix (`vocabulary.errors.SuppressRestartsError`) never get here.

* fixed-delay: the n-th failure may restart while n <= attempts; the delay is constant.
* exponential-delay (Flink 1.19 `ExponentialDelayRestartBackoffTimeStrategy`): the first failure
  waits `initial_backoff`; each further one multiplies the delay by `backoff_multiplier` (capped
  at `max_backoff`) and moves it by a random +/- `jitter_factor` of itself. A failure that comes
  `reset_backoff_threshold` (plus the current backoff) after the previous one starts over:
  initial delay, attempt count 1. More than `attempts_before_reset_backoff` failures in a row
  fail the job. A poison record fails again right after every restart, so it exhausts the
  attempts within a few seconds; a transient fault is followed by healthy running.
* failure-rate (Flink's `FailureRateRestartBackoffTimeStrategy`): restart after `delay` while at
  most `max_failures_per_interval` failures fall within the last `failure_rate_interval` seconds.

Pure: time comes in as arguments, randomness from the `random.Random` the executor seeds.
"""

from __future__ import annotations

import random
from collections import deque

from vocabulary.options import EXPONENTIAL_DELAY, FAILURE_RATE, RestartStrategy


class RestartBackoff:
    """The restart decisions of one job under `strategy` (see the module docstring).

    Args:
        strategy: the job's restart strategy.
        rng: source of the exponential-delay jitter (seed it for a replayable run).
    """

    def __init__(self, strategy: RestartStrategy, rng: random.Random | None = None) -> None:
        self.strategy = strategy
        self._rng = rng if rng is not None else random.Random(0)
        #: failures reported so far (every kind)
        self.num_failures = 0
        #: exponential-delay: failures since the last reset; fixed-delay: all failures
        self._in_a_row = 0
        self._backoff = strategy.delay if strategy.kind != EXPONENTIAL_DELAY else strategy.initial_backoff
        self._last_failure: float | None = None
        self._window: deque[float] = deque()

    @property
    def backoff_time(self) -> float:
        """Seconds to wait before the restart of the failure just reported."""
        return self._backoff

    def notify_failure(self, now: float) -> None:
        """A failover began at `now` (seconds)."""
        s = self.strategy
        self.num_failures += 1
        if s.kind == EXPONENTIAL_DELAY:
            last = self._last_failure
            if last is None or now - last >= s.reset_backoff_threshold + self._backoff:
                self._in_a_row = 1
                self._backoff = s.initial_backoff
            else:
                self._in_a_row += 1
                grown = min(self._backoff * s.backoff_multiplier, s.max_backoff)
                jitter = grown * s.jitter_factor * self._rng.uniform(-1.0, 1.0) if s.jitter_factor else 0.0
                self._backoff = min(max(grown + jitter, 0.0), s.max_backoff)
        elif s.kind == FAILURE_RATE:
            self._window.append(now)
            while self._window and now - self._window[0] > s.failure_rate_interval:
                self._window.popleft()
        else:
            self._in_a_row += 1
        self._last_failure = now

    def can_restart(self) -> bool:
        """Whether the failure just reported may be restarted."""
        if self.strategy.kind == FAILURE_RATE:
            return len(self._window) <= self.strategy.max_failures_per_interval
        return self._in_a_row <= self.strategy.attempts

    def exhausted(self) -> str:
        """Why `can_restart()` said no, naming the strategy (for the job's error message)."""
        s = self.strategy
        if s.kind == FAILURE_RATE:
            why = (f"{len(self._window)} failures within {s.failure_rate_interval:g} s "
                   f"(max_failures_per_interval={s.max_failures_per_interval})")
        elif s.kind == EXPONENTIAL_DELAY:
            why = (f"{self._in_a_row} failures in a row, none {s.reset_backoff_threshold:g} s after the previous "
                   f"one (attempts_before_reset_backoff={s.attempts})")
        elif s.attempts == 0:
            why = "restarts are off"
        else:
            why = f"{self._in_a_row} failures (attempts={s.attempts})"
        return f"restart strategy {s!r} gave up: {why}"

    def __repr__(self) -> str:
        return f"RestartBackoff({self.strategy!r}, failures={self.num_failures}, backoff={self._backoff:g})"
