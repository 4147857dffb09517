"""Checkpointing and restart options, validated up front.

A `CheckpointConfig` is checked when it is built: an invalid value raises `InvalidOptionError`
whose message names the option, the value given and what is allowed, so a user learns about a
typo in `enable_checkpointing(...)` before a job starts rather than from a strange run.

Combinations follow Flink's rules where Flink has one:

* `AT_LEAST_ONCE` uses the barrier tracker, which never aligns, so `unaligned=True` and
  `alignment_timeout` make no sense with it;
* `alignment_timeout` turns a slow *aligned* checkpoint unaligned; with `unaligned=True` every
  checkpoint is unaligned from the start, so the two are not combined.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any


class InvalidOptionError(ValueError):
    """An option has a value outside its allowed range (the message names option and value)."""

    def __init__(self, option: str, value: Any, allowed: str) -> None:
        super().__init__(f"invalid checkpoint option {option}={value!r}: {allowed}")
        self.option = option
        self.value = value


class CheckpointingMode(enum.Enum):
    """Which guarantee barriers give: aligned (or unaligned) exactly-once, or tracked at-least-once."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"

    @classmethod
    def parse(cls, value: CheckpointingMode | str) -> CheckpointingMode:
        """Accept the enum or its name/value in any case (`"exactly_once"`, `"AT_LEAST_ONCE"`)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            for mode in cls:
                if mode.value == key:
                    return mode
        allowed = ", ".join(m.name for m in cls)
        raise InvalidOptionError("mode", value, f"must be one of {allowed}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_number(option: str, value: Any, *, minimum: float, strict: bool, optional: bool = False) -> None:
    if value is None and optional:
        return
    bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
    none_ok = " (or None)" if optional else ""
    if not _is_number(value):
        raise InvalidOptionError(option, value, f"must be a finite number of seconds {bound}{none_ok}")
    if value < minimum or (strict and value == minimum):
        raise InvalidOptionError(option, value, f"must be {bound}{none_ok}")


def _check_int(option: str, value: Any, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    none_ok = " (or None)" if optional else ""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidOptionError(option, value, f"must be an integer >= {minimum}{none_ok}")
    if value < minimum:
        raise InvalidOptionError(option, value, f"must be >= {minimum}{none_ok}")


#: seconds one call to a remote checkpoint filesystem may take (`CheckpointConfig.storage_timeout`):
#: far above a healthy object store's latency for one file (S3/GCS answer in tens to hundreds of
#: milliseconds; a 64 MiB merged state file uploads in ~1-2 s), far below pyarrow's retry budgets
#: (minutes), twice ZooKeeper's operation timeout: an unreachable URI fails the job within seconds
DEFAULT_STORAGE_TIMEOUT = 10.0

#: values of `CheckpointConfig.state_backend`
STATE_BACKENDS = ("memory", "incremental")


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    """How a job checkpoints. Validated on construction (`validate()` re-checks).

    Attributes:
        interval: seconds between periodic checkpoints; None disables periodic checkpointing.
        mode: EXACTLY_ONCE (aligner / unaligned handler) or AT_LEAST_ONCE (tracker).
        unaligned: take exactly-once checkpoints unaligned (barriers overtake in-flight data).
        alignment_timeout: seconds an aligned checkpoint may align before it turns unaligned.
        timeout: seconds after which a pending checkpoint is aborted (TIMEOUT).
        min_pause: seconds that must pass after a completion before the next periodic trigger.
        max_concurrent: checkpoints that may be pending at once.
        tolerable_failures: consecutive counted failures tolerated; one more fails the job.
        retained: completed checkpoints kept by the store.
        storage: a `pyarrow.fs` URI or local path for checkpoint files; None keeps them in memory.
        storage_timeout: seconds one call to a remote `storage` (read, write, list, delete) may
            take before it fails naming the URI (`DEFAULT_STORAGE_TIMEOUT`);
            local directories are not bounded.
        max_aligned_bytes: bytes an aligning task may hold back before the checkpoint aborts.
        state_backend: "memory" (full snapshots) or "incremental" (changed key groups only, the
            rest shared across checkpoints through the shared-state registry).
        file_merging: pack each task's snapshot pieces into one physical file per checkpoint.
        max_file_size: bytes per merged physical file before another is started.
        compaction_threshold: merged shared files whose space amplification exceeds this are
            compacted at the next checkpoint (None: never).
    """

    interval: float | None = None
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    unaligned: bool = False
    alignment_timeout: float | None = None
    timeout: float = 600.0
    min_pause: float = 0.0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    retained: int = 1
    storage: str | None = None
    storage_timeout: float = DEFAULT_STORAGE_TIMEOUT
    max_aligned_bytes: int | None = None
    state_backend: str = "memory"
    file_merging: bool = False
    max_file_size: int = 64 << 20
    compaction_threshold: float | None = 2.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", CheckpointingMode.parse(self.mode))
        self.validate()

    @property
    def enabled(self) -> bool:
        """True when periodic checkpointing is on."""
        return self.interval is not None

    def validate(self) -> None:
        """Check every option and their combinations.

        Raises:
            InvalidOptionError: naming the first bad option, its value and the allowed range.
        """
        _check_number("interval", self.interval, minimum=0, strict=True, optional=True)
        if not isinstance(self.mode, CheckpointingMode):
            CheckpointingMode.parse(self.mode)
        if not isinstance(self.unaligned, bool):
            raise InvalidOptionError("unaligned", self.unaligned, "must be True or False")
        if self.unaligned and self.mode is CheckpointingMode.AT_LEAST_ONCE:
            raise InvalidOptionError(
                "unaligned", self.unaligned, "unaligned checkpoints need mode=EXACTLY_ONCE (got AT_LEAST_ONCE)"
            )
        _check_number("alignment_timeout", self.alignment_timeout, minimum=0, strict=False, optional=True)
        if self.alignment_timeout is not None:
            if self.mode is CheckpointingMode.AT_LEAST_ONCE:
                raise InvalidOptionError(
                    "alignment_timeout",
                    self.alignment_timeout,
                    "only applies to aligned checkpoints with mode=EXACTLY_ONCE (got AT_LEAST_ONCE)",
                )
            if self.unaligned:
                raise InvalidOptionError(
                    "alignment_timeout",
                    self.alignment_timeout,
                    "turns aligned checkpoints unaligned; it cannot be combined with unaligned=True",
                )
        _check_number("timeout", self.timeout, minimum=0, strict=True)
        _check_number("min_pause", self.min_pause, minimum=0, strict=False)
        _check_int("max_concurrent", self.max_concurrent, minimum=1)
        _check_int("tolerable_failures", self.tolerable_failures, minimum=0)
        _check_int("retained", self.retained, minimum=1)
        if self.storage is not None and (not isinstance(self.storage, str) or not self.storage.strip()):
            raise InvalidOptionError(
                "storage", self.storage, "must be a pyarrow.fs URI or a local path (or None for memory)"
            )
        _check_number("storage_timeout", self.storage_timeout, minimum=0, strict=True)
        _check_int("max_aligned_bytes", self.max_aligned_bytes, minimum=1, optional=True)
        if self.state_backend not in STATE_BACKENDS:
            raise InvalidOptionError("state_backend", self.state_backend,
                                     f"must be one of {', '.join(repr(b) for b in STATE_BACKENDS)}")
        if not isinstance(self.file_merging, bool):
            raise InvalidOptionError("file_merging", self.file_merging, "must be True or False")
        _check_int("max_file_size", self.max_file_size, minimum=1)
        threshold = self.compaction_threshold
        if threshold is not None and (not _is_number(threshold) or threshold <= 1):
            raise InvalidOptionError("compaction_threshold", threshold,
                                     "must be a space amplification > 1 (or None to disable compaction)")


#: `RestartStrategy.kind` values (Flink's `restart-strategy.type` names)
FIXED_DELAY = "fixed-delay"
EXPONENTIAL_DELAY = "exponential-delay"
FAILURE_RATE = "failure-rate"
RESTART_KINDS = (FIXED_DELAY, EXPONENTIAL_DELAY, FAILURE_RATE)


@dataclass(frozen=True, slots=True)
class RestartStrategy:
    """What to do when a task fails (Flink's `restart-strategy.*` options), one of three kinds:

    * ``fixed_delay(attempts, delay)``: restart at most `attempts` times, `delay` seconds apart;
      ``no_restart()`` is ``fixed_delay(0, 0)``.
    * ``exponential_delay(...)``: wait `initial_backoff`, then `backoff_multiplier` times longer
      after each further failure (at most `max_backoff`, +/- `jitter_factor`); a job that ran
      `reset_backoff_threshold` seconds without failing starts over at `initial_backoff`; more than
      `attempts_before_reset_backoff` failures in a row (without such a reset) fail the job.
    * ``failure_rate(...)``: restart after `delay` unless more than `max_failures_per_interval`
      failures happened within `failure_rate_interval` seconds.

    A deterministic fault (a record a function always rejects) fails again right after every
    restart, so the last two give up after a few quick attempts, while a transient fault, which
    does not come back at once, is restarted past. Build with the class methods; the fields of the
    other kinds keep their defaults. `runtime.jobmaster.lifecycle.restart.RestartBackoff` applies a strategy.
    """

    attempts: int = 0
    delay: float = 0.0
    kind: str = FIXED_DELAY
    initial_backoff: float = 0.1
    max_backoff: float = 60.0
    backoff_multiplier: float = 1.5
    reset_backoff_threshold: float = 3600.0
    jitter_factor: float = 0.1
    max_failures_per_interval: int = 1
    failure_rate_interval: float = 60.0

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def fixed_delay(cls, attempts: int, delay: float) -> RestartStrategy:
        """Restart at most `attempts` times, waiting `delay` seconds before each restart.

        Raises:
            InvalidOptionError: attempts is not an integer >= 0 or delay is not a number >= 0.
        """
        return cls(attempts, delay)

    @classmethod
    def no_restart(cls) -> RestartStrategy:
        """Fail the job on the first task failure."""
        return cls(0, 0.0)

    @classmethod
    def exponential_delay(cls, initial_backoff: float = 0.1, max_backoff: float = 60.0,
                          backoff_multiplier: float = 1.5, reset_backoff_threshold: float = 3600.0,
                          jitter_factor: float = 0.1, attempts_before_reset_backoff: int = 5) -> RestartStrategy:
        """Restart with exponentially growing delays (Flink's `exponential-delay`, its default since 1.19).

        Defaults are Flink's except two: `initial_backoff` 0.1 s (Flink: 1 s; a barrierflow job
        redeploys in well under a second, and the previous default waited 0.1 s) and
        `attempts_before_reset_backoff` 5 (Flink: unlimited), so a record a function always
        rejects fails the job after 5 restarts (~1.3 s of backoff in all) instead of looping.

        Args:
            initial_backoff: seconds before the first restart (and after a reset).
            max_backoff: the delay never grows beyond this.
            backoff_multiplier: factor (>= 1) applied to the delay after each further failure.
            reset_backoff_threshold: seconds without a failure after which the delay and the
                attempt count start over.
            jitter_factor: each delay is moved by a random fraction in [-jitter, +jitter] of itself
                (seeded on the simulator), so restarts of many jobs do not line up.
            attempts_before_reset_backoff: restarts allowed in a row; one more failure before a
                reset fails the job.

        Raises:
            InvalidOptionError: naming the option out of range.
        """
        return cls(attempts_before_reset_backoff, 0.0, EXPONENTIAL_DELAY, initial_backoff=initial_backoff,
                   max_backoff=max_backoff, backoff_multiplier=backoff_multiplier,
                   reset_backoff_threshold=reset_backoff_threshold, jitter_factor=jitter_factor)

    @classmethod
    def failure_rate(cls, max_failures_per_interval: int = 1, failure_rate_interval: float = 60.0,
                     delay: float = 1.0) -> RestartStrategy:
        """Restart after `delay` seconds as long as at most `max_failures_per_interval` failures
        happened in the last `failure_rate_interval` seconds (Flink's `failure-rate`, its defaults).

        Raises:
            InvalidOptionError: naming the option out of range.
        """
        return cls(0, delay, FAILURE_RATE, max_failures_per_interval=max_failures_per_interval,
                   failure_rate_interval=failure_rate_interval)

    @property
    def attempts_before_reset_backoff(self) -> int:
        """exponential-delay: restarts allowed in a row (stored in `attempts`)."""
        return self.attempts

    def validate(self) -> None:
        """Raises: InvalidOptionError naming the option (`restart attempts`, `restart delay`,
        `restart initial_backoff`...), its value and the allowed range."""
        if self.kind not in RESTART_KINDS:
            raise InvalidOptionError("restart strategy", self.kind, f"must be one of {', '.join(RESTART_KINDS)}")
        attempts = "restart attempts_before_reset_backoff" if self.kind == EXPONENTIAL_DELAY else "restart attempts"
        _check_int(attempts, self.attempts, minimum=0)
        _check_number("restart delay", self.delay, minimum=0, strict=False)
        _check_number("restart initial_backoff", self.initial_backoff, minimum=0, strict=False)
        _check_number("restart max_backoff", self.max_backoff, minimum=0, strict=False)
        if self.max_backoff < self.initial_backoff:
            raise InvalidOptionError("restart max_backoff", self.max_backoff,
                                     f"must be >= initial_backoff ({self.initial_backoff:g})")
        if not _is_number(self.backoff_multiplier) or self.backoff_multiplier < 1:
            raise InvalidOptionError("restart backoff_multiplier", self.backoff_multiplier, "must be a number >= 1")
        _check_number("restart reset_backoff_threshold", self.reset_backoff_threshold, minimum=0, strict=False)
        if not _is_number(self.jitter_factor) or not 0 <= self.jitter_factor <= 1:
            raise InvalidOptionError("restart jitter_factor", self.jitter_factor, "must be a number between 0 and 1")
        _check_int("restart max_failures_per_interval", self.max_failures_per_interval, minimum=1)
        _check_number("restart failure_rate_interval", self.failure_rate_interval, minimum=0, strict=True)

    @property
    def restarts(self) -> bool:
        """Whether a failure can ever be restarted."""
        return self.kind == FAILURE_RATE or self.attempts > 0

    def can_restart(self, num_restarts: int) -> bool:
        """fixed-delay: whether another restart is allowed after `num_restarts` restarts already
        made (the other kinds depend on when failures happened: `runtime.jobmaster.lifecycle.restart.RestartBackoff`)."""
        return num_restarts < self.attempts

    def __repr__(self) -> str:
        if self.kind == EXPONENTIAL_DELAY:
            return (f"RestartStrategy.exponential_delay(initial_backoff={self.initial_backoff:g}, "
                    f"max_backoff={self.max_backoff:g}, backoff_multiplier={self.backoff_multiplier:g}, "
                    f"reset_backoff_threshold={self.reset_backoff_threshold:g}, jitter_factor={self.jitter_factor:g}, "
                    f"attempts_before_reset_backoff={self.attempts})")
        if self.kind == FAILURE_RATE:
            return (f"RestartStrategy.failure_rate(max_failures_per_interval={self.max_failures_per_interval}, "
                    f"failure_rate_interval={self.failure_rate_interval:g}, delay={self.delay:g})")
        if self.attempts == 0:
            return "RestartStrategy.no_restart()"
        return f"RestartStrategy.fixed_delay(attempts={self.attempts}, delay={self.delay:g})"
