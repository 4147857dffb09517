"""Delta debugging of a failing `SwarmConfig` (`runtime.verify.swarm`): a smaller config that still
fails the same way.

`shrink` is greedy: it tries candidates most-reducing first — no faults, halves of the faults,
quarters, ... single faults; no second (rescale) phase; one stage fewer; coarse steps of rows,
keys, parallelism and splits (1, a quarter, a half, three quarters); each option back to its
default; then fine steps (an eighth, one) — takes the first that is valid, not bigger and
still fails, and starts over from it, until no candidate fails or `max_runs` runs were made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields, replace

from runtime.verify.swarm import Verdict, run_config
from runtime.verify.swarm_config import OPTION_FIELDS, SwarmConfig


def shrink(config: SwarmConfig, still_fails: Callable[[SwarmConfig], bool], *, max_runs: int = 400,
           on_step: Callable[[SwarmConfig], None] | None = None) -> SwarmConfig:
    """A smaller config for which `still_fails` holds (delta debugging, greedy: the first
    smaller candidate that still fails is taken and the search restarts from it), after at most
    `max_runs` calls of `still_fails`. `config` itself is assumed to fail."""
    runs = 0
    seen: set[SwarmConfig] = {config}
    improved = True
    while improved and runs < max_runs:
        improved = False
        for candidate in _candidates(config):
            if candidate in seen or candidate.problems() or candidate.size() > config.size():
                continue
            seen.add(candidate)
            runs += 1
            if still_fails(candidate):
                config, improved = candidate, True
                if on_step is not None:
                    on_step(config)
                break
            if runs >= max_runs:
                break
    return config


def _candidates(config: SwarmConfig) -> Iterator[SwarmConfig]:
    """Smaller variants of `config`, most reducing first."""
    faults = config.faults
    n = len(faults)
    if n:
        yield replace(config, faults=())
    chunk = n // 2
    while chunk >= 1:  # drop halves, quarters, ... then single faults
        for start in range(0, n, chunk):
            yield replace(config, faults=faults[:start] + faults[start + chunk:])
        chunk //= 2
    if config.rescale_to is not None:
        yield replace(config, rescale_to=None)
    for index in range(len(config.stages)):
        yield replace(config, stages=config.stages[:index] + config.stages[index + 1:])
    sizes = ("rows", "keys", "parallelism", "splits")
    for name in sizes:  # coarse steps first, over every dimension
        value = getattr(config, name)
        for smaller in sorted({1, value // 4, value // 2, value * 3 // 4}):
            if 1 <= smaller < value:
                yield replace(config, **{name: smaller})
    if config.rescale_to is not None and config.rescale_to > 1:
        yield replace(config, rescale_to=config.rescale_to - 1)
    defaults = {f.name: f.default for f in fields(config)}
    for name in OPTION_FIELDS:
        if getattr(config, name) != defaults[name]:
            yield replace(config, **{name: defaults[name]})
    for name in sizes:  # then fine ones
        value = getattr(config, name)
        for smaller in sorted({value - max(1, value // 8), value - 1}):
            if 1 <= smaller < value:
                yield replace(config, **{name: smaller})


def same_violation(kind: str, *, run: Callable[[SwarmConfig], Verdict] = run_config) -> Callable[[SwarmConfig], bool]:
    """A `shrink` predicate: the candidate fails with violation `kind`."""
    return lambda candidate: run(candidate).kind == kind
