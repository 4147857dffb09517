"""The page-view job of the demo and the speed benchmarks: source -> app -> count per app."""

from __future__ import annotations

import random
from typing import Any

from operators import CollectSink
from runtime.workloads.seeded import CountPerKey


def pageview_rows(n: int, apps: int, seed: int) -> list[dict[str, Any]]:
    """`n` page views over `apps` apps (Zipf-like popularity), drawn from `seed`."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) for k in range(apps)]
    names = [f"app{k}" for k in range(apps)]
    chosen = rng.choices(names, weights=weights, k=n)
    return [{"user": rng.randrange(10_000), "app": chosen[i], "url": f"/p/{i % 97}"} for i in range(n)]


def build_pageview(env: Any, rows: list[dict[str, Any]], splits: int = 2) -> None:
    """The page-view job: source → map to app id → keyBy(app) → count → sink."""
    (
        env.from_collection(rows, splits=splits)
        .map(lambda r: {"app": r["app"]}, name="to-app")
        .key_by("app")
        .process(CountPerKey("app"), name="count")
        .sink_to(CollectSink("pv"))
    )
