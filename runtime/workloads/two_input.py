"""A two-input event-time job with a plain-Python reference: a keyed co-process with event-time
timers and an interval join.

Two sources, "left" rows `{"id", "key", "v", "t"}` and "right" rows `{"id", "key", "w", "t"}`
(`two_input_rows`), each out of order by at most `DISORDER` and stamped per split by a
bounded-out-of-orderness strategy wide enough that no record is ever late, so results do not
depend on timing and any faulty run agrees with the reference (`reference`):

* `Balance` (`left.connect(right).key_by("key", "key")`) sums `v` (first input) and `w` (second
  input) per key and bucket of `BUCKET` time units in one map state both inputs share, registers
  an event-time timer at the bucket's last instant (the operator's watermark is the lower of both
  inputs', so a bucket fires only once both sides passed it) and emits `{"key", "end", "left",
  "right"}` from `on_timer`; a right record with `w >= BIG` goes to the "alerts" side output.
* `Pair` (`left.key_by("key").interval_join(right.key_by("key")).between(LOWER, UPPER)`) emits
  `{"key", "l", "r"}` for every left and right record of one key with `LOWER <= r.t - l.t <= UPPER`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from typing import Any

from operators import CollectSink, KeyedCoProcessFunction, OutputTag, ProcessJoinFunction, WatermarkStrategy

BUCKET = 100
DISORDER = 25
BIG = 9
LOWER, UPPER = -20, 30
ALERTS = OutputTag("alerts")
SINKS = ("balances", "joined", "alerts")


def two_input_rows(count: int, keys: int = 5) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`count` left and `count` right rows; `t` about `10 * id` (right: `+ 3`), jittered by at most `DISORDER`."""
    left = [{"id": i, "key": f"k{i % keys}", "v": i % 11, "t": 10 * i + (i * 37) % (DISORDER + 1)}
            for i in range(count)]
    right = [{"id": i, "key": f"k{(i * 3) % keys}", "w": i % 13, "t": 10 * i + 3 + (i * 53) % (DISORDER + 1)}
             for i in range(count)]
    return left, right


def bucket_end(t: int) -> int:
    return t // BUCKET * BUCKET + BUCKET - 1


class Balance(KeyedCoProcessFunction):
    """Sums of both inputs per key and bucket, fired by event-time timers (see the module docstring)."""

    def process_element1(self, record: dict[str, Any], ctx: Any):
        self._add(ctx, 0, record["v"])
        return ()

    def process_element2(self, record: dict[str, Any], ctx: Any):
        self._add(ctx, 1, record["w"])
        if record["w"] >= BIG:
            ctx.output(ALERTS, {"key": ctx.key, "id": record["id"]})
        return ()

    @staticmethod
    def _add(ctx: Any, side: int, value: int) -> None:
        end = bucket_end(ctx.timestamp())
        sums = ctx.map_state("sums")
        both = sums.get(end, [0, 0])
        both[side] += value
        sums.put(end, both)
        ctx.timer_service().register_event_time_timer(end)

    def on_timer(self, timestamp: int, ctx: Any):
        sums = ctx.map_state("sums")
        left, right = sums.get(timestamp)
        sums.remove(timestamp)
        yield {"key": ctx.key, "end": timestamp, "left": left, "right": right}


class Pair(ProcessJoinFunction):
    def process_element(self, left: dict[str, Any], right: dict[str, Any], ctx: Any):
        yield {"key": ctx.key, "l": left["id"], "r": right["id"]}


def strategy() -> WatermarkStrategy:
    """Per split: watermarks `DISORDER` + 5 behind the highest `t` (no record is ever late)."""
    return WatermarkStrategy.for_bounded_out_of_orderness(DISORDER + 5).with_timestamp_assigner(_row_time)


def _row_time(record: dict[str, Any], previous: Any) -> int:
    return record["t"]


def build_two_input_job(env: Any, left_rows: list[dict[str, Any]], right_rows: list[dict[str, Any]],
                        splits: int) -> None:
    """Add the job to `env`: sinks "balances", "joined" and "alerts"."""
    left = env.from_collection(left_rows, splits=splits, name="left", watermark_strategy=strategy())
    right = env.from_collection(right_rows, splits=splits, name="right", watermark_strategy=strategy())
    add_two_input_stages(left, right)


def add_two_input_stages(left: Any, right: Any) -> None:
    """The job's stages over `left` and `right` (rows as `two_input_rows`', stamped so that none is
    late), into sinks "balances", "joined" and "alerts"."""
    balances = left.connect(right).key_by("key", "key").process(Balance(), name="balance")
    balances.sink_to(CollectSink("balances"))
    balances.get_side_output(ALERTS).sink_to(CollectSink("alerts"))
    left.key_by("key").interval_join(right.key_by("key")).between(LOWER, UPPER) \
        .process(Pair(), name="pair").sink_to(CollectSink("joined"))


def reference(left_rows: list[dict[str, Any]], right_rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What the job commits, computed in plain Python."""
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for row in left_rows:
        sums[(row["key"], bucket_end(row["t"]))][0] += row["v"]
    for row in right_rows:
        sums[(row["key"], bucket_end(row["t"]))][1] += row["w"]
    balances = [{"key": key, "end": end, "left": s[0], "right": s[1]} for (key, end), s in sums.items()]
    alerts = [{"key": row["key"], "id": row["id"]} for row in right_rows if row["w"] >= BIG]
    rights: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in right_rows:
        rights[row["key"]].append((row["t"], row["id"]))
    for times in rights.values():
        times.sort()
    joined = []
    for lrow in left_rows:
        times = rights[lrow["key"]]
        start = bisect_left(times, (lrow["t"] + LOWER, -1))
        end = bisect_right(times, (lrow["t"] + UPPER, len(right_rows)))
        joined += [{"key": lrow["key"], "l": lrow["id"], "r": rid} for _, rid in times[start:end]]
    return {"balances": balances, "joined": joined, "alerts": alerts}
