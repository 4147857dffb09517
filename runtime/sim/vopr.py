"""VOPR-style runner: random job + random faults from one seed, checked for exactly-once.

    python -m runtime.sim.vopr [--seed N] [--count K] [--mode aligned|unaligned|timeout|at_least_once]

Each seed derives the job (`runtime.sim.workloads.random_spec`), the simulator's interleavings
and the fault plan. A failing seed prints the one-line command that replays it.
"""

from __future__ import annotations

import argparse
import random
import sys

from runtime.faults import FaultPlan
from runtime.sim.workloads import SINK, make_env, multiset, random_spec


def check_seed(seed: int, mode: str = "aligned") -> str | None:
    """Run one seed; return None if the guarantee held, else a description of the violation."""
    spec = random_spec(seed)
    rng = random.Random(seed)
    faults = FaultPlan.random(seed=seed, crashes=rng.randint(0, 3), lost_acks=rng.randint(0, 1),
                              stalls=rng.randint(0, 2), storage_failures=rng.randint(0, 1))
    reference = make_env(spec, mode="none").execute("job", executor="sim", seed=0)
    result = make_env(spec, mode=mode).execute("job", executor="sim", seed=seed, faults=faults)
    want, got = multiset(reference.output(SINK)), multiset(result.output(SINK))
    if mode == "at_least_once":
        lost = want - got
        return f"lost {sum(lost.values())} records" if lost else None
    if got != want:
        return (f"output differs: {sum((want - got).values())} missing, "
                f"{sum((got - want).values())} extra")
    if result.final_state != reference.final_state:
        return "final keyed state differs"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--mode", default="aligned", choices=["aligned", "unaligned", "timeout", "at_least_once"])
    args = parser.parse_args(argv)
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    for seed in range(first, first + args.count):
        print(f"SEED={seed} mode={args.mode} job={random_spec(seed)}")
        problem = check_seed(seed, args.mode)
        if problem:
            print(f"FAILED: {problem}\nreproduce with: python -m runtime.sim.vopr --seed {seed} --mode {args.mode}")
            return 1
    print(f"ok: {args.count} seed(s) from {first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
