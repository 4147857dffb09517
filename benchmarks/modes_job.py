"""The benchmark job's parts: keyed records stamped with the time each was due (an open-loop
generator, with one thin split over a slow link for `slow-channel`), and the keyed count step that
stamps when it took each record (`benchmarks.checkpoint_modes` builds the job from them)."""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any

from operators import KeyedProcessFunction
from operators.sources import GeneratorSource, GeneratorSplitReader, SourceSplit


class KeyedRecords:
    """`fn(i)` of the generator: `{"i": i, "key": "k<n>"}`, keys uniform or Zipf(s) over `keys`.

    The key is a pure function of `i` (a hashed uniform draw mapped through the Zipf CDF), so a
    replayed record gets the same key and both executors see the same stream.
    """

    def __init__(self, keys: int, zipf_s: float | None = None) -> None:
        if keys < 1:
            raise ValueError(f"keys must be >= 1, got {keys!r}")
        self.keys = keys
        self.zipf_s = zipf_s
        self.names = [f"k{n}" for n in range(keys)]
        cdf: list[float] = []
        if zipf_s is not None:
            weights = [1.0 / (n + 1) ** zipf_s for n in range(keys)]
            total, acc = sum(weights), 0.0
            for w in weights:
                acc += w
                cdf.append(acc / total)
        self.cdf = cdf

    def __call__(self, i: int) -> dict[str, Any]:
        h = (i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
        h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
        if not self.cdf:
            return {"i": i, "key": self.names[h % self.keys]}
        u = h / 2.0**64
        return {"i": i, "key": self.names[min(self.keys - 1, bisect_right(self.cdf, u))]}


class ScheduledGenerator(GeneratorSource):
    """A `GeneratorSource` whose `created_at` is each record's *due* time under the rate (the
    open-loop schedule, `stamp="due"`), so time spent waiting to be read counts as latency; at
    max rate (no rate, no schedule) when it was read."""

    def __init__(self, *, rate: float | None = None, **options: Any) -> None:
        super().__init__(rate=rate, stamp="read" if rate is None else "due", **options)


class RemoteSplitGenerator(ScheduledGenerator):
    """A `ScheduledGenerator` whose last split is thin: it holds `remote_share` of the records
    (and of the rate), the other splits share the rest evenly (`slow-channel`: the last subtask
    reads a remote partition over a slow link)."""

    def __init__(self, *, remote_share: float, **options: Any) -> None:
        super().__init__(**options)
        if not 0 < remote_share < 1 or self.num_splits < 2:
            raise ValueError(f"RemoteSplitGenerator: remote_share must be in (0, 1) and splits >= 2, got "
                             f"{remote_share!r} and {self.num_splits!r}")
        self.remote_share = remote_share

    def _shares(self) -> list[float]:
        even = (1 - self.remote_share) / (self.num_splits - 1)
        return [even] * (self.num_splits - 1) + [self.remote_share]

    def splits(self) -> list[SourceSplit]:
        total = self.total_records()
        if total is None:
            return super().splits()
        remote = max(1, round(total * self.remote_share))
        counts = [len(range(i, total - remote, self.num_splits - 1)) for i in range(self.num_splits - 1)] + [remote]
        return [SourceSplit(f"{self.name}-{i}", i, 0, n) for i, n in enumerate(counts)]

    def reader(self, split: Any, clock: Any) -> GeneratorSplitReader:
        reader = GeneratorSplitReader(self, split, clock)
        if self.rate is not None:  # this split's own pace (the base class divides the rate evenly)
            reader._rate = self.rate * self._shares()[split.index]
        return reader


def parse(record: dict[str, Any]) -> dict[str, Any]:
    """The stateless step: keeps `created_at` so the sink can measure latency."""
    return {"key": record["key"], "i": record["i"], "created_at": record["created_at"]}


class CountKeepStamp(KeyedProcessFunction):
    """Running count per key; forwards `created_at` and stamps `processed_at` (for throughput).

    Args:
        slow_subtask: the subtask that sleeps `delay` seconds per record (Ray backpressure), or None.
        delay: seconds per record on `slow_subtask`; sleeps are batched into >= 1 ms naps.
    """

    def __init__(self, slow_subtask: int | None = None, delay: float = 0.0) -> None:
        self.slow_subtask = slow_subtask
        self.delay = delay
        self._debt = 0.0

    def process_element(self, record: dict[str, Any], ctx: Any) -> Iterable[dict[str, Any]]:
        count = ctx.value_state("count", default=0)
        n = count.value() + 1
        count.update(n)
        if self.slow_subtask is not None and ctx.subtask == self.slow_subtask:
            self._debt += self.delay
            if self._debt >= 1e-3:
                time.sleep(self._debt)
                self._debt = 0.0
        yield {"key": ctx.key, "count": n, "created_at": record["created_at"], "processed_at": ctx.now()}
