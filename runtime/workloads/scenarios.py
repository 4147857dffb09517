"""Named simulator scenarios shared by tests and benchmarks.

`backpressure_job`: Flink's `UnalignedCheckpointTestBase` shape — every record carries a header
(split, sequence number) so the committed output can be checked for loss, duplication and
reordering; one keyed subtask is slow and channels have one credit, so in-flight data piles up
in front of it and aligned barriers queue behind it.

`relay_job`: two sources -> rebalance -> "relay" (map) -> key_by -> "count" -> sink, parallelism 2,
so every relay and count subtask has two input channels and aligned checkpoints really align;
named tasks for explicit fault plans (`Source: collection[0]`, `relay[1]`, `count[0]`, ...).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from operators import CollectSink, KeyedProcessFunction
from runtime.workloads.seeded import CountPerKey

SINK = "checked"


class CountAndForward(KeyedProcessFunction):
    """Counts per key and forwards the record with its header."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {"split": record["split"], "seq": record["seq"], "key": record["key"]}


def header_rows(splits: int, per_split: int, keys: int) -> list[dict[str, Any]]:
    """Rows in split order: split s holds seq 0..per_split-1 (from_collection splits contiguously)."""
    return [
        {"split": s, "seq": i, "key": f"k{(s * 7919 + i) % keys}", "pad": "x" * 32}
        for s in range(splits)
        for i in range(per_split)
    ]


def build_backpressure_job(env: Any, rows: list[dict[str, Any]], splits: int) -> None:
    (
        env.from_collection(rows, splits=splits)
        .map(lambda r: r, name="decode")
        .key_by("key")
        .process(CountAndForward(), name="slow-count")
        .sink_to(CollectSink(SINK))
    )


@dataclass(frozen=True)
class HeaderCheck:
    lost: int
    duplicated: int
    reordered: int

    @property
    def clean(self) -> bool:
        return self.lost == self.duplicated == self.reordered == 0


def check_headers(rows: list[dict[str, Any]], committed: list[dict[str, Any]]) -> HeaderCheck:
    """Count lost, duplicated and reordered records (order is per (split, key): one path)."""
    expected = {(r["split"], r["seq"]) for r in rows}
    seen: dict[tuple[int, int], int] = defaultdict(int)
    last: dict[tuple[int, str], int] = {}
    reordered = 0
    for record in committed:
        header = (record["split"], record["seq"])
        seen[header] += 1
        path = (record["split"], record["key"])
        if path in last and record["seq"] <= last[path]:
            reordered += 1
        last[path] = max(last.get(path, -1), record["seq"])
    lost = sum(1 for h in expected if seen.get(h, 0) == 0)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    return HeaderCheck(lost, duplicated, reordered)


RELAY_SINK = "out"


def relay_job(rows: int = 400, *, storage: str | None = None, attempts: int = 5, **checkpointing: Any) -> Any:
    """The relay job (see the module docstring) in a new `StreamEnvironment`, checkpointing every
    2 virtual ms unless `checkpointing` (options of `enable_checkpointing`) says otherwise."""
    from runtime.api.environment import StreamEnvironment
    from vocabulary.options import RestartStrategy

    env = StreamEnvironment(parallelism=2, buffer_size=4, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(**{"interval": 0.002, "tolerable_failures": 1_000_000, "storage": storage,
                                **checkpointing})
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=attempts, delay=0.001))
    records = [{"id": i, "key": f"k{i % 5}"} for i in range(rows)]
    (env.from_collection(records, splits=2).rebalance().map(lambda r: r, name="relay")
        .key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink(RELAY_SINK)))
    return env


def _nan_batch(nan_records: int, idx: Any) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    return {"k": pa.array(np.where(idx < nan_records, np.nan, 1.5))}


def nan_keys_job(env: Any, nan_records: int, *, vectorised: bool) -> None:
    """`nan_records` records keyed by NaN (and one by 1.5), each carrying a NaN object of its own,
    counted per key by the built-in `count()` ("count", sink "counts": vectorised, from Arrow
    batches) and by a `KeyedProcessFunction` ("per-key", sink "per-key"). Every NaN is one key."""
    from functools import partial

    if vectorised:
        stream = env.generate(count=nan_records + 1, batch_fn=partial(_nan_batch, nan_records), name="nans")
    else:
        rows = [{"k": float("nan")} for _ in range(nan_records)] + [{"k": 1.5}]
        stream = env.from_collection(rows, splits=2, name="nans")
    stream.key_by("k").count(name="count").sink_to(CollectSink("counts"))
    stream.key_by("k").process(CountPerKey("k"), name="per-key").sink_to(CollectSink("per-key"))


def nan_key_counts(result: Any) -> dict[str, list[int]]:
    """Per counting operator of `nan_keys_job`, the final counts of its NaN keys (one, if NaN is one key)."""
    return {vertex: [count for states in result.final_state[vertex].values() for key, count in states.items()
                     if isinstance(key, float) and key != key]
            for vertex in ("count", "per-key")}
