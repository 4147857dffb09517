"""Running one Ray swarm config (`runtime.verify.ray_swarm`): its executions, the new process
that restores, and the verdict (`run_config`).

* One phase: the job runs under the config's faults and restarts.
* Two phases (`rescale_to`): the first execution (no restarts, storage on disk) fails for good at
  a source crash; the second restores its directory at parallelism `rescale_to` under the
  config's faults — in this process, handed the first one's committer as a user passing
  `result.committer` would, or in a NEW Python process that joins the same Ray
  (`python -m runtime.verify.ray_phases ...`, `main` below) and knows only the directory, as a
  user's second `barrierflow run` would. The new process writes its `JobResult` (or how its
  execution failed) to a file the parent reads.
* `recheck`: the finished job's checkpoint directory must be restorable: a further execution at
  `recheck_parallelism` (its tasks in one worker process), handed the committer, restores it and
  must finish with the reference output.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from checkpoint.io.tools import CheckpointToolError, load_checkpoint
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.result import JobFailedError
from runtime.verify.judging import (
    FAULT_FAILURES,
    Observed,
    RunFailed,
    classify,
    judge,
    reference,
    storage_problem,
)
from runtime.verify.ray_swarm import (
    MAX_DURATION,
    RaySwarmConfig,
    RayVerdict,
    avoiding_known_bugs,
    environment,
    execute,
    parse_ray_config,
    restart_strategy,
)
from runtime.verify.swarm import SCRATCH_DIR, first_source_rows
from runtime.verify.swarm_config import SOURCE_VERTEX
from runtime.workloads.seeded import SINK
from vocabulary.fault_plan import FaultPlan, TaskCrash
from vocabulary.options import RestartStrategy

#: seconds the restoring process may take beyond its execution's `MAX_DURATION` (start, join Ray)
PROCESS_SLACK = 60.0


def run_config(config: RaySwarmConfig, *, known_bugs: bool = True) -> RayVerdict:
    """Run `config` on the local Ray (started if this process has none) and judge it.

    Args:
        known_bugs: run `config` without what runs into a `KNOWN_BUGS` entry (`avoid`), naming
            it in the verdict; False: run it as it is.

    Raises:
        ValueError: `config.problems()` is not empty.
    """
    problems = config.problems()
    if problems:
        raise ValueError(f"invalid Ray swarm config {config!r}: {'; '.join(problems)}")
    runs, avoided = avoiding_known_bugs(config) if known_bugs else (config, ())
    want_output, want_state = reference(config.seed, config.rows, config.keys, config.skew, config.splits,
                                        config.stages)
    with tempfile.TemporaryDirectory(prefix="barrierflow-rayswarm-", dir=SCRATCH_DIR) as tmp:
        try:
            run, directory = run_phases(runs, Path(tmp))
        except RunFailed as failed:
            return _verdict(config, failed.kind, failed.detail, failed.run, avoided)
        kind, detail = judge(runs, run, want_output, want_state)
        if kind == "ok" and directory is not None:
            kind, detail = recheck(runs, directory, Path(tmp) / "recheck", run.committer, want_output, want_state)
    return _verdict(config, kind, detail, run, avoided)


def _verdict(config: RaySwarmConfig, kind: str, detail: str, run: Observed | None,
             avoided: tuple[str, ...]) -> RayVerdict:
    if run is None:
        return RayVerdict(config, kind, detail, avoided=avoided)
    return RayVerdict(config, kind, detail, run.completed, run.aborted, run.restarts, run.phases, avoided=avoided)


def run_phases(config: RaySwarmConfig, tmp: Path) -> tuple[Observed, Path | None]:
    """Run the config's executions (Ray started if this process has none; the caller stops it).

    Returns:
        What they showed, and the final execution's checkpoint directory (None: in memory).

    Raises:
        RunFailed: an execution ended in a verdict before there was output to judge.
    """
    from runtime.ray.cluster import ensure_ray

    ensure_ray()
    if config.rescale_to is None:
        directory = tmp / "run" if config.storage == "disk" else None
        run = Observed(CollectCommitter(), {}, [])
        env = environment(config, config.parallelism, _uri(directory), restart_strategy(config))
        try:
            result = execute(config, env, FaultPlan(config.faults, config.seed))
        except Exception as exc:  # noqa: BLE001 - every escape is classified
            raise RunFailed(*classify(config, exc), run) from exc
        _observe(config, run, result, directory)
        return run, directory
    return _two_phases(config, tmp)


def _uri(directory: Path | None) -> str | None:
    return None if directory is None else str(directory)


def _observe(config: RaySwarmConfig, run: Observed, result: Any, directory: Path | None) -> None:
    run.add(result)
    run.committer = result.committer
    run.final_state = result.final_state
    if directory is not None:
        run.storage_problem = storage_problem(config, directory)


def _two_phases(config: RaySwarmConfig, tmp: Path) -> tuple[Observed, Path | None]:
    assert config.rescale_to is not None
    first_dir = tmp / "first"
    env = environment(config, config.parallelism, str(first_dir), RestartStrategy.no_restart())
    crash = TaskCrash(task=f"{SOURCE_VERTEX}[0]", after_records=max(1, int(config.rescale_at * first_source_rows(config))))
    run = Observed(CollectCommitter(), {}, [])
    try:
        result = execute(config, env, FaultPlan.of(crash))
    except JobFailedError as exc:
        kind, detail = classify(config, exc)
        if kind != "failed" or not any(cause in str(exc) for cause in FAULT_FAILURES):
            raise RunFailed(kind, f"first execution: {detail}", run) from exc
        run.failures.append(f"first execution failed for good: {exc}")
        committed = exc.committer if exc.committer is not None else CollectCommitter()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - every escape is classified
        raise RunFailed(*classify(config, exc), run) from exc
    else:  # the job ended before the planned crash: nothing to restore
        _observe(config, run, result, first_dir)
        return run, first_dir
    run.phases = 2
    restore: Path | None = first_dir
    try:
        load_checkpoint(str(first_dir))
    except CheckpointToolError as exc:
        if committed.output(SINK):
            raise RunFailed("duplicated", f"output committed but no checkpoint to restore: {exc}", run) from exc
        restore, committed = None, CollectCommitter()  # nothing to continue: start afresh
    second = tmp / "second" if config.storage == "disk" else None
    if config.restore_process == "new":
        result = _in_new_process(config, restore, second, tmp / "second-result.pickle", run)
    else:
        env = environment(config, config.rescale_to, _uri(second), restart_strategy(config))
        try:
            if restore is not None:
                env.restore_from(str(restore))
            result = execute(config, env, FaultPlan(config.faults, config.seed), committer=committed)
        except Exception as exc:  # noqa: BLE001 - every escape is classified
            raise RunFailed(*classify(config, exc), run) from exc
    _observe(config, run, result, second)
    return run, second


def _in_new_process(config: RaySwarmConfig, restore: Path | None, storage: Path | None, out: Path,
                    run: Observed) -> Any:
    """The second execution, in a new Python process joined to this Ray; its `JobResult`."""
    import ray

    from runtime.ray.cluster import repo_root

    command = [sys.executable, "-m", "runtime.verify.ray_phases", ray.get_runtime_context().gcs_address, repr(config),
               "" if restore is None else str(restore), "" if storage is None else str(storage), str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo_root(), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=MAX_DURATION + PROCESS_SLACK,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise RunFailed("liveness", f"the restoring process did not end within {MAX_DURATION + PROCESS_SLACK:.0f} s",
                        run) from exc
    if not out.exists():
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        raise RunFailed("error", f"the restoring process exited {done.returncode} without a result: {tail}", run)
    with out.open("rb") as file:
        outcome = pickle.load(file)  # noqa: S301 - written by the process this one started
    if "failed" in outcome:
        kind, detail = outcome["failed"]
        raise RunFailed(kind, f"restoring process: {detail}", run)
    return outcome["result"]


def recheck(config: RaySwarmConfig, directory: Path, storage: Path, committer: Any, want_output: Counter,
            want_state: Any) -> tuple[str, str]:
    """Whether the finished job's checkpoint `directory` restores: a further execution at
    `recheck_parallelism`, handed `committer`, must finish with the reference output ("ok"),
    or fail as a known limitation allows ("expected"); else a "restore" violation."""
    env = environment(config, config.recheck_parallelism, str(storage), RestartStrategy.fixed_delay(3, 0.01))
    tasks = len(env.get_job_graph("job").task_ids())
    try:
        env.restore_from(str(directory))
        # every task in one worker: this execution checks the directory, and a process costs a second
        result = execute(config, env, FaultPlan(), slots_per_worker=tasks, committer=committer)
    except Exception as exc:  # noqa: BLE001 - every escape is classified
        kind, detail = classify(config, exc)
        return (kind, detail) if kind == "expected" else ("restore", f"restoring {directory.name}: {kind}: {detail}")
    kind, detail = judge(config, Observed(result.committer, result.final_state, list(result.failures)),
                         want_output, want_state)
    return ("ok", "") if kind == "ok" else ("restore", f"restoring {directory.name}: {kind}: {detail}")


def main(argv: list[str]) -> int:
    """The restoring process: `ADDRESS CONFIG RESTORE STORAGE OUT` (RESTORE, STORAGE: "" for none).
    Joins the Ray at ADDRESS, runs the config's second execution at `rescale_to`, restoring
    RESTORE, and pickles `{"result": JobResult}` or `{"failed": (verdict kind, detail)}` to OUT."""
    import ray

    from runtime.ray.cluster import local_runtime_env

    address, text, restore, storage, out = argv
    config = parse_ray_config(text)
    assert config.rescale_to is not None, config
    ray.init(address=address, runtime_env=local_runtime_env(), log_to_driver=False)
    try:
        env = environment(config, config.rescale_to, storage or None, restart_strategy(config))
        if restore:
            env.restore_from(restore)
        outcome: dict[str, Any] = {"result": execute(config, env, FaultPlan(config.faults, config.seed))}
    except Exception as exc:  # noqa: BLE001 - every escape is classified, in the parent's words
        outcome = {"failed": classify(config, exc)}
    finally:
        ray.shutdown()
    with open(out, "wb") as file:
        pickle.dump(outcome, file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
