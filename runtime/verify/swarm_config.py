"""A swarm seed's configuration: `SwarmConfig`, drawn from a seed (`draw_config`), printed
(`repr`: non-default fields only), replayed (`replay_line`), parsed back (`parse_config`, no
eval) and counted for coverage (`coverage`).

`draw_config(seed)` returns a frozen `SwarmConfig`: an order-sensitive job
(`runtime.workloads.seeded.build_stamped_job`: rows, keys, stages — event-time ones with timers,
side outputs and late records among them — parallelism, splits, buffers, credits, per-split
source watermarks and the watermark interval), every checkpointing option that changes the
protocol's path (mode incl. alignment timeouts, `max_concurrent`, `retained`, `min_pause`, a
possibly short `timeout`, storage in memory or on disk, the full / incremental /
incremental+merging backend with its file sizes and compaction, HA, the aligner's byte bound),
operator chaining, the restart strategy (fixed, exponential backoff, failure rate), the
simulator's cost model, an optional restore with rescale, and a fault plan drawn from a random
*subset* of the fault kinds of `FAULT_KINDS` with random intensities (swarm testing: a seed that
never crashes a task explores long runs of checkpoints that crash-heavy seeds never reach).
Each later addition draws from a random stream of its own, so the seeds drawn before it keep
their configs.

Pure: no I/O.
"""

from __future__ import annotations

import ast
import dataclasses
import random
import shlex
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from typing import Any

from checkpoint.modes import ALIASES
from runtime.verify.judging import config_repr
from runtime.workloads.seeded import (
    ORDER_FREE_STAGES,
    ORDER_SENSITIVE_STAGES,
    TIMER_STAGES,
    TWO_INPUT_STAGES,
    UNION_STAGES,
    WINDOW_STAGES,
    order_holds_after,
    stages_valid,
)
from vocabulary import fault_plan as fault_module
from vocabulary.fault_plan import FaultPlan

MODES = ("aligned", "unaligned", "timeout", "at_least_once")
EXACTLY_ONCE_MODES = ("aligned", "unaligned", "timeout")
MODE_NAMES = tuple(ALIASES.get(mode, mode) for mode in MODES)  # as `checkpoint.modes` spells them
BACKENDS = ("full", "incremental", "merging")
#: `SwarmConfig.restart` values: `RestartStrategy.fixed_delay`, `exponential_delay`, `failure_rate`
RESTART_KINDS = ("fixed", "exponential", "failure_rate")
#: the source vertex of every stamped job (`from_collection` without a name)
SOURCE_VERTEX = "Source: collection"


@dataclass(frozen=True)
class FaultKind:
    """How `draw_config` draws one kind of fault: up to `max_count` of them."""

    max_count: int


#: every fault kind the swarm draws, by its `FaultPlan.random` keyword. A new kind is one line.
FAULT_KINDS: dict[str, FaultKind] = {
    "crashes": FaultKind(max_count=3),
    "coordinator_crashes": FaultKind(max_count=2),
    "lost_acks": FaultKind(max_count=2),
    "stalls": FaultKind(max_count=3),
    "storage_failures": FaultKind(max_count=2),
    "lost_messages": FaultKind(max_count=2),
    "duplicated_messages": FaultKind(max_count=2),
    "delayed_messages": FaultKind(max_count=2),
    "torn_writes": FaultKind(max_count=2),
    "slow_storage": FaultKind(max_count=2),
    "channel_delays": FaultKind(max_count=2),
    "task_stalls": FaultKind(max_count=2),
    "notify_crashes": FaultKind(max_count=1),
    "recovery_crashes": FaultKind(max_count=1),
    "coordinator_storage_failures": FaultKind(max_count=2),
}
#: faults that hold a checkpoint (or a task) until a timeout: each may add one to a run's length
WAITING_FAULTS = ("LostAcknowledgement", "LostControlMessage", "TaskStall")

class SwarmConfigBase:
    """What a swarm config (`SwarmConfig`, the Ray swarm's `RaySwarmConfig`) answers besides its
    fields (`seed`, `mode`, `chaining`, `parallelism`, `rescale_to`, `stages`, `faults`, ...):
    its repr (non-default fields only, as `parse_config` reads it), its guarantee and its faults.
    Subclasses are `@dataclass(frozen=True, repr=False)`."""

    def __repr__(self) -> str:
        return config_repr(self)

    @property
    def exactly_once(self) -> bool:
        return self.mode in EXACTLY_ONCE_MODES  # type: ignore[attr-defined]

    @property
    def order_kept(self) -> bool:
        return order_kept(self)

    def fault_counts(self) -> Counter:
        """Faults of the plan by kind (class name)."""
        return Counter(type(f).__name__ for f in self.faults)  # type: ignore[attr-defined]


@dataclass(frozen=True, repr=False)
class SwarmConfig(SwarmConfigBase):
    """A job, its configuration and its faults. Defaults are the simplest values, the ones the
    shrinker moves toward; `repr` shows the others only."""

    seed: int
    # the job
    rows: int = 50
    keys: int = 3
    skew: float = 0.0
    stages: tuple[str, ...] = ("count",)
    parallelism: int = 1
    splits: int = 1
    buffer_size: int = 16
    credits: int = 8
    buffer_timeout: float = 0.001
    records_per_step: int | None = None
    # checkpointing
    mode: str = "aligned"
    #: alignment timeout of mode "timeout" (ignored otherwise)
    alignment_timeout: float = 0.0
    interval: float = 0.002
    max_concurrent: int = 1
    retained: int = 1
    min_pause: float = 0.0
    timeout: float = 2.0
    tolerable_failures: int = 1_000_000
    storage: str = "memory"  # memory | disk
    backend: str = "full"  # full | incremental | merging
    ha: bool = False
    restart_attempts: int = 20
    #: restore with rescale: the first execution fails for good at a source crash at this
    #: fraction of its records; a second one with parallelism `rescale_to` restores its directory
    rescale_to: int | None = None
    rescale_at: float = 0.5
    #: buffer debloating (`env.set_buffer_debloating`): its target in seconds (None: off) and
    #: its sampling period
    debloat_target: float | None = None
    debloat_period: float = 0.002
    # the simulator
    #: the source's steps cost this many times the `CostModel`'s: records enter over a longer
    #: stretch of virtual time, so more checkpoints fall inside the job
    source_slowdown: float = 1.0
    #: fixed latency of a snapshot write (`NetworkOptions.write_latency`)
    write_latency: float = 0.002
    # drawn later (`_draw_more`): chaining, the aligner's byte bound, restart kinds, file merging
    #: operators chained into one vertex where they can be (False: `env.disable_chaining()`:
    #: every operator its own task, forward channels and barriers between them)
    chaining: bool = True
    #: `max_aligned_bytes`: an aligning task holding back more aborts its checkpoint (declines)
    max_aligned_bytes: int | None = None
    #: the restart strategy's kind (`RESTART_KINDS`): its delay (fixed, failure-rate) or initial
    #: backoff (exponential) is `restart_delay`; `restart_attempts` bounds restarts in a row
    #: (exponential: before a reset) or per `restart_interval` (failure-rate)
    restart: str = "fixed"
    restart_delay: float = 0.001
    #: failure-rate: its interval; exponential: its reset_backoff_threshold
    restart_interval: float = 3600.0
    #: file merging (backend "merging" only): bytes per physical file, and the space
    #: amplification past which shared files are compacted (None: never)
    max_file_size: int = 64 << 20
    compaction_threshold: float | None = 2.0
    # drawn last (`_draw_event_time`): event-time stages (in `stages`) and watermarks
    #: the source stamps and watermarks every split (`runtime.workloads.seeded.stamp_strategy`)
    source_watermarks: bool = False
    #: `env.set_auto_watermark_interval`: virtual seconds between periodic watermarks
    watermark_interval: float = 0.2
    faults: tuple[Any, ...] = field(default=())

    def problems(self) -> list[str]:
        """Why this config cannot run (empty when it can)."""
        out = job_problems(self)
        if self.rescale_to is not None and self.storage != "disk":
            out.append("rescale_to needs storage='disk'")
        if self.restart not in RESTART_KINDS:
            out.append(f"restart {self.restart!r} is not one of {RESTART_KINDS}")
        if self.backend != "merging" and (self.max_file_size, self.compaction_threshold) != (64 << 20, 2.0):
            out.append("max_file_size and compaction_threshold need backend='merging'")
        if not self.watermark_interval > 0:
            out.append("watermark_interval must be > 0")
        return out

    def size(self) -> int:
        """How big the config is (what shrinking reduces): faults, stages, rows, keys,
        parallelism, splits, phases and options away from their defaults."""
        defaults = {f.name: f.default for f in fields(self)}
        options = sum(1 for name in OPTION_FIELDS if getattr(self, name) != defaults[name])
        return (len(self.faults) + len(self.stages) + self.rows + self.keys + self.parallelism
                + self.splits + (self.rescale_to or 0) + options)


def order_kept(config: Any) -> bool:
    """Whether (origin, key) order is kept across forward edges in a swarm config (this one's or
    the Ray swarm's): not when an unaligned checkpoint is restored at another parallelism into an
    unchained job (the in-flight data of a forward channel goes to receiver d % p,
    `runtime.jobmaster.restore.channel_rescale`, as Flink maps it round robin)."""
    return not (config.mode in ("unaligned", "timeout") and not config.chaining
                and config.rescale_to not in (None, config.parallelism))


def job_problems(config: Any) -> list[str]:
    """Why a swarm config's job and options cannot run (this one's or the Ray swarm's): mode,
    backend, storage, stages, sizes, and order-sensitive stages where order is not kept."""
    out = []
    if config.mode not in MODES:
        out.append(f"mode {config.mode!r} is not one of {MODES}")
    if config.backend not in BACKENDS:
        out.append(f"backend {config.backend!r} is not one of {BACKENDS}")
    if config.storage not in ("memory", "disk"):
        out.append(f"storage {config.storage!r} is not memory or disk")
    if not stages_valid(config.stages):
        out.append(f"stages {config.stages} are not valid (see workloads.stages_valid)")
    if min(config.rows, config.keys, config.parallelism, config.splits, config.buffer_size, config.credits) < 1:
        out.append("rows, keys, parallelism, splits, buffer_size and credits must be >= 1")
    if not order_kept(config) and any(stage in ORDER_SENSITIVE_STAGES for stage in config.stages):
        out.append(f"order-sensitive stages {ORDER_SENSITIVE_STAGES} need (origin, key) order, which an "
                   "unaligned rescale of an unchained job does not keep (see order_kept)")
    return out


#: option fields: `size` counts those away from their defaults; the shrinker resets them one at a time
OPTION_FIELDS = ("skew", "buffer_size", "credits", "buffer_timeout", "records_per_step", "mode",
                  "alignment_timeout", "interval", "max_concurrent", "retained", "min_pause", "timeout",
                  "tolerable_failures", "storage", "backend", "ha", "restart_attempts", "rescale_at",
                  "source_slowdown", "write_latency", "debloat_target", "debloat_period", "chaining",
                  "max_aligned_bytes", "restart", "restart_delay", "restart_interval", "max_file_size",
                  "compaction_threshold", "source_watermarks", "watermark_interval")


# --------------------------------------------------------------------------- drawing


def draw_config(seed: int) -> SwarmConfig:
    """The job, configuration and faults of `seed` (deterministic)."""
    rng = random.Random(f"swarm/{seed}")
    mode = rng.choice(MODES)
    parallelism = rng.randint(1, 4)
    stages = draw_stages(rng)
    # faults from a stream of their own: a kind added at the end of FAULT_KINDS leaves the rest
    # of every seed's config, and its other faults (FaultPlan.random draws kinds in order), as is
    fault_rng = random.Random(f"swarm-faults/{seed}")
    density = fault_rng.choice((0.1, 0.25, 0.5))  # how many kinds a seed enables varies too
    counts = {kind: fault_rng.randint(1, spec.max_count) for kind, spec in FAULT_KINDS.items()
              if fault_rng.random() < density}
    plan = FaultPlan.random(seed, **{"crashes": 0, **counts})
    timeout = rng.choice((2.0, 0.5, 0.05, 0.02, 0.01))
    rescale_to = None
    if rng.random() < 0.2:
        rescale_to = rng.randint(1, 4)  # unaligned too: in-flight data is redistributed
    storage = "disk" if rescale_to is not None or rng.random() < 0.3 else "memory"
    config = SwarmConfig(
        seed=seed,
        rows=rng.randint(10, 120),
        keys=rng.randint(1, 12),
        skew=rng.choice((0.0, 1.0, 2.0)),
        parallelism=parallelism,
        splits=rng.randint(1, 5),
        buffer_size=rng.choice((1, 4, 16, 64)),
        credits=rng.choice((1, 2, 8)),
        buffer_timeout=rng.choice((0.0005, 0.001, 0.005)),
        records_per_step=rng.choice((None, None, 1, 3)),
        mode=mode,
        alignment_timeout=rng.choice((0.0, 0.0, 0.0005, 0.002, 0.01)) if mode == "timeout" else 0.0,
        interval=rng.choice((0.0005, 0.002, 0.01)),
        max_concurrent=rng.randint(1, 3),
        retained=rng.randint(1, 3),
        min_pause=rng.choice((0.0, 0.0, 0.001, 0.005)),
        timeout=timeout,
        # short timeouts abort checkpoints without any fault: never count those toward failing
        tolerable_failures=1_000_000 if timeout < 0.5 else rng.choice((0, 3, 1_000_000)),
        storage=storage,
        backend=rng.choice(BACKENDS),
        ha=rng.random() < 0.3,
        restart_attempts=3 + 2 * len(plan.faults),
        rescale_to=rescale_to,
        rescale_at=round(rng.uniform(0.3, 0.95), 3) if rescale_to is not None else 0.5,
        faults=plan.faults,
        # a first execution crashing early in a fast job would have no checkpoint to restore
        source_slowdown=100.0 if rescale_to is not None else rng.choice((1.0, 1.0, 20.0, 100.0)),
        write_latency=rng.choice((0.002, 0.0005)),
        stages=maybe_union(rng, stages),
        **_draw_debloating(seed),
    )
    config = replace(config, **_draw_more(config))
    config = replace(config, **_draw_event_time(config))
    return replace(config, **_draw_two_input(config))


#: the two-input stages the swarm runs (all of `TWO_INPUT_STAGES`; a stage drawn but left out
#: here leaves its seed's config without a two-input stage)
SWARM_TWO_INPUT_STAGES = TWO_INPUT_STAGES


def _draw_two_input(config: SwarmConfig) -> dict[str, Any]:
    """A two-input stage (`SWARM_TWO_INPUT_STAGES` of `TWO_INPUT_STAGES`) for a quarter of the
    seeds, where the stages stay valid, from a stream of its own (drawn last, so the rest of every
    seed's config stays as it was)."""
    rng = random.Random(f"swarm-two-input/{config.seed}")
    if rng.random() >= 1 / 4:
        return {}
    stage = rng.choice(TWO_INPUT_STAGES)
    if stage not in SWARM_TWO_INPUT_STAGES:
        return {}
    stages = config.stages
    places = [i for i in range(len(stages) + 1) if stages_valid(stages[:i] + (stage,) + stages[i:])]
    if not places:
        return {}
    at = rng.choice(places)
    return {"stages": stages[:at] + (stage,) + stages[at:]}


def _draw_event_time(config: SwarmConfig) -> dict[str, Any]:
    """Event time for a third of the seeds, from a stream of its own (drawn last, so the rest of
    every seed's config stays as it was): one or two of `TIMER_STAGES` where the stages stay
    valid, per-split source watermarks, a watermark interval short enough for watermarks to
    move during the swarm's short jobs and, for most of them, one of `WINDOW_STAGES`."""
    rng = random.Random(f"swarm-event-time/{config.seed}")
    if rng.random() >= 1 / 3:
        return {}
    stages = config.stages
    for _ in range(rng.randint(1, 2)):
        stages = _insert_stage(rng, stages, rng.choice(TIMER_STAGES))
    drawn = {"source_watermarks": rng.random() < 0.5, "watermark_interval": rng.choice((0.0005, 0.002, 0.01))}
    # windows from a stream of their own, so the seeds drawn before them keep their stages
    windows = random.Random(f"swarm-windows/{config.seed}")
    if windows.random() < 0.6:
        stages = _insert_stage(windows, stages, windows.choice(WINDOW_STAGES))
    return {"stages": stages, **drawn}


def _insert_stage(rng: random.Random, stages: tuple[str, ...], stage: str) -> tuple[str, ...]:
    """`stages` with `stage` at a random place where they stay valid (unchanged if there is none)."""
    places = [i for i in range(len(stages) + 1) if stages_valid(stages[:i] + (stage,) + stages[i:])]
    if not places:
        return stages
    at = rng.choice(places)
    return stages[:at] + (stage,) + stages[at:]


def _draw_more(config: SwarmConfig) -> dict[str, Any]:
    """Chaining, the aligner's byte bound, the restart strategy, file merging's options and the
    columnar stages (`COLUMNAR_STAGES`), from
    a stream of their own (drawn in full for every seed, so adding one here at the end leaves
    the others, and the rest of every seed's config, as they were)."""
    rng = random.Random(f"swarm-more/{config.seed}")
    out: dict[str, Any] = {}
    if rng.random() < 0.25 and (replace(config, chaining=False).order_kept
                                or not any(s in ORDER_SENSITIVE_STAGES for s in config.stages)):
        out["chaining"] = False
    # at most a few records' worth (a stamped record is ~100 bytes): aligned checkpoints of
    # parallel jobs then do hold back more and abort; the final one must still complete
    max_aligned = rng.choice((1, 64, 512))
    if rng.random() < 0.25:
        # its aborts count toward failing (ALIGNMENT_BUFFER_FULL is counted, as Flink counts
        # declines) and happen without any fault: never fail the job for them (as short timeouts)
        out.update(max_aligned_bytes=max_aligned, tolerable_failures=1_000_000)
    restart = rng.choice(RESTART_KINDS)
    delay = rng.choice((0.0005, 0.002, 0.01))
    interval = rng.choice((0.005, 0.05, 3600.0))
    if restart != "fixed" and rng.random() < 0.5:
        out.update(restart=restart, restart_delay=delay, restart_interval=interval)
    max_file_size = rng.choice((64, 1024, 64 << 20))
    compaction = rng.choice((1.1, 2.0, None))
    if config.backend == "merging":
        out.update(max_file_size=max_file_size, compaction_threshold=compaction)
    # columnar stages: a batch map anywhere, and/or a built-in keyed count (whose vectorised path
    # runs on the batches a `batches` stage before it sends)
    stages = config.stages
    for stage, chance in (("batches", 0.2), ("kcount", 0.15)):
        if rng.random() < chance:
            places = [i for i in range(len(stages) + 1) if stages_valid(stages[:i] + (stage,) + stages[i:])]
            at = rng.choice(places)
            stages = stages[:at] + (stage,) + stages[at:]
    if stages != config.stages:
        out["stages"] = stages
    return out


def _draw_debloating(seed: int) -> dict[str, Any]:
    """Buffer debloating for a quarter of the seeds, from a stream of its own (so drawing it
    leaves the rest of every seed's config as it was). Targets are short, as the jobs are: a
    few ms of virtual time, so buffers do shrink under the swarm's slow sources."""
    rng = random.Random(f"swarm-debloat/{seed}")
    if rng.random() >= 0.25:
        return {}
    return {"debloat_target": rng.choice((0.0002, 0.001, 0.005)), "debloat_period": rng.choice((0.0005, 0.002))}


def maybe_union(rng: random.Random, stages: tuple[str, ...]) -> tuple[str, ...]:
    """Sometimes a union stage, wherever order-sensitive stages stay valid (drawn last, so the
    rest of a seed's config does not depend on it)."""
    if rng.random() >= 0.15:
        return stages
    union = rng.choice(UNION_STAGES)
    places = [i for i in range(len(stages) + 1) if stages_valid(stages[:i] + (union,) + stages[i:])]
    at = rng.choice(places)
    return stages[:at] + (union,) + stages[at:]


def draw_stages(rng: random.Random) -> tuple[str, ...]:
    """1-4 stages; order-sensitive ones only where (origin, key) order holds; at least one
    keyed stage, so the job has state."""
    stages: list[str] = []
    for _ in range(rng.randint(1, 4)):
        pool = ORDER_FREE_STAGES
        if order_holds_after(tuple(stages)):
            pool = ORDER_FREE_STAGES + ORDER_SENSITIVE_STAGES * 2
        stages.append(rng.choice(pool))
    if not any(s in ("count", "sum") + ORDER_SENSITIVE_STAGES for s in stages):
        stages.append(rng.choice(("count", "sum", "list", "last", "seqcheck") if order_holds_after(tuple(stages))
                                 else ("count", "sum")))
    return tuple(stages)


# --------------------------------------------------------------------------- replay


def replay_line(config: SwarmConfig) -> str:
    """The one-line command that replays `config`."""
    if config == draw_config(config.seed):
        return f"python -m runtime.verify.vopr --seed {config.seed}"
    text = repr(config)
    quoted = f'"{text}"' if not any(c in text for c in '"$`\\!') else shlex.quote(text)
    return f"python -m runtime.verify.vopr --config {quoted}"


def _constructors(config_class: type) -> dict[str, Any]:
    names: dict[str, Any] = {config_class.__name__: config_class}
    for name, obj in vars(fault_module).items():
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj is not FaultPlan:
            names[name] = obj
    return names


def parse_config(text: str, config_class: type = SwarmConfig) -> Any:
    """The `config_class` (`SwarmConfig`, or the Ray swarm's) a `repr` describes (only literals
    and known constructors: no eval).

    Raises:
        ValueError: `text` is not such a repr (names what is not allowed).
    """
    allowed = _constructors(config_class)

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in allowed:
            if node.args:
                raise ValueError(f"{node.func.id}(...) takes keyword arguments only")
            return allowed[node.func.id](**{kw.arg: value(kw.value) for kw in node.keywords})
        if isinstance(node, ast.Tuple):
            return tuple(value(e) for e in node.elts)
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise ValueError(f"not allowed in a swarm config: {ast.unparse(node)!r}") from None

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a swarm config: {exc}") from None
    config = value(tree.body)
    if not isinstance(config, config_class):
        raise ValueError(f"not a {config_class.__name__}(...): {text[:80]!r}")
    return config


def coverage(config: SwarmConfig) -> dict[str, Any]:
    """The option values `config` exercises (for the sweep's coverage counts)."""
    rescale = "none" if config.rescale_to is None else (
        "same" if config.rescale_to == config.parallelism else "other")
    return {
        "mode": config.mode if config.mode != "timeout" else f"timeout={config.alignment_timeout:g}",
        "max_concurrent": config.max_concurrent,
        "retained": config.retained,
        "min_pause": config.min_pause,
        "timeout": config.timeout,
        "storage": config.storage,
        "backend": config.backend,
        "ha": config.ha,
        "parallelism": config.parallelism,
        "splits": config.splits,
        "buffer_size": config.buffer_size,
        "credits": config.credits,
        "buffer_timeout": config.buffer_timeout,
        "records_per_step": config.records_per_step,
        "rescale": rescale,
        "source_slowdown": config.source_slowdown,
        "write_latency": config.write_latency,
        "debloat_target": config.debloat_target,
        "stages": sorted(set(config.stages)),
        "chaining": config.chaining,
        "max_aligned_bytes": config.max_aligned_bytes,
        "restart": config.restart,
        "max_file_size": config.max_file_size,
        "compaction_threshold": config.compaction_threshold,
        "source_watermarks": config.source_watermarks,
        "watermark_interval": config.watermark_interval,
    }
