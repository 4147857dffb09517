"""Jobs shared by the Ray tests (a plain module: Ray workers import it by name)."""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.options import CheckpointingMode, RestartStrategy


def pageview_rows(n: int, apps: int = 8, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"user": rng.randrange(1000), "app": f"app{rng.randrange(apps)}", "i": i} for i in range(n)]


def expected_counts(rows: list[dict[str, Any]]) -> Counter:
    apps = Counter(r["app"] for r in rows)
    return multiset([{"app": a, "count": c} for a, n in apps.items() for c in range(1, n + 1)])


def to_app(record: dict[str, Any]) -> dict[str, Any]:
    return {"app": record["app"]}


class SlowCountPerKey(CountPerKey):
    """The page-view count at most `1 / delay` records a second: a receiver whose throughput,
    and so the buffer size debloating asks its senders for, has an upper bound on any machine."""

    def __init__(self, key_field: str = "key", delay: float = 0.0002) -> None:
        super().__init__(key_field)
        self.delay = delay

    def process_element(self, record: dict[str, Any], ctx: Any):
        time.sleep(self.delay)
        yield from super().process_element(record, ctx)


class ListeningSink(CollectSink):
    """A user's sink that acts on every completion itself: it listens for completions."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)


def pageview_env(rows: list[dict[str, Any]], *, mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE,
                 interval: float = 0.05, attempts: int | None = 10, fn: Any = to_app, buffer_size: int = 64,
                 storage: str | None = None, unaligned: bool = False,
                 sink: CollectSink | None = None, count: CountPerKey | None = None) -> StreamEnvironment:
    """The page-view job: source -> map to app -> keyBy(app) -> count -> sink "pv"
    (`attempts=None`: the default restart strategy; `sink`: another sink "pv" than `CollectSink`;
    `count`: another count function than `CountPerKey("app")`)."""
    env = StreamEnvironment(parallelism=2, buffer_size=buffer_size, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=interval, mode=mode, unaligned=unaligned, tolerable_failures=1000,
                             storage=storage)
    if attempts is not None:
        env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=attempts, delay=0.01))
    (
        env.from_collection(rows, splits=2)
        .map(fn, name="to-app")
        .key_by("app")
        .process(count if count is not None else CountPerKey("app"), name="count")
        .sink_to(sink if sink is not None else CollectSink("pv"))
    )
    return env


def self_union_env(rows: list[dict[str, Any]]) -> StreamEnvironment:
    """source -> map to app, unioned with itself (two edges between the same vertices) -> keyBy(app)
    -> count -> sink "pv": every app counts twice its records."""
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    apps = env.from_collection(rows, splits=2).map(to_app, name="to-app")
    apps.union(apps).key_by("app").process(CountPerKey("app"), name="count").sink_to(CollectSink("pv"))
    return env


#: the record index `emit_unstageable` gives a value Arrow cannot carry
UNSTAGEABLE = 1500


def emit_unstageable(record: dict[str, Any]) -> dict[str, Any]:
    """One output record holds an int beyond int64: fine in Python, not in Arrow (the sink's stage)."""
    return {"app": record["app"], "i": record["i"], "n": 2**70 if record["i"] == UNSTAGEABLE else 1}


def unstageable_env(rows: list[dict[str, Any]]) -> StreamEnvironment:
    """source -> map -> sink "pv", one chained task: the sink gets the map's dicts unconverted."""
    env = StreamEnvironment(parallelism=1, buffer_size=64, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.02, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=1, delay=0.01))
    env.from_collection(rows, splits=1).map(emit_unstageable, name="emit").sink_to(CollectSink("pv"))
    return env


#: the record index from which `int_or_str` gives field "x" a str (an int before)
MIXED_FROM = 1200


def int_or_str(record: dict[str, Any]) -> dict[str, Any]:
    return {"app": record["app"], "i": record["i"], "x": "s" if record["i"] >= MIXED_FROM else record["i"]}


def mixed_types_env(rows: list[dict[str, Any]], buffer_size: int) -> StreamEnvironment:
    """source -> map "shape" (field "x": ints, then strs) -> rebalance -> map "after" (p=2) -> sink."""
    env = StreamEnvironment(parallelism=2, buffer_size=buffer_size, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.02, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.no_restart())
    (
        env.from_collection(rows, splits=1).set_parallelism(1)
        .map(int_or_str, name="shape").set_parallelism(1)
        .rebalance().map(lambda r: r, name="after")
        .sink_to(CollectSink("pv"))
    )
    return env
