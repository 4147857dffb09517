"""A small page-view shaped job for the calibration tests (rate-limited, checkpoints often)."""

from __future__ import annotations

from typing import Any

from operators import CollectSink, KeyedProcessFunction
from operators.sources import GeneratorSource


class Count(KeyedProcessFunction):
    def process_element(self, record: dict[str, Any], ctx: Any) -> Any:
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {"key": ctx.key, "n": count.value(), "created_at": record["created_at"]}


def small_job(*, records: int = 3000, rate: float | None = 5000.0, parallelism: int = 2,
              unaligned: bool = True, interval: float = 0.02, stamp: str = "read", keys: int = 16) -> Any:
    """generator -> map -> key_by -> count -> sink, `records` at `rate` records/s over `keys`
    keys (`stamp`: the generator's `created_at`, "read" or "due")."""
    from runtime import StreamEnvironment

    env = StreamEnvironment(parallelism=parallelism, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=interval, unaligned=unaligned)
    source = GeneratorSource(count=records, rate=rate, fn=lambda i: {"i": i, "key": f"k{i % keys}"},
                             splits=parallelism, name="generator", stamp=stamp)
    (env.from_source(source).map(lambda r: {"key": r["key"], "created_at": r["created_at"]}, name="parse")
     .key_by("key").process(Count(), name="count").sink_to(CollectSink("out")))
    return env
