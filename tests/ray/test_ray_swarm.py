"""The Ray swarm (`runtime.verify.ray_swarm`, `runtime.verify.ray_phases`) in every CI run.

`CI_SEEDS` are fixed seeds, picked (`tests/ray/test_ray_swarm.py::cheap_covering_seeds`) so that
together they draw every mode, `slots_per_worker` 1 and 2, both storages, every backend, a restore
at another parallelism and every fault kind Ray draws — process kills included — while each stays
a few processes and seconds. A failing seed's message is the line that replays it; longer runs:
`python -m runtime.verify.vopr --executor ray --swarm --minutes M`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from runtime.verify import ray_phases, ray_swarm
from runtime.verify.judging import RunFailed
from runtime.verify.ray_phases import run_config
from runtime.verify.ray_swarm import (
    KNOWN_BUGS,
    KnownBug,
    RaySwarmConfig,
    avoiding_known_bugs,
    coverage,
    draw_config,
    environment,
    parse_ray_config,
    replay_line,
    restart_strategy,
)
from runtime.workloads.seeded import SINK, build_stamped_job, draw_rows, multiset, normalize_state
from vocabulary.fault_plan import FaultPlan, ProcessKill

CI_SEEDS = (230, 388, 171, 283, 337, 246, 14, 301, 151, 156)

#: what the CI seeds draw together (a feature is "option=value" or "fault=Kind[:process]")
MUST_COVER = (
    {f"mode={mode}" for mode in ray_swarm.MODES}
    | {"slots=1", "slots=2", "storage=memory", "storage=disk", "chaining=False"}
    | {f"backend={backend}" for backend in ray_swarm.BACKENDS}
    | {"rescale=same process, other parallelism", "fault=ProcessKill:worker", "fault=ProcessKill:coordinator",
       "fault=ProcessKill:committer", "fault=ProcessKill:blob_store", "fault=TaskCrash", "fault=CoordinatorCrash",
       "fault=TaskStall", "fault=TornWrite"}
)


def features(config: RaySwarmConfig) -> set[str]:
    drawn = coverage(config)  # as it runs
    return ({f"mode={config.mode}", f"slots={config.slots_per_worker}", f"storage={config.storage}",
             f"backend={config.backend}", f"chaining={config.chaining}", f"rescale={drawn['rescale']}"}
            | {f"fault={kind}" for kind in drawn["faults"]})


#: `cost` units of a CI seed, at most: a worker process start (~1 CPU-second) or a second of job
MAX_CI_COST = 12


def cost(config: RaySwarmConfig) -> float:
    """Roughly what a config costs to run: the processes its executions start, two per fault that
    fails over (a replacement process and the restart), and the job's seconds."""
    tasks = len(environment(config, config.parallelism, None, restart_strategy(config)).get_job_graph().task_ids())
    processes = math.ceil(tasks / config.slots_per_worker) + 2 + (config.storage == "memory")
    failovers = sum(1 for f in config.faults if type(f).__name__ in (
        "TaskCrash", "CoordinatorCrash", "TaskCrashDuringRecovery", "CoordinatorCrashBeforeNotify", "ProcessKill",
        "TaskStall"))
    rechecks = 3 if config.storage == "disk" else 0  # one worker, the coordinator and the committer
    return processes * (2 if config.rescale_to is not None else 1) + rechecks + 2 * failovers + config.rows / config.rate


def runs(seed: int) -> RaySwarmConfig:
    """What seed `seed` runs while `KNOWN_BUGS` are not fixed."""
    return avoiding_known_bugs(draw_config(seed))[0]


def cheap_covering_seeds(size: int = 10, first: int = 0, count: int = 400) -> list[int]:
    """Seeds of `first..first+count` that cost at most `MAX_CI_COST` as they run, picked greedily
    — the one drawing the most of what is still uncovered, the cheaper on a tie — then the
    cheapest others up to `size` (how `CI_SEEDS` was chosen)."""
    candidates = [(cost(c), c.seed, features(c)) for c in map(runs, range(first, first + count))
                  if cost(c) <= MAX_CI_COST]
    wanted = set().union(*(f for _, _, f in candidates)) - {"rescale=none"}
    chosen: list[int] = []
    while wanted:
        best = max(candidates, key=lambda c: (len(c[2] & wanted), -c[0]))
        if not best[2] & wanted:
            break
        chosen.append(best[1])
        wanted -= best[2]
        candidates.remove(best)
    return chosen + [seed for _, seed, _ in sorted(candidates)[:max(0, size - len(chosen))]]


# ---------------------------------------------------------------------- pure: drawing, replay, exclusion


def test_the_ci_seeds_cover_every_mode_slot_storage_backend_and_process_kill_and_stay_cheap() -> None:
    configs = [runs(seed) for seed in CI_SEEDS]
    assert len(configs) >= 10
    covered = set().union(*map(features, configs))
    assert covered >= MUST_COVER, sorted(MUST_COVER - covered)
    assert all(cost(c) <= MAX_CI_COST for c in configs), [(c.seed, cost(c)) for c in configs]


def test_every_drawn_config_is_valid_and_replays_from_its_line() -> None:
    for seed in range(200):
        config = draw_config(seed)
        assert config == draw_config(seed) and not config.problems(), (seed, config.problems())
        assert parse_ray_config(repr(config)) == config
        assert replay_line(config) == f"python -m runtime.verify.vopr --executor ray --seed {seed}"
        assert f"seed={seed} rows={config.rows} " in config.knobs()
    changed = replace(draw_config(3), faults=(ProcessKill("worker", task="count1[0]", at_fraction=0.5),))
    assert replay_line(changed) == f'python -m runtime.verify.vopr --executor ray --config "{changed!r}"'
    assert "ProcessKill(task='count1[0]', at_fraction=0.5)" in repr(changed)


def test_a_config_a_known_bug_applies_to_runs_without_it_and_names_it(monkeypatch) -> None:
    ran = []

    def record(config, tmp):
        ran.append(config)
        raise RunFailed("failed", "recorded")

    monkeypatch.setattr(ray_phases, "run_phases", record)
    planted = KnownBug("planted", "a planted bug of rescaled rechecks",
                       lambda config: config.recheck_parallelism != config.parallelism,
                       lambda config: replace(config, recheck_parallelism=config.parallelism),
                       repr(replace(draw_config(3), parallelism=2, recheck_parallelism=1)))
    monkeypatch.setattr(ray_swarm, "KNOWN_BUGS", (*KNOWN_BUGS, planted))
    for bug in ray_swarm.KNOWN_BUGS:
        config = parse_ray_config(bug.replay)
        assert bug.applies(config) and not bug.applies(bug.avoid(config)) and bug.name and bug.why
        verdict = run_config(config)
        assert ran[-1] == avoiding_known_bugs(config)[0] != config
        assert bug.name in verdict.avoided and f"avoided known bugs: {bug.name}" in verdict.summary()
        assert verdict.config == config  # the replay line is the drawn config's
        run_config(config, known_bugs=False)
        assert ran[-1] == config


def test_the_paced_source_reads_the_same_rows_per_split_as_the_collection() -> None:
    """`build_stamped_job(rate=)` (what the Ray swarm runs) against the reference's collection."""
    from runtime.api.environment import StreamEnvironment

    results = []
    for rate in (None, 5000.0):
        env = StreamEnvironment(parallelism=2, buffer_size=16)
        env.enable_checkpointing(interval=0.01)
        build_stamped_job(env, draw_rows(5, 503, 7, 1.0), 3, ("list", "count", "seqcheck"), strict_order=True,
                          rate=rate)
        result = env.execute("job", executor="sim", seed=1)
        results.append((multiset(result.output(SINK)), normalize_state(result.final_state),
                        [v.name for v in env.get_job_graph().vertices]))
    assert results[0] == results[1]


# ---------------------------------------------------------------------- on Ray


@pytest.mark.ray
@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_ray_swarm_seed_keeps_its_guarantee(ray_session, seed: int) -> None:
    verdict = run_config(draw_config(seed))
    assert not verdict.violation, f"{verdict.summary()}\n    replay: {verdict.replay}"


@pytest.mark.ray
def test_killed_worker_and_coordinator_processes_fail_over_exactly_once(ray_session) -> None:
    """SIGKILL of a worker's and the coordinator's process (not `ray.kill`): each is noticed as a
    death, fails over, and the committed output is the failure-free one."""
    config = RaySwarmConfig(seed=5, rows=2000, keys=4, parallelism=2, splits=2, rate=1000.0)
    env = environment(config, 2, None, restart_strategy(config))
    plan = FaultPlan.of(ProcessKill("worker", task="count0[1]", at_fraction=0.3),
                        ProcessKill("coordinator", at_fraction=0.6))
    result = ray_swarm.execute(config, env, plan)
    assert any(f.startswith("task ") and " died: " in f for f in result.failures), result.failures
    # (a death found while the worker's failover cancels the attempt joins that failover's reason)
    assert any("checkpoint coordinator died" in f for f in result.failures), result.failures
    want, _ = ray_phases.reference(config.seed, config.rows, config.keys, config.skew, config.splits, config.stages)
    assert multiset(result.output(SINK)) == want


@pytest.mark.ray
def test_a_worker_and_the_coordinator_killed_at_once_are_both_named_and_restart_once(ray_session) -> None:
    """Both processes die before the driver's next poll: whichever death it finds first starts the
    failover, the other is found while that failover cancels the attempt and joins its reason."""
    config = RaySwarmConfig(seed=5, rows=2000, keys=4, parallelism=2, splits=2, rate=1000.0)
    env = environment(config, 2, None, restart_strategy(config))
    plan = FaultPlan.of(ProcessKill("worker", task="count0[1]", at_fraction=0.3),
                        ProcessKill("coordinator", at_fraction=0.3))
    result = ray_swarm.execute(config, env, plan)
    assert len(result.failures) == 1 and result.restarts == 1, result.failures
    assert "task count0[" in result.failures[0] and "checkpoint coordinator died" in result.failures[0], result.failures
    want, _ = ray_phases.reference(config.seed, config.rows, config.keys, config.skew, config.splits, config.stages)
    assert multiset(result.output(SINK)) == want


@pytest.mark.ray
@pytest.mark.parametrize("process", ["coordinator", "worker"])
def test_a_process_kill_due_at_the_last_records_strikes_before_the_job_ends(ray_session, process: str) -> None:
    """Due only once the sources read their last records, the kill is often first seen in the poll
    that also finds every task finished: it still strikes, is noticed, and the job ends exactly once
    from its final checkpoint."""
    config = RaySwarmConfig(seed=5, rows=2000, keys=4, parallelism=2, splits=2, rate=1000.0)
    env = environment(config, 2, None, restart_strategy(config))
    plan = FaultPlan.of(ProcessKill(process, task="count0[1]" if process == "worker" else None, at_fraction=0.9995))
    result = ray_swarm.execute(config, env, plan)
    died = "checkpoint coordinator died" if process == "coordinator" else "task count0["
    assert any(died in f for f in result.failures), result.failures
    want, _ = ray_phases.reference(config.seed, config.rows, config.keys, config.skew, config.splits, config.stages)
    assert multiset(result.output(SINK)) == want
