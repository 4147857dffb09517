"""Swarm testing on the simulator: one seed draws a job, a configuration AND a fault plan
(`runtime.verify.swarm_config`), run here and judged.

`run_config(config)` runs the job failure-free without checkpointing (the reference) and with
the configuration and faults, and returns a `Verdict`: "ok", "expected" (a known limitation,
clearly named by `judging.EXPECTED_ERRORS`, or a reported bug in `KNOWN_BUGS`), or a violation
kind (`judging.VIOLATIONS`, judged by `runtime.verify.judging`, which the Ray swarm shares):
committed output and final keyed state against the reference, order, staged transactions,
liveness, per-event invariants and, with storage on disk, what the job leaves in its checkpoint
directory (no orphan file, only the retained checkpoints, each verifying). With `rescale_to` the
faulty run has two phases: the first execution (no restarts, no faults, on-disk storage) fails
for good at a planned source crash; a second environment with parallelism `rescale_to` does
`restore_from` the first one's directory with the first one's committer and runs to the end
under the config's faults. Per-event invariant checkers plug in at `INVARIANTS`.

`runtime.verify.shrink` reduces a failing configuration; `runtime.verify.parallel_sweep` judges
seeds on every core.

Pure apart from temporary directories for on-disk checkpoint storage (`SCRATCH_DIR`).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from checkpoint.io.tools import CheckpointToolError
from checkpoint.modes import parse_mode
from runtime.checker.invariants import InvariantChecker
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.result import JobFailedError
from runtime.sim.costs import CostModel
from runtime.sim.network import NetworkOptions
from runtime.verify.judging import (
    FAULT_FAILURES,
    Observed,
    RunFailed,
    classify,
    judge,
    reference,
    storage_problem,
)
from runtime.verify.swarm_config import (
    MODE_NAMES,
    SOURCE_VERTEX,
    WAITING_FAULTS,
    SwarmConfig,
    replay_line,
)
from runtime.workloads.seeded import (
    SINK,
    build_stamped_job,
    draw_rows,
)
from vocabulary.fault_plan import FaultPlan, TaskCrash
from vocabulary.options import RestartStrategy

# --------------------------------------------------------------------------- judging

@dataclass(frozen=True)
class KnownBug:
    """A violation of one of `kinds`, in a config for which `applies` holds, that a known and
    reported bug outside the simulator search explains: an "expected" verdict until the fix lands
    (`tests/sim/test_swarm.py` checks that its minimal `replay` config still shows it)."""

    kinds: tuple[str, ...]
    why: str
    applies: Callable[[SwarmConfig], bool]
    replay: str


#: known bugs, reported; delete an entry when its fix lands
KNOWN_BUGS: tuple[KnownBug, ...] = ()


#: where on-disk checkpoint storage goes: a RAM-backed local file system when there is one
#: (the same `pyarrow.fs` local-path code as a disk; on a real disk syncs dominate a sweep)
SCRATCH_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


def _checker(reference: Counter) -> InvariantChecker:
    return InvariantChecker(reference=reference)


#: per-event invariant checkers (`runtime.checker.invariants`, raising `InvariantViolation`): a
#: factory of a fresh checker per execution from the reference's committed multiset, passed as
#: `execute(..., invariants=...)`. The one place to turn them off (None) for every run; per
#: call: `run_config(config, invariants=None)`.
INVARIANTS: Callable[[Counter], Any] | None = _checker


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Verdict:
    """What `run_config` found: `kind` is "ok", "expected" or one of `VIOLATIONS`."""

    config: SwarmConfig
    kind: str
    detail: str = ""
    completed: int = 0
    aborted: int = 0
    restarts: int = 0
    #: executions run: 1, or 2 with a restore (rescale) phase
    phases: int = 1

    @property
    def violation(self) -> bool:
        return self.kind not in ("ok", "expected")

    @property
    def replay(self) -> str:
        return replay_line(self.config)

    def summary(self) -> str:
        faults = ", ".join(f"{k}={n}" for k, n in sorted(self.config.fault_counts().items())) or "none"
        return (f"seed={self.config.seed} {self.kind}: faults [{faults}], checkpoints {self.completed} completed / "
                f"{self.aborted} aborted, {self.restarts} restart(s), {self.phases} phase(s)"
                + (f" — {self.detail}" if self.detail else ""))


_DEFAULT: Any = object()


def run_config(config: SwarmConfig, *, invariants: Callable[[Counter], Any] | None = _DEFAULT,
               known_bugs: bool = True) -> Verdict:
    """Run `config` and its failure-free reference and judge the guarantee of its mode.

    Args:
        invariants: a factory of per-event invariant checkers from the reference multiset
            (default: `INVARIANTS`; None: none).
        known_bugs: report a violation `KNOWN_BUGS` explains as "expected" (False: as itself).

    Raises:
        ValueError: `config.problems()` is not empty.
    """
    problems = config.problems()
    if problems:
        raise ValueError(f"invalid swarm config {config!r}: {'; '.join(problems)}")
    factory = INVARIANTS if invariants is _DEFAULT else invariants
    try:
        want_output, want_state = reference(config.seed, config.rows, config.keys, config.skew, config.splits,
                                             config.stages, config.source_watermarks)
    except Exception as exc:  # noqa: BLE001 - the failure-free run must not fail at all
        kind, detail = classify(config, exc)
        return _verdict(config, kind, f"failure-free reference run: {detail}", None, known_bugs)
    checker = None if factory is None else partial(factory, want_output)
    with tempfile.TemporaryDirectory(prefix="barrierflow-swarm-", dir=SCRATCH_DIR) as tmp:
        try:
            run = (_two_phases if config.rescale_to is not None else _one_phase)(config, Path(tmp), checker)
        except RunFailed as failed:
            rerun = _with_the_default_timeout(config, factory, known_bugs) if failed.kind == "liveness" else None
            if rerun is not None and rerun.kind not in ("ok", "liveness"):  # judged as any run: a violation
                return replace(rerun, detail=f"with the default timeout (timeout={config.timeout:g} s does not "
                                             f"finish): {rerun.detail}")
            if rerun is not None and rerun.kind == "ok":
                failed.kind, failed.detail = "expected", (
                    f"does not finish with timeout={config.timeout:g} s but does with the default: its "
                    f"checkpoints take longer, so the final one never completes (tolerable_failures="
                    f"{config.tolerable_failures} retries it forever): {failed.detail}")
            return _verdict(config, failed.kind, failed.detail, failed.run, known_bugs)
    if any("order violation" in f for f in run.failures):
        detail = next(f for f in run.failures if "order violation" in f)
        return _verdict(config, "order", detail, run, known_bugs)
    return _verdict(config, *judge(config, run, want_output, want_state), run, known_bugs)


def _with_the_default_timeout(config: SwarmConfig, factory: Callable[[Counter], Any] | None,
                              known_bugs: bool) -> Verdict | None:
    """The verdict of a run that did not finish, run again with the default (long) checkpoint
    timeout (its config names that timeout, so its replay line reproduces it); None when `config`
    has that timeout already."""
    default = SwarmConfig(seed=0).timeout
    if config.timeout >= default:
        return None
    return run_config(replace(config, timeout=default), invariants=factory, known_bugs=known_bugs)


def _verdict(config: SwarmConfig, kind: str, detail: str, run: Observed | None, known_bugs: bool) -> Verdict:
    if known_bugs:
        for bug in KNOWN_BUGS:
            if kind in bug.kinds and bug.applies(config):
                kind, detail = "expected", f"known bug ({kind}): {bug.why}: {detail}"
                break
    if run is None:
        return Verdict(config, kind, detail)
    return Verdict(config, kind, detail, run.completed, run.aborted, run.restarts, run.phases)


def _environment(config: SwarmConfig, parallelism: int, storage: str | None, restart: RestartStrategy) -> Any:
    from runtime.api.environment import StreamEnvironment

    env = StreamEnvironment(parallelism=parallelism, buffer_size=config.buffer_size, credits=config.credits,
                            buffer_timeout=config.buffer_timeout)
    env.enable_checkpointing(**checkpointing_options(config, storage))
    if not config.chaining:
        env.disable_chaining()
    if config.ha:
        env.set_high_availability("zookeeper", cluster_id="swarm")
    if config.debloat_target is not None:
        env.set_buffer_debloating(target=config.debloat_target, period=config.debloat_period, samples=3)
    env.set_restart_strategy(restart)
    env.set_auto_watermark_interval(config.watermark_interval)
    rows = draw_rows(config.seed, config.rows, config.keys, config.skew)
    build_stamped_job(env, rows, config.splits, config.stages, strict_order=config.exactly_once,
                      source_watermarks=config.source_watermarks)
    return env


def checkpointing_options(config: Any, storage: str | None) -> dict[str, Any]:
    """`enable_checkpointing`'s arguments for a swarm config (this one's or the Ray swarm's):
    interval, mode, timeouts, concurrency, retention, backend and its files, the aligner's bound."""
    return dict(
        interval=config.interval,
        **parse_mode(config.mode, accepted=MODE_NAMES).checkpointing(config.alignment_timeout),
        timeout=config.timeout,
        min_pause=config.min_pause,
        max_concurrent=config.max_concurrent,
        tolerable_failures=config.tolerable_failures,
        retained=config.retained,
        storage=storage,
        state_backend="memory" if config.backend == "full" else "incremental",
        file_merging=config.backend == "merging",
        max_aligned_bytes=config.max_aligned_bytes,
        max_file_size=config.max_file_size,
        compaction_threshold=config.compaction_threshold,
    )


#: events one execution without waiting faults may take before it is judged not to finish
MAX_EVENTS = 1_000_000


def _execute(config: SwarmConfig, env: Any, faults: FaultPlan, checker: Callable[[], Any] | None,
             **options: Any) -> Any:
    """One execution on the simulator, bounded so that a run that does not finish is caught."""
    waits = sum(1 for f in faults.faults if type(f).__name__ in WAITING_FAULTS)
    slow = {SOURCE_VERTEX: config.source_slowdown} if config.source_slowdown != 1 else {}
    options.update(
        seed=config.seed, faults=faults, costs=CostModel(records_per_step=config.records_per_step, slow_tasks=slow),
        network=NetworkOptions(write_latency=config.write_latency),
        # legitimate waits: a lost acknowledgement holds its checkpoint until the timeout (& co.);
        # failure-free runs take at most ~2.2 virtual seconds. Events too: while a task stalls
        # (1.5 x timeout) checkpoints are still triggered every `interval` and subsumed (vopr seed
        # 204729: 4,881 of them, 1.4 M events, then "ok")
        max_time=5.0 + 3 * config.timeout * (1 + waits), max_events=MAX_EVENTS * (1 + waits),
        # nothing moving for this long: stuck (a final checkpoint that outlasts a short timeout
        # expires forever). Above the pauses a config plans: a `TaskStall` (1.5 x timeout), a wait
        # fault's timeout, restart delays, a `SlowStorage` spell. Not above luck: with a 10-20 ms
        # timeout a final checkpoint retried 1-4.3 s may still complete (9 of seeds 0-1999), and
        # such a run is cut, run again with the default timeout and judged there instead
        stall_timeout=1.0 + 3 * config.timeout * (1 + waits),
    )
    if checker is not None:
        options["invariants"] = checker()
    return env.execute("job", executor="sim", **options)


def _one_phase(config: SwarmConfig, tmp: Path, checker: Callable[[], Any] | None) -> Observed:
    env = _environment(config, config.parallelism, str(tmp) if config.storage == "disk" else None,
                       _restart_strategy(config))
    run = Observed(CollectCommitter(), {}, [])
    try:
        result = _execute(config, env, FaultPlan(config.faults, config.seed), checker, committer=run.committer)
    except Exception as exc:  # noqa: BLE001 - every escape is classified
        raise RunFailed(*classify(config, exc), run) from exc
    run.add(result)
    run.final_state = result.final_state
    if config.storage == "disk":
        run.storage_problem = storage_problem(config, tmp)
    return run


def _restart_strategy(config: SwarmConfig) -> RestartStrategy:
    """The config's restart strategy; each kind allows `restart_attempts` restarts, which cover
    every planned fault (in a row, or within one interval)."""
    if config.restart == "exponential":
        # doubling from `restart_delay` up to 50 ms: ~20 restarts stay within the run's time bound
        return RestartStrategy.exponential_delay(
            initial_backoff=config.restart_delay, max_backoff=max(0.05, config.restart_delay), backoff_multiplier=2.0,
            reset_backoff_threshold=config.restart_interval, attempts_before_reset_backoff=config.restart_attempts)
    if config.restart == "failure_rate":
        return RestartStrategy.failure_rate(max_failures_per_interval=config.restart_attempts,
                                            failure_rate_interval=config.restart_interval, delay=config.restart_delay)
    return RestartStrategy.fixed_delay(config.restart_attempts, config.restart_delay)


def _two_phases(config: SwarmConfig, tmp: Path, checker: Callable[[], Any] | None) -> Observed:
    """First execution: no restarts, no fault but a crash for good of the first source subtask
    after `rescale_at` of its records; second: restore_from its directory at parallelism
    `rescale_to` with its committer and the config's faults and restarts, to the end."""
    first_dir = tmp / "first"
    env = _environment(config, config.parallelism, str(first_dir), RestartStrategy.no_restart())
    crash = TaskCrash(task=f"{SOURCE_VERTEX}[0]", after_records=max(1, int(config.rescale_at * first_source_rows(config))))
    committer = CollectCommitter()
    run = Observed(committer, {}, [])
    try:
        result = _execute(config, env, FaultPlan.of(crash), checker, committer=committer)
    except JobFailedError as exc:
        kind, detail = classify(config, exc)
        if kind != "failed" or not any(cause in str(exc) for cause in FAULT_FAILURES):
            raise RunFailed(kind, f"first execution: {detail}", run) from exc
        run.failures.append(f"first execution failed for good: {exc}")
    except Exception as exc:  # noqa: BLE001 - every escape is classified
        raise RunFailed(*classify(config, exc), run) from exc
    else:  # the job ended before the planned crash: nothing to restore
        run.add(result)
        run.final_state = result.final_state
        run.storage_problem = storage_problem(config, first_dir)
        return run
    run.phases = 2
    assert config.rescale_to is not None
    env = _environment(config, config.rescale_to, str(tmp / "second"), _restart_strategy(config))
    try:
        env.restore_from(str(first_dir))
    except CheckpointToolError as exc:
        if committer.output(SINK):
            raise RunFailed("duplicated", f"output committed but no checkpoint to restore: {exc}", run) from exc
        run.committer = committer = CollectCommitter()  # nothing to continue: start afresh
    try:
        result = _execute(config, env, FaultPlan(config.faults, config.seed), checker, committer=committer)
    except Exception as exc:  # noqa: BLE001 - every escape is classified
        raise RunFailed(*classify(config, exc), run) from exc
    run.add(result)
    run.final_state = result.final_state
    run.storage_problem = storage_problem(config, tmp / "second")
    return run


def first_source_rows(config: SwarmConfig) -> int:
    """Rows the first source subtask reads (`assign_splits`: split i goes to subtask i % p)."""
    base, extra = divmod(config.rows, config.splits)
    return sum(base + (1 if i < extra else 0) for i in range(0, config.splits, config.parallelism))


