"""VOPR-style runner: random job, configuration and faults from one seed, checked for its guarantee.

    python -m runtime.verify.vopr [--seed N] [--count K] [--shrink]     swarm configs of seeds N..N+K-1
    python -m runtime.verify.vopr --seed N --count K --fault KIND        those of them whose plan has a
                                                  fault of class KIND (e.g. CoordinatorStorageFailure)
    python -m runtime.verify.vopr --config 'SwarmConfig(...)' [--shrink] one (e.g. shrunk) config
    python -m runtime.verify.vopr --swarm --minutes M [--seed N] [--shrink] [--jobs J]
                                                  seeds from N until M minutes passed, then a report
                                                  (J processes, default one per core)
    python -m runtime.verify.vopr --seed N --mode aligned|unaligned|timeout|at_least_once [--count K]
                                                  the original corner: `random_spec` jobs, max_concurrent=1
    python -m runtime.verify.vopr --executor ray [--seed N] [--count K] | --config 'RaySwarmConfig(...)' |
                                  --swarm --minutes M
                                                  the same on a real local Ray (`runtime.verify.ray_swarm`):
                                                  each seed logs SEED= and every knob first; no --shrink

A swarm seed draws the job, every checkpointing option and a random subset of fault kinds
(`runtime.verify.swarm`). Each seed prints its faults, checkpoints completed/aborted, restarts and
the one line that replays it; `--shrink` reduces a failing config to a minimal one that fails the
same way and prints its replay line.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
import typing
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from checkpoint.modes import parse_mode
from runtime.verify.parallel_sweep import default_jobs, errors_only, verdicts
from runtime.verify.shrink import same_violation, shrink
from runtime.verify.swarm import Verdict, run_config
from runtime.verify.swarm_config import SwarmConfig, coverage, draw_config, parse_config, replay_line
from runtime.workloads.seeded import SINK, make_env, multiset, random_spec
from vocabulary.fault_plan import Fault, FaultPlan
from vocabulary.options import InvalidOptionError

#: `--mode` of the original runner (`checkpoint.modes` names; `timeout`, `at_least_once` too)
LEGACY_MODES = ("aligned", "unaligned", "aligned-timeout", "at-least-once")


def check_seed(seed: int, mode: str = "aligned") -> str | None:
    """Run one `random_spec` seed in `mode`; None if the guarantee held, else the violation."""
    spec = random_spec(seed)
    rng = random.Random(seed)
    faults = FaultPlan.random(seed=seed, crashes=rng.randint(0, 3), lost_acks=rng.randint(0, 1),
                              stalls=rng.randint(0, 2), storage_failures=rng.randint(0, 1))
    reference = make_env(spec, mode="none").execute("job", executor="sim", seed=0)
    result = make_env(spec, mode=mode).execute("job", executor="sim", seed=seed, faults=faults)
    want, got = multiset(reference.output(SINK)), multiset(result.output(SINK))
    if not parse_mode(mode).exactly_once:
        lost = want - got
        return f"lost {sum(lost.values())} records" if lost else None
    if got != want:
        return (f"output differs: {sum((want - got).values())} missing, "
                f"{sum((got - want).values())} extra")
    if result.final_state != reference.final_state:
        return "final keyed state differs"
    return None


def _legacy(first: int, count: int, mode: str) -> int:
    for seed in range(first, first + count):
        print(f"SEED={seed} mode={mode} job={random_spec(seed)}")
        problem = check_seed(seed, mode)
        if problem:
            print(f"FAILED: {problem}\nreproduce with: python -m runtime.verify.vopr --seed {seed} --mode {mode}")
            return 1
    print(f"ok: {count} seed(s) from {first}")
    return 0


def _report(verdict: Verdict) -> None:
    print(f"{verdict.summary()}\n  replay: {verdict.replay}")


def shrink_and_report(verdict: Verdict, max_runs: int = 400, known_bugs: bool = True) -> SwarmConfig:
    """Shrink a violation's config to a minimal one with the same kind; print its replay line."""
    before = verdict.config
    steps = [0]

    def step(config: SwarmConfig) -> None:
        steps[0] += 1
        print(f"  shrink step {steps[0]}: size {config.size()}: {config!r}", flush=True)

    run = partial(run_config, known_bugs=known_bugs)
    small = shrink(before, same_violation(verdict.kind, run=run), max_runs=max_runs, on_step=step)
    print(f"shrunk {verdict.kind}: size {before.size()} -> {small.size()} ({steps[0]} step(s))\n"
          f"  minimal replay: {replay_line(small)}")
    return small


@dataclass(frozen=True)
class Swarm:
    """One executor's swarm: how a seed's config is drawn, run (to a `Verdict`), covered and
    parsed, and what is logged before a config runs (None: its repr only)."""

    draw_config: Callable[[int], Any]
    run_config: Callable[..., Any]
    coverage: Callable[[Any], dict[str, Any]]
    parse_config: Callable[[str], Any]
    announce: Callable[[Any], str] | None = None


SIM_SWARM = Swarm(draw_config, run_config, coverage, parse_config)


def ray_swarm() -> Swarm:
    """The Ray swarm (`runtime.verify.ray_swarm`; imported only when asked for: it imports Ray)."""
    from runtime.verify import ray_phases, ray_swarm

    return Swarm(ray_swarm.draw_config, ray_phases.run_config, ray_swarm.coverage, ray_swarm.parse_ray_config,
                 announce=lambda config: f"SEED={config.seed} {config.knobs()}")


def _run_configs(configs: list[Any], do_shrink: bool, known_bugs: bool, swarm: Swarm = SIM_SWARM) -> int:
    failed = 0
    kinds: Counter = Counter()
    for config in configs:
        print(f"config: {config!r}" if swarm.announce is None else swarm.announce(config), flush=True)
        verdict = swarm.run_config(config, known_bugs=known_bugs)
        _report(verdict)
        kinds[verdict.kind] += 1
        if verdict.violation:
            failed += 1
            if do_shrink:
                shrink_and_report(verdict, known_bugs=known_bugs)
    if len(configs) > 1:
        print(f"{len(configs)} config(s), {failed} violation(s); verdicts: "
              + ", ".join(f"{k}={n}" for k, n in kinds.most_common()))
    return 1 if failed else 0


def sweep_line(verdict: Verdict) -> str:
    """One seed's line of a sweep: its verdict with the whole reason, then the replay line."""
    return f"{verdict.summary()}  | {verdict.replay}"


def _judged(first: int, swarm: Swarm, jobs: int) -> Iterator[Verdict]:
    """The verdicts of seeds `first`, `first` + 1, ...: the simulator's on `jobs` processes."""
    if swarm is SIM_SWARM:
        yield from verdicts(itertools.count(first), jobs)
        return
    for seed in itertools.count(first):
        config = swarm.draw_config(seed)
        if swarm.announce is not None:
            print(swarm.announce(config), flush=True)
        yield swarm.run_config(config)


def _sweep(first: int, minutes: float, do_shrink: bool, swarm: Swarm = SIM_SWARM, jobs: int = 1) -> int:
    """Run seeds from `first` until `minutes` passed; report speed, coverage, faults, violations."""
    deadline = time.monotonic() + minutes * 60
    start = time.monotonic()
    covered: dict[str, Counter] = defaultdict(Counter)
    faults: Counter = Counter()
    kinds: Counter = Counter()
    violations: list[Verdict] = []
    seed = first
    judged = _judged(first, swarm, jobs)
    while time.monotonic() < deadline:
        verdict = next(judged)
        config = verdict.config
        print(sweep_line(verdict), flush=True)
        for option, value in swarm.coverage(config).items():
            for v in value if isinstance(value, list) else [value]:
                covered[option][v] += 1
        faults.update(config.fault_counts())
        kinds[verdict.kind] += 1
        if verdict.violation:
            violations.append(verdict)
        seed += 1
    judged.close()  # (cancels the seeds still queued)
    elapsed = time.monotonic() - start
    seeds = seed - first
    print(f"\n{seeds} seeds ({first}..{seed - 1}) in {elapsed:.0f} s: {seeds / max(elapsed, 1e-9):.2f} seeds/s")
    print("verdicts: " + ", ".join(f"{k}={n}" for k, n in kinds.most_common()))
    print("faults by kind: " + ", ".join(f"{k}={n}" for k, n in faults.most_common()))
    print("configurations covered:")
    for option, values in covered.items():
        print(f"  {option}: " + ", ".join(f"{v}={n}" for v, n in sorted(values.items(), key=lambda kv: str(kv[0]))))
    if not violations:
        print("no violations")
        return 0
    print(f"{len(violations)} violation(s):")
    for verdict in violations:
        print(f"  {verdict.kind}: {verdict.replay}")
    if do_shrink:
        shrunk: set[str] = set()
        for verdict in violations:  # one shrink per kind keeps the report short
            if verdict.kind not in shrunk:
                shrunk.add(verdict.kind)
                shrink_and_report(verdict)
    return 1


def _mode_name(text: str) -> str:
    try:
        return parse_mode(text, accepted=LEGACY_MODES, option="--mode").name
    except InvalidOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--mode", default=None, type=_mode_name,
                        help="the original runner: random_spec jobs in this mode (aligned, unaligned, "
                             "aligned-timeout or timeout, at-least-once or at_least_once)")
    parser.add_argument("--config", default=None, help="replay one SwarmConfig(...) (as printed)")
    parser.add_argument("--swarm", action="store_true", help="run seeds until --minutes passed")
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="with --swarm on the simulator: seeds judged in N processes at once "
                             "(default: one per core)")
    parser.add_argument("--shrink", action="store_true", help="shrink failing configs")
    parser.add_argument("--fault", default=None, metavar="KIND",
                        help="with --seed/--count: only the seeds whose fault plan has a fault of this class")
    parser.add_argument("--known-bugs-as-violations", action="store_true",
                        help="report what swarm.KNOWN_BUGS explains as violations (to replay or shrink them); "
                             "--executor ray: run configs as drawn, without avoiding ray_swarm.KNOWN_BUGS")
    parser.add_argument("--executor", choices=("sim", "ray"), default="sim",
                        help="ray: the Ray swarm (runtime.verify.ray_swarm) on a local Ray")
    args = parser.parse_args(argv)
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    if args.executor == "ray" and (args.mode is not None or args.shrink):
        parser.error("--mode and --shrink are simulator-only (a Ray config runs for seconds, a shrink for hours)")
    with errors_only():
        if args.executor == "ray":
            return _on_ray(lambda: _main(parser, args, first, ray_swarm()))
        if args.mode is not None:
            return _legacy(first, args.count, args.mode)
        return _main(parser, args, first, SIM_SWARM)


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace, first: int, swarm: Swarm) -> int:
    if args.config is not None:
        try:
            config = swarm.parse_config(args.config)
        except ValueError as exc:
            parser.error(str(exc))
        return _run_configs([config], args.shrink, not args.known_bugs_as_violations, swarm)
    if args.swarm:
        if args.jobs is not None and args.jobs < 1:
            parser.error(f"--jobs must be at least 1, got {args.jobs}")
        return _sweep(first, args.minutes, args.shrink, swarm, default_jobs() if args.jobs is None else args.jobs)
    configs = [swarm.draw_config(seed) for seed in range(first, first + args.count)]
    if args.fault is not None:
        if args.fault not in _fault_classes():
            parser.error(f"--fault {args.fault!r} is not a fault kind; kinds: {', '.join(sorted(_fault_classes()))}")
        configs = [c for c in configs if args.fault in c.fault_counts()]
    return _run_configs(configs, args.shrink, not args.known_bugs_as_violations, swarm)


def _on_ray(run: Callable[[], int]) -> int:
    """`run()` with a local Ray started once for all its configs, and stopped afterwards."""
    import ray

    from runtime.ray.cluster import ensure_ray

    started = ensure_ray()
    try:
        return run()
    finally:
        if started:
            ray.shutdown()


def _fault_classes() -> set[str]:
    """The class names of every fault kind (`vocabulary.fault_plan.Fault`)."""
    return {kind.__name__ for kind in typing.get_args(Fault)}


if __name__ == "__main__":
    sys.exit(main())
