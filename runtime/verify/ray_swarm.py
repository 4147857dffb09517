"""Swarm testing on a real local Ray: one seed draws a job, the options Ray has and a fault plan.

Theory of operation
-------------------
The simulator's swarm (`runtime.verify.swarm`) searches tens of thousands of configurations; the
parts a user runs around the protocol on Ray — processes, heartbeats, the committer and blob
store services, restoring in a new process — only exist here. This swarm is small (a seed is
seconds of wall time and a dozen processes, not milliseconds) and shares the simulator swarm's
drawing of stages, its failure-free reference and its judging (`runtime.verify.judging`).

`draw_config(seed)` returns a frozen `RaySwarmConfig`: an order-sensitive stamped job of a few
thousand rows read at a drawn rate (so checkpoints and faults fall inside it), the checkpointing
options (mode incl. alignment timeout, `max_concurrent`, `retained`, `min_pause`, storage in
memory or on disk, the full / incremental / merging backend), chaining, `slots_per_worker` 1 or
2, an optional restore with rescale — the first execution fails for good at a source crash and a
second one with parallelism `rescale_to` restores its directory in a NEW process (a Python
process that joins the same Ray, as a user's second `barrierflow run` would) or in this one — and
a fault plan from a random subset of `RAY_FAULT_KINDS`, which adds `ProcessKill` (SIGKILL of a
worker's, the coordinator's, the committer's or the blob store's process) to the kinds both
executors share.

`runtime.verify.ray_phases.run_config(config)` runs it and judges (`runtime.verify.judging.judge`) the committed output (exactly-once
modes: equal to the failure-free reference, with the final keyed state and each (origin, key)'s
order; at-least-once: nothing missing), that `execute()` raised nothing but `JobFailedError`
(anything else is an "error" violation naming where it was raised), what the job left in its
checkpoint directory, and, with storage on disk, that the directory is restorable: a third
execution restores it at parallelism `recheck_parallelism` and must finish with the reference
output ("restore" violation otherwise).

Known bugs: a config a `KNOWN_BUGS` entry applies to runs without what runs into that bug (its
`avoid`: the fault, the new process, the other parallelism) and its verdict names the bug, until
the fix lands and the entry is deleted; `--known-bugs-as-violations` runs configs as drawn.
`replay_line(config)` is the command that replays a config.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from runtime.verify.swarm import Verdict
from runtime.verify.swarm_config import (
    BACKENDS,
    MODES,
    FaultKind,
    SwarmConfigBase,
    draw_stages,
    job_problems,
    maybe_union,
    parse_config,
)
from runtime.workloads.seeded import build_stamped_job, draw_rows
from vocabulary.fault_plan import FaultPlan
from vocabulary.options import RestartStrategy

#: every fault kind the Ray swarm draws, by its `FaultPlan.random` keyword: fewer of each than the
#: simulator's swarm (a failover costs a process start here)
RAY_FAULT_KINDS: dict[str, FaultKind] = {
    "crashes": FaultKind(max_count=2),
    "coordinator_crashes": FaultKind(max_count=1),
    "lost_acks": FaultKind(max_count=1),
    "stalls": FaultKind(max_count=2),
    "storage_failures": FaultKind(max_count=2),
    "lost_messages": FaultKind(max_count=1),
    "duplicated_messages": FaultKind(max_count=1),
    "delayed_messages": FaultKind(max_count=1),
    "torn_writes": FaultKind(max_count=1),
    "slow_storage": FaultKind(max_count=1),
    "channel_delays": FaultKind(max_count=1),
    "task_stalls": FaultKind(max_count=1),
    "notify_crashes": FaultKind(max_count=1),
    "recovery_crashes": FaultKind(max_count=1),
    "coordinator_storage_failures": FaultKind(max_count=1),
    "process_kills": FaultKind(max_count=2),
}
#: how often a seed kills processes (`ProcessKill`, the faults only Ray has), whatever its density
PROCESS_KILL_CHANCE = 0.4
#: where the second execution of a restore runs: a new Python process joining the same Ray, or this one
RESTORE_PROCESSES = ("new", "same")
#: wall seconds one execution may take before it is judged not to finish (`max_duration`)
MAX_DURATION = 120.0


@dataclass(frozen=True, repr=False)
class RaySwarmConfig(SwarmConfigBase):
    """A job, its options on Ray and its faults. `repr` shows the non-default fields only."""

    seed: int
    # the job
    rows: int = 1000
    keys: int = 3
    skew: float = 0.0
    stages: tuple[str, ...] = ("count",)
    parallelism: int = 1
    splits: int = 1
    #: records per second the source reads (over all splits): the job lasts about rows / rate seconds
    rate: float = 1000.0
    buffer_size: int = 64
    credits: int = 4
    buffer_timeout: float = 0.005
    chaining: bool = True
    slots_per_worker: int = 1
    # checkpointing
    mode: str = "aligned"
    #: alignment timeout of mode "timeout" (ignored otherwise)
    alignment_timeout: float = 0.0
    interval: float = 0.1
    max_concurrent: int = 1
    retained: int = 1
    min_pause: float = 0.0
    timeout: float = 2.0
    tolerable_failures: int = 1_000_000
    storage: str = "memory"  # memory | disk
    backend: str = "full"  # full | incremental | merging
    max_aligned_bytes: int | None = None
    max_file_size: int = 64 << 20
    compaction_threshold: float | None = 2.0
    restart_attempts: int = 10
    restart_delay: float = 0.01
    #: restore with rescale: the first execution fails for good at a source crash at this fraction
    #: of its records; a second one with parallelism `rescale_to` restores its directory, in a
    #: `restore_process` ("new": another Python process; "same": this one, handed the committer)
    rescale_to: int | None = None
    rescale_at: float = 0.5
    restore_process: str = "new"
    #: parallelism of the execution that restores the finished job's directory (storage on disk)
    recheck_parallelism: int = 1
    faults: tuple[Any, ...] = field(default=())

    def problems(self) -> list[str]:
        """Why this config cannot run (empty when it can)."""
        out = job_problems(self)
        if self.restore_process not in RESTORE_PROCESSES:
            out.append(f"restore_process {self.restore_process!r} is not one of {RESTORE_PROCESSES}")
        if self.recheck_parallelism < 1 or self.rate <= 0:
            out.append("recheck_parallelism and rate must be > 0")
        if self.slots_per_worker not in (1, 2):
            out.append(f"slots_per_worker {self.slots_per_worker!r} is not 1 or 2")
        return out

    def knobs(self) -> str:
        """Every field, drawn or default, on one line (what a run logs before it starts)."""
        return " ".join(f"{name}={getattr(self, name)!r}" for name in self.__dataclass_fields__)


# --------------------------------------------------------------------------- known bugs


@dataclass(frozen=True)
class KnownBug:
    """A reported bug that configs for which `applies` holds run into. Until its fix lands (then
    delete the entry) such a config runs as `avoid(config)`: the same config without what runs
    into the bug, and its verdict names the bug it avoided. `replay` is a config that shows the
    bug (`--known-bugs-as-violations` runs configs as drawn)."""

    name: str
    why: str
    applies: Callable[[RaySwarmConfig], bool]
    avoid: Callable[[RaySwarmConfig], RaySwarmConfig]
    replay: str


#: known bugs, reported; delete an entry when its fix lands (the swarm then runs what it avoided)
KNOWN_BUGS: tuple[KnownBug, ...] = ()


def avoiding_known_bugs(config: RaySwarmConfig) -> tuple[RaySwarmConfig, tuple[str, ...]]:
    """`config` as it runs while `KNOWN_BUGS` are not fixed, and the names of the bugs it avoids."""
    avoided = []
    for bug in KNOWN_BUGS:
        if bug.applies(config):
            config = bug.avoid(config)
            avoided.append(bug.name)
    return config, tuple(avoided)


# --------------------------------------------------------------------------- drawing


def draw_config(seed: int) -> RaySwarmConfig:
    """The job, options and faults of `seed` (deterministic)."""
    rng = random.Random(f"ray-swarm/{seed}")
    mode = rng.choice(MODES)
    parallelism = rng.randint(1, 3)
    stages = draw_stages(rng)
    while len(stages) > 3:  # each keyed stage is `parallelism` more processes
        stages = draw_stages(rng)
    stages = maybe_union(rng, stages)
    fault_rng = random.Random(f"ray-swarm-faults/{seed}")
    density = fault_rng.choice((0.1, 0.2, 0.35))
    counts = {kind: fault_rng.randint(1, spec.max_count) for kind, spec in RAY_FAULT_KINDS.items()
              if fault_rng.random() < (PROCESS_KILL_CHANCE if kind == "process_kills" else density)}
    plan = FaultPlan.random(seed, **{"crashes": 0, **counts})
    rows = rng.randint(1000, 4000)
    rescale_to = rng.randint(1, 3) if rng.random() < 0.25 else None
    storage = "disk" if rescale_to is not None or rng.random() < 0.5 else "memory"
    timeout = rng.choice((2.0, 2.0, 5.0))
    backend = rng.choice(BACKENDS)
    config = RaySwarmConfig(
        seed=seed,
        rows=rows,
        keys=rng.randint(1, 12),
        skew=rng.choice((0.0, 1.0, 2.0)),
        stages=stages,
        parallelism=parallelism,
        splits=rng.randint(1, 4),
        rate=round(rows / rng.choice((1.0, 2.0, 3.0))),
        buffer_size=rng.choice((16, 64, 256)),
        credits=rng.choice((2, 4, 8)),
        buffer_timeout=rng.choice((0.002, 0.005, 0.02)),
        chaining=rng.random() >= 0.2,
        slots_per_worker=rng.choice((1, 2)),
        mode=mode,
        alignment_timeout=rng.choice((0.0, 0.005, 0.05)) if mode == "timeout" else 0.0,
        interval=rng.choice((0.05, 0.1, 0.25)),
        max_concurrent=rng.randint(1, 3),
        retained=rng.randint(1, 3),
        min_pause=rng.choice((0.0, 0.0, 0.02)),
        timeout=timeout,
        tolerable_failures=rng.choice((0, 3, 1_000_000)),
        storage=storage,
        backend=backend,
        max_aligned_bytes=rng.choice((None, None, None, 512)),
        max_file_size=rng.choice((1024, 64 << 20)) if backend == "merging" else 64 << 20,
        compaction_threshold=rng.choice((1.1, 2.0, None)) if backend == "merging" else 2.0,
        restart_attempts=3 + 2 * len(plan.faults),
        restart_delay=rng.choice((0.01, 0.05)),
        rescale_to=rescale_to,
        rescale_at=round(rng.uniform(0.3, 0.9), 3) if rescale_to is not None else 0.5,
        restore_process=rng.choice(RESTORE_PROCESSES),
        recheck_parallelism=rng.randint(1, 3),
        faults=plan.faults,
    )
    if config.max_aligned_bytes is not None:  # its aborts are no fault's: never fail the job for them
        config = replace(config, tolerable_failures=1_000_000)
    if rescale_to is None:  # drawn all the same, so the rest of the draw does not depend on it
        config = replace(config, restore_process="new")
    if storage != "disk":  # nothing to restore afterwards
        config = replace(config, recheck_parallelism=1)
    if config.problems():  # an unaligned rescale of an unchained order-sensitive job: keep it chained
        config = replace(config, chaining=True)
    return config


def coverage(config: RaySwarmConfig) -> dict[str, Any]:
    """The option values `config` exercises as it runs, known bugs avoided (for the sweep's
    coverage counts), and the bugs it avoids."""
    config, avoided = avoiding_known_bugs(config)
    rescale = "none" if config.rescale_to is None else (
        f"{config.restore_process} process, {'same' if config.rescale_to == config.parallelism else 'other'} parallelism")
    return {
        "mode": config.mode if config.mode != "timeout" else f"timeout={config.alignment_timeout:g}",
        "max_concurrent": config.max_concurrent,
        "retained": config.retained,
        "storage": config.storage,
        "backend": config.backend,
        "slots_per_worker": config.slots_per_worker,
        "parallelism": config.parallelism,
        "chaining": config.chaining,
        "rescale": rescale,
        "stages": sorted(set(config.stages)),
        "faults": sorted({f"{type(f).__name__}:{f.process}" if hasattr(f, "process") else type(f).__name__
                          for f in config.faults}),
        "known bugs avoided": list(avoided),
    }


# --------------------------------------------------------------------------- replay


def replay_line(config: RaySwarmConfig) -> str:
    """The one-line command that replays `config` (on a local Ray)."""
    if config == draw_config(config.seed):
        return f"python -m runtime.verify.vopr --executor ray --seed {config.seed}"
    text = repr(config)
    quoted = f'"{text}"' if not any(c in text for c in '"$`\\!') else shlex.quote(text)
    return f"python -m runtime.verify.vopr --executor ray --config {quoted}"


def parse_ray_config(text: str) -> RaySwarmConfig:
    """The `RaySwarmConfig` a `repr` describes (`swarm.parse_config`: no eval).

    Raises:
        ValueError: `text` is not such a repr.
    """
    return parse_config(text, RaySwarmConfig)


@dataclass(frozen=True)
class RayVerdict(Verdict):
    """A `Verdict` of the Ray swarm; `avoided`: the known bugs its config ran without (`KNOWN_BUGS`)."""

    avoided: tuple[str, ...] = ()

    @property
    def replay(self) -> str:
        return replay_line(self.config)

    def summary(self) -> str:
        return super().summary() + (f" [avoided known bugs: {', '.join(self.avoided)}]" if self.avoided else "")


def environment(config: RaySwarmConfig, parallelism: int, storage: str | None, restart: RestartStrategy) -> Any:
    """The config's job on a new `StreamEnvironment` at `parallelism`, checkpoints to `storage`."""
    from runtime.api.environment import StreamEnvironment
    from runtime.verify.swarm import checkpointing_options

    env = StreamEnvironment(parallelism=parallelism, buffer_size=config.buffer_size, credits=config.credits,
                            buffer_timeout=config.buffer_timeout)
    env.enable_checkpointing(**checkpointing_options(config, storage))
    if not config.chaining:
        env.disable_chaining()
    env.set_restart_strategy(restart)
    build_stamped_job(env, draw_rows(config.seed, config.rows, config.keys, config.skew), config.splits,
                      config.stages, strict_order=config.exactly_once, rate=config.rate)
    return env


def execute(config: RaySwarmConfig, env: Any, faults: FaultPlan, slots_per_worker: int | None = None,
            **options: Any) -> Any:
    """One execution of `env` on Ray with the config's executor options (`slots_per_worker`:
    another than the config's), bounded in wall time."""
    return env.execute("job", executor="ray", faults=faults, slots_per_worker=slots_per_worker or config.slots_per_worker,
                       max_duration=MAX_DURATION, **options)


def restart_strategy(config: RaySwarmConfig) -> RestartStrategy:
    """Fixed delay: `restart_attempts` restarts cover every planned fault."""
    return RestartStrategy.fixed_delay(config.restart_attempts, config.restart_delay)
