"""The `windowed-join` scenario of `benchmarks.checkpoint_modes`: a job whose state grows with its
window.

The generator's records (`parse`d, stamped with their `created_at` in whole milliseconds as event
time: a window ends at `end - 1` of the time unit, as Flink's) split by `i`: even ones on the
left, odd ones on the right. A window join pairs record `2n` with record `2n + 1` (join key `n`, as
an order meets its payment) in tumbling event-time windows of `WINDOW` ms, so every window holds
each of its records until it fires — the state a checkpoint writes is the last `WINDOW` ms of
records, not a counter per key — and the pairs whose two records fall in one window come out once
it fires. Each pair, stamped with the later record's `created_at`, goes on to the count step and
the sink every scenario has, so latency there includes the wait for the window to close (about
half a window, plus the watermark's `OUT_OF_ORDERNESS` and emission interval).
"""

from __future__ import annotations

from typing import Any

from operators import JoinFunction, TumblingEventTimeWindows, WatermarkStrategy

#: window size and watermark lag, milliseconds of the generator's clock (virtual on the simulator)
WINDOW = 100
OUT_OF_ORDERNESS = 5
#: how often sources emit watermarks (seconds)
WATERMARK_INTERVAL = 0.01

__all__ = ["WINDOW", "add_windowed_join"]


class PairUp(JoinFunction):
    """One pair: the left record's key, the later `created_at` of the two."""

    def join(self, first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
        return {"key": first["key"], "i": first["i"], "created_at": max(first["created_at"], second["created_at"])}


def _created_at(record: dict[str, Any], previous: Any) -> int:
    return int(record["created_at"] * 1000)


def _pair(record: dict[str, Any]) -> int:
    return record["i"] // 2


def add_windowed_join(env: Any, stream: Any) -> Any:
    """The window join over `stream` (records with `i`, `key` and `created_at`): returns the
    stream of pairs; sets `env`'s watermark interval to `WATERMARK_INTERVAL`."""
    env.set_auto_watermark_interval(WATERMARK_INTERVAL)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDERNESS).with_timestamp_assigner(_created_at)
    stamped = stream.assign_timestamps_and_watermarks(strategy, name="event-time")
    left = stamped.filter(lambda r: r["i"] % 2 == 0, name="left")
    right = stamped.filter(lambda r: r["i"] % 2 == 1, name="right")
    return left.join(right).where(_pair).equal_to(_pair).window(TumblingEventTimeWindows.of(WINDOW)) \
        .apply(PairUp(), name="join")

