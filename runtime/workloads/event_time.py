"""An event-time job with a plain-Python reference: timers, deleted timers, side outputs.

Rows `{"id", "key", "v", "t"}` have event times `t` roughly `10 * id`, out of order by at most
`DISORDER` (`event_rows`); the source stamps them per split with a bounded-out-of-orderness
strategy wide enough that no record is ever late, so every result is independent of timing and a
failure-free run, any faulty run and the reference agree exactly (`reference`):

* `Buckets` (keyed by `key`) sums `v` per key and bucket of `BUCKET` time units in map state and
  registers an event-time timer at the bucket's last instant; its `on_timer` emits
  `{"key", "end", "sum"}` (with the timer's time as the record's timestamp). A record with
  `v == 3` registers a *probe* timer `PROBE_DELAY` after its bucket; the bucket's timer deletes it
  again when the sum is even, so a probe reaching the "probes" side output means the deletion was
  lost (or the sum was odd: the reference knows which). Records with `v >= BIG` go to the "alerts"
  side output from `process_element`, buckets whose sum exceeds `ALERT_SUM` from `on_timer`.
* `Cumulative` (keyed again) keeps each bucket result until the watermark passes its time, then
  emits the key's running total in event-time order — a second stage whose timers fire only if
  the first stage forwards watermarks, and whose output depends on their order.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from operators import CollectSink, KeyedProcessFunction, OutputTag, WatermarkStrategy

BUCKET = 100
DISORDER = 25
PROBE_DELAY = 1_050
BIG = 9
ALERT_SUM = 40
ALERTS = OutputTag("alerts")
PROBES = OutputTag("probes")
SINKS = ("totals", "alerts", "probes")


def event_rows(count: int, keys: int = 5) -> list[dict[str, Any]]:
    """`count` rows; `t` is `10 * id` plus a jitter of at most `DISORDER`."""
    return [{"id": i, "key": f"k{i % keys}", "v": i % 11, "t": 10 * i + (i * 37) % (DISORDER + 1)}
            for i in range(count)]


def bucket_end(t: int) -> int:
    return t // BUCKET * BUCKET + BUCKET - 1


class Buckets(KeyedProcessFunction):
    """Sums per key and bucket, fired by event-time timers (see the module docstring)."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        end = bucket_end(ctx.timestamp())
        sums = ctx.map_state("sums")
        sums.put(end, sums.get(end, 0) + record["v"])
        timers = ctx.timer_service()
        timers.register_event_time_timer(end)
        if record["v"] == 3:
            timers.register_event_time_timer(end + PROBE_DELAY)
        if record["v"] >= BIG:
            ctx.output(ALERTS, {"kind": "big", "key": ctx.key, "id": record["id"]})
        return ()

    def on_timer(self, timestamp: int, ctx: Any):
        sums = ctx.map_state("sums")
        if (timestamp + 1) % BUCKET:  # a probe: its bucket's timer did not delete it
            ctx.output(PROBES, {"key": ctx.key, "probe": timestamp})
            return
        total = sums.get(timestamp)
        sums.remove(timestamp)
        if total % 2 == 0:
            ctx.timer_service().delete_event_time_timer(timestamp + PROBE_DELAY)
        if total > ALERT_SUM:
            ctx.output(ALERTS, {"kind": "bucket", "key": ctx.key, "id": timestamp})
        yield {"key": ctx.key, "end": timestamp, "sum": total}


class Cumulative(KeyedProcessFunction):
    """Running total per key, in event-time order of the bucket results."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        ctx.map_state("pending").put(record["end"], record["sum"])
        ctx.timer_service().register_event_time_timer(ctx.timestamp())
        return ()

    def on_timer(self, timestamp: int, ctx: Any):
        pending, total = ctx.map_state("pending"), ctx.value_state("total", default=0)
        total.update(total.value() + pending.get(timestamp))
        pending.remove(timestamp)
        yield {"key": ctx.key, "end": timestamp, "total": total.value()}


def strategy() -> WatermarkStrategy:
    """Per split: watermarks `DISORDER` + 5 behind the highest `t` (no record is ever late)."""
    return WatermarkStrategy.for_bounded_out_of_orderness(DISORDER + 5).with_timestamp_assigner(_row_time)


def _row_time(record: dict[str, Any], previous: Any) -> int:
    return record["t"]


def build_event_time_job(env: Any, rows: list[dict[str, Any]], splits: int) -> None:
    """Add the job to `env`: sinks "totals", "alerts" and "probes"."""
    stream = env.from_collection(rows, splits=splits, watermark_strategy=strategy())
    sums = stream.map(lambda r: {"id": r["id"], "key": r["key"], "v": r["v"]}, name="project") \
        .key_by("key").process(Buckets(), name="buckets")
    sums.key_by("key").process(Cumulative(), name="cumulative").sink_to(CollectSink("totals"))
    sums.get_side_output(ALERTS).map(lambda r: {**r, "alert": True}, name="mark").sink_to(CollectSink("alerts"))
    sums.get_side_output(PROBES).sink_to(CollectSink("probes"))


def reference(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What the job commits, computed in plain Python."""
    sums: dict[tuple[str, int], int] = defaultdict(int)
    probed: set[tuple[str, int]] = set()
    alerts = []
    for row in rows:
        end = bucket_end(row["t"])
        sums[(row["key"], end)] += row["v"]
        if row["v"] == 3:
            probed.add((row["key"], end))
        if row["v"] >= BIG:
            alerts.append({"kind": "big", "key": row["key"], "id": row["id"], "alert": True})
    totals, running = [], defaultdict(int)
    for (key, end), total in sorted(sums.items(), key=lambda item: (item[0][1], item[0][0])):
        running[key] += total
        totals.append({"key": key, "end": end, "total": running[key]})
        if total > ALERT_SUM:
            alerts.append({"kind": "bucket", "key": key, "id": end, "alert": True})
    probes = [{"key": key, "probe": end + PROBE_DELAY} for key, end in probed if sums[(key, end)] % 2]
    return {"totals": totals, "alerts": alerts, "probes": probes}
