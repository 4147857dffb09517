"""Seeded random jobs for property tests, the VOPR-style runner and benchmarks.

A workload is described by a small frozen `JobSpec` drawn from a seed, so a failing example
is replayed by its seed alone. Every operator used here has an output *multiset* that does not
depend on the arrival order of records (counts per key, per-record maps and filters), so a
failure-free run is a reference for any fault schedule: exactly-once means the committed
multiset and the final keyed state are identical to it.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from operators import CollectSink, KeyedProcessFunction

SINK = "out"


class CountPerKey(KeyedProcessFunction):
    """The seed-003 page-view count: emits (key, running count) for every record."""

    def __init__(self, key_field: str = "key") -> None:
        self.key_field = key_field

    def process_element(self, record: dict[str, Any], ctx: Any):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {self.key_field: ctx.key, "count": count.value()}


class SumAndCountPerKey(KeyedProcessFunction):
    """Keeps a sum and a list of ids per key; emits only the id, so output is order-free."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        total = ctx.value_state("sum", default=0)
        total.update(total.value() + record["v"])
        seen = ctx.map_state("seen")
        seen.put(str(record["id"]), 1)
        yield {"key": ctx.key, "id": record["id"]}


@dataclass(frozen=True)
class JobSpec:
    seed: int
    num_rows: int
    num_keys: int
    skew: float
    parallelism: int
    splits: int
    stages: tuple[str, ...]
    buffer_size: int
    credits: int
    interval: float

    def rows(self) -> list[dict[str, Any]]:
        rng = random.Random(self.seed)
        weights = [1.0 / (k + 1) ** self.skew for k in range(self.num_keys)]
        keys = rng.choices([f"k{k}" for k in range(self.num_keys)], weights=weights, k=self.num_rows)
        return [{"id": i, "key": keys[i], "v": rng.randrange(0, 10)} for i in range(self.num_rows)]


STAGES = ("map", "filter", "flat_map", "rebalance", "count", "sum")


def random_spec(seed: int) -> JobSpec:
    rng = random.Random(seed)
    n_stages = rng.randint(1, 3)
    stages = [rng.choice(STAGES) for _ in range(n_stages)]
    if not any(s in ("count", "sum") for s in stages):
        stages.append(rng.choice(("count", "sum")))
    return JobSpec(
        seed=seed,
        num_rows=rng.randint(20, 300),
        num_keys=rng.randint(1, 12),
        skew=rng.choice((0.0, 1.0, 2.0)),
        parallelism=rng.randint(1, 4),
        splits=rng.randint(1, 4),
        stages=tuple(stages),
        buffer_size=rng.choice((1, 4, 16, 64)),
        credits=rng.choice((1, 2, 8)),
        interval=rng.choice((0.0005, 0.002, 0.01)),
    )


def build_job(spec: JobSpec, env: Any) -> None:
    """Add `spec`'s pipeline to `env` (a `StreamEnvironment`), ending in `CollectSink(SINK)`."""
    stream = env.from_collection(spec.rows(), splits=spec.splits)
    for index, stage in enumerate(spec.stages):
        if stage == "map":
            stream = stream.map(lambda r: {**r, "v": r["v"] + 1}, name=f"map{index}")
        elif stage == "filter":
            stream = stream.filter(lambda r: r["id"] % 7 != 3, name=f"filter{index}")
        elif stage == "flat_map":
            stream = stream.flat_map(
                lambda r: [r, {**r, "id": r["id"] + 1_000_000}] if r["id"] % 5 == 0 else [r],
                name=f"flat_map{index}",
            )
        elif stage == "rebalance":
            stream = stream.rebalance()
        elif stage == "count":
            stream = stream.key_by("key").process(CountPerKey(), name=f"count{index}")
            stream = stream.map(lambda r: {**r, "id": r["count"], "v": 1}, name=f"reshape{index}")
        elif stage == "sum":
            stream = stream.key_by("key").process(SumAndCountPerKey(), name=f"sum{index}")
            stream = stream.map(lambda r: {**r, "v": 1}, name=f"reshape{index}")
    stream.sink_to(CollectSink(SINK))


def make_env(spec: JobSpec, *, mode: str = "aligned", attempts: int = 50) -> Any:
    """An environment for `spec` with checkpointing in `mode`:
    aligned | unaligned | timeout (aligned with alignment timeout 0) | at_least_once | none."""
    from checkpoint.options import CheckpointingMode, RestartStrategy
    from runtime.api import StreamEnvironment

    env = StreamEnvironment(parallelism=spec.parallelism, buffer_size=spec.buffer_size,
                            credits=spec.credits, buffer_timeout=0.001)
    if mode != "none":
        env.enable_checkpointing(
            interval=spec.interval,
            mode=CheckpointingMode.AT_LEAST_ONCE if mode == "at_least_once" else CheckpointingMode.EXACTLY_ONCE,
            unaligned=mode == "unaligned",
            alignment_timeout=0.0 if mode == "timeout" else None,
            max_concurrent=1,
            tolerable_failures=1_000_000,
        )
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=attempts, delay=0.001))
    build_job(spec, env)
    return env


def multiset(records: list[dict[str, Any]]) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in records)
