"""What-if: predict a calibrated job under other settings, side by side with its baseline.

A `Variant` changes one thing of the job as its builder made it (the baseline): the
checkpointing mode, the alignment timeout, buffer debloating, the parallelism, the checkpoint
interval, or a task made slower. Each runs on the simulator with the same profile
(`runtime.calibration.predict`), so the differences are the model's answer to "what if".
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.calibration.predict import METRICS, figures, predict
from runtime.calibration.profile import CostProfile
from runtime.jobmaster.result import JobFailedError
from runtime.sim.saturation import SaturationError

#: checkpointing modes a variant can ask for
MODES = ("none", "aligned", "unaligned", "at-least-once")


@dataclass(frozen=True)
class Variant:
    """One setting changed (None: as the builder made it)."""

    name: str
    mode: str | None = None
    alignment_timeout: float | None = None
    debloat_target: float | None = None
    parallelism: int | None = None
    interval: float | None = None
    #: task or vertex name -> slowdown factor of its steps
    slow: dict[str, float] = field(default_factory=dict)

    def apply(self, env: Any) -> Any:
        """Change `env` (a freshly built job) as this variant says; returns it."""
        from vocabulary.options import CheckpointingMode

        config = env.checkpoint_config
        changes: dict[str, Any] = {}
        if self.mode is not None:
            if self.mode not in MODES:
                raise ValueError(f"what-if variant {self.name!r}: mode must be one of {', '.join(MODES)}, "
                                 f"got {self.mode!r}")
            if self.mode == "none":
                changes["interval"] = None
            else:
                at_least_once = self.mode == "at-least-once"
                changes.update(mode=CheckpointingMode.AT_LEAST_ONCE if at_least_once else CheckpointingMode.EXACTLY_ONCE,
                               unaligned=self.mode == "unaligned", alignment_timeout=None)
        if self.alignment_timeout is not None:
            changes.update(mode=CheckpointingMode.EXACTLY_ONCE, unaligned=False,
                           alignment_timeout=self.alignment_timeout)
        if self.interval is not None:
            changes["interval"] = self.interval
        if changes:
            if "interval" not in changes and not config.enabled:
                changes["interval"] = 0.1
            env.checkpoint_config = dataclasses.replace(config, **changes)
            env.checkpoint_config.validate()
        if self.debloat_target is not None:
            env.set_buffer_debloating(target=self.debloat_target)
        if self.parallelism is not None:
            env.parallelism = self.parallelism
        return env


def variants(*, modes: Sequence[str] = (), unaligned: bool = False, alignment_timeout: float | None = None,
             debloat_target: float | None = None, parallelism: int | None = None, interval: float | None = None,
             slow: dict[str, float] | None = None) -> list[Variant]:
    """One variant per option given (and per mode)."""
    out = [Variant(f"mode={m}", mode=m) for m in modes]
    if unaligned and "unaligned" not in modes:
        out.append(Variant("unaligned", mode="unaligned"))
    if alignment_timeout is not None:
        out.append(Variant(f"alignment-timeout={alignment_timeout:g}s", alignment_timeout=alignment_timeout))
    if debloat_target is not None:
        out.append(Variant(f"debloat-target={debloat_target:g}s", debloat_target=debloat_target))
    if parallelism is not None:
        out.append(Variant(f"parallelism={parallelism}", parallelism=parallelism))
    if interval is not None:
        out.append(Variant(f"interval={interval:g}s", interval=interval))
    if slow:
        out.append(Variant("slow " + ",".join(f"{k}x{v:g}" for k, v in slow.items()), slow=dict(slow)))
    return out


@dataclass
class Prediction:
    variant: Variant
    figures: dict[str, float | None]
    #: wall seconds the simulation took
    seconds: float
    #: why the variant has no figures: it cannot keep up (`runtime.sim.saturation`) or failed
    failure: str | None = None
    #: the resource that held back a variant that cannot keep up ("the control path's CPU", ...)
    saturated: str | None = None


def what_if(build: Callable[[], Any], job_name: str, profile: CostProfile, variants: Sequence[Variant],
            *, seed: int = 1) -> list[Prediction]:
    """The baseline (the job as `build` makes it) and every variant, predicted with `profile`.

    A variant that cannot keep up (its backlog only grows) is stopped within a few windows of
    virtual time (`runtime.sim.saturation`) and comes back with `failure` and `saturated` saying
    why and what held it back; a variant whose job fails likewise; the others are unaffected."""
    out = []
    for variant in (Variant("baseline"), *variants):
        env = variant.apply(build())
        started = time.perf_counter()
        try:
            result = predict(env, job_name, profile, seed=seed, slow=variant.slow, stop_when_saturated=True)
        except JobFailedError as exc:
            saturation = exc.cause if isinstance(exc.cause, SaturationError) else None
            out.append(Prediction(variant, dict.fromkeys(METRICS), time.perf_counter() - started, failure=str(exc),
                                  saturated=saturation.resource if saturation is not None else None))
            continue
        out.append(Prediction(variant, figures(result, finalize=profile.finalize), time.perf_counter() - started))
    return out


#: how `table` labels the metrics (units)
LABELS = {
    "throughput": "throughput (records/s)",
    "latency_p50": "latency p50 (ms)",
    "latency_p99": "latency p99 (ms)",
    "checkpoint_duration_p50": "checkpoint duration p50 (ms)",
    "checkpoint_duration_p99": "checkpoint duration p99 (ms)",
    "alignment_time_p50": "alignment time p50 (ms)",
    "persisted_bytes": "persisted bytes per checkpoint",
}


def table(predictions: Sequence[Prediction]) -> list[list[str]]:
    """Rows (header first): one per metric, a column per prediction."""
    rows = [["metric", *(p.variant.name for p in predictions)]]
    for metric in METRICS:
        rows.append([LABELS[metric], *(_fmt(p.figures[metric]) for p in predictions)])
    if any(p.failure for p in predictions):
        rows.append(["outcome", *(_outcome(p) for p in predictions)])
    rows.append(["simulated in (s)", *(f"{p.seconds:.2f}" for p in predictions)])
    return rows


def _outcome(prediction: Prediction) -> str:
    if prediction.failure is None:
        return "finished"
    if prediction.saturated is not None:
        return f"cannot keep up: {prediction.saturated}"
    return "failed"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
