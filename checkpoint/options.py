"""Checkpointing and restart options, validated up front (DESIGN §4).

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


@dataclass(frozen=True, slots=True)
class RestartStrategy:
    """What to do when a task fails: restart up to `attempts` times, `delay` seconds apart.

    Build with `RestartStrategy.fixed_delay(attempts, delay)` or `RestartStrategy.no_restart()`.
    """

    attempts: int = 0
    delay: float = 0.0

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

    def validate(self) -> None:
        """Raises: InvalidOptionError naming `restart attempts` or `restart delay`."""
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool) or self.attempts < 0:
            raise InvalidOptionError("restart attempts", self.attempts, "must be an integer >= 0")
        _check_number("restart delay", self.delay, minimum=0, strict=False)

    @property
    def restarts(self) -> bool:
        return self.attempts > 0

    def can_restart(self, num_restarts: int) -> bool:
        """Whether another restart is allowed after `num_restarts` restarts already made."""
        return num_restarts < self.attempts
