"""The two-input stages of the seeded stamped jobs (`runtime.workloads.seeded.TWO_INPUT_STAGES`).

Both keep what the swarm relies on — an output multiset and final state independent of when
records, watermarks and timers arrive, late records included:

* `hold_both` (`coprocess`): a keyed co-process (`HoldBoth`) over a stream and a copy of it holds
  each record of either input in one map state shared by both inputs until the watermark passes
  the record's position (an event-time timer per position, `seeded.DelayUntilWatermark`), then
  emits it: every record of both inputs once (a late one at the next watermark);
* `join_with_copy` (`ijoin`): the stream, restamped by an assigner that emits no watermark before
  the end of input (so no record is ever late and buffers are cleaned at the end of input; an
  assigner restarts from `-inf` after a restore, and its watermarks would go back below the ones
  restored as channel state), interval-joined with a copy of itself (ids + 3,000,000, same position) on key
  and equal position (`between(0, 0)`): every pair once, as the left record with `v` = the right
  one's origin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operators import KeyedCoProcessFunction, ProcessJoinFunction, WatermarkStrategy

__all__ = ["HoldBoth", "PairWithOrigin", "hold_both", "join_with_copy"]

class HoldBoth(KeyedCoProcessFunction):
    """The records of both inputs through one keyed function holding them until the watermark
    passes their position (`seeded.DelayUntilWatermark`), its state shared by both inputs."""

    state_names = ("held",)

    def __init__(self, hold: Any) -> None:
        self.hold = hold

    def process_element1(self, record: dict[str, Any], ctx: Any):
        return self.hold.process_element(record, ctx)

    def process_element2(self, record: dict[str, Any], ctx: Any):
        return self.hold.process_element(record, ctx)

    def on_timer(self, timestamp: int, ctx: Any):
        return self.hold.on_timer(timestamp, ctx)


class PairWithOrigin(ProcessJoinFunction):
    """The left record of a joined pair, with `v` = the right record's origin."""

    def process_element(self, left: dict[str, Any], right: dict[str, Any], ctx: Any):
        yield {**left, "v": right["origin"]}


def hold_both(stream: Any, copy: Any, hold: Any, name: str) -> Any:
    """`stream` and `copy` through a keyed `HoldBoth` named `name` around `hold` (a
    `KeyedProcessFunction` whose state is "held")."""
    return stream.connect(copy).key_by("key", "key").process(HoldBoth(hold), name=name)


def join_with_copy(stream: Any, stamp_time: Callable[[dict[str, Any], Any], int], index: int, name: str) -> Any:
    """`stream` interval-joined with a copy of itself (see the module docstring); `stamp_time` is
    the timestamp assigner giving a record's position."""
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(stamp_time)
    stamped = stream.assign_timestamps_and_watermarks(strategy, name=f"stamp{index}")
    copy = stamped.map(_join_copy, name=f"copy{index}")
    return stamped.key_by("key").interval_join(copy.key_by("key")).between(0, 0) \
        .process(PairWithOrigin(), name=name)


def _join_copy(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "id": record["id"] + 3_000_000}
