"""A windowed job with a plain-Python reference: tumbling, sliding and session windows, late data.

Rows `{"id", "key", "v", "t"}` come from `event_rows` (event time `t` roughly `10 * id`, out of
order by at most `DISORDER`; the source's watermarks trail by `DISORDER + 5`, so a regular row
is never late). Every `PROBE_EVERY`-th row is a *probe*: its time is moved `PROBE_AGE` back, so
it is usually, but not always, late (that depends on when watermarks come). Three keyed stages:

* "tumbling": `TumblingEventTimeWindows.of(TUMBLE)`, `aggregate` (sum and count of the regular
  rows, ids of the probes) + a `ProcessWindowFunction` naming key and window; late probes go to
  the "late" side output. Each probe is thus in exactly one of its window's result or "late";
* "sliding": regular rows, `SlidingEventTimeWindows.of(SLIDE_SIZE, SLIDE)` with
  `allowed_lateness(LATENESS)` (each window keeps its state until its cleanup timer), `reduce`;
* "sessions": regular rows, `EventTimeSessionWindows.with_gap(GAP)` (merging), `process` over
  the elements.

The regular rows are independent of timing, so `reference` is exact for them; `check_probes`
checks the probes' partition between windows and the late output.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from operators import (
    AggregateFunction,
    CollectSink,
    EventTimeSessionWindows,
    OutputTag,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from runtime.workloads.event_time import DISORDER, event_rows, strategy

TUMBLE = 100
SLIDE_SIZE, SLIDE = 200, 50
LATENESS = 40
GAP = 60
PROBE_EVERY = 23
PROBE_AGE = 400
LATE = OutputTag("late")
SINKS = ("tumbling", "sliding", "sessions", "late")

__all__ = ["DISORDER", "SINKS", "add_window_stages", "build_windows_job", "check_probes", "reference", "window_rows"]


def window_rows(count: int, keys: int = 5) -> list[dict[str, Any]]:
    """`event_rows`, each `PROBE_EVERY`-th (from the `PROBE_AGE`-th time unit on) a probe."""
    rows = event_rows(count, keys)
    for row in rows:
        if row["id"] % PROBE_EVERY == PROBE_EVERY - 1 and row["t"] >= PROBE_AGE + 200:
            row["t"] -= PROBE_AGE
            row["probe"] = True
        else:
            row["probe"] = False
    return rows


class SumCount(AggregateFunction):
    """Sum and count of the regular rows, ids of the probes (an accumulator Arrow can store)."""

    def create_accumulator(self) -> dict[str, Any]:
        return {"sum": 0, "count": 0, "probes": []}

    def add(self, value: dict[str, Any], accumulator: dict[str, Any]) -> dict[str, Any]:
        if value["probe"]:
            accumulator["probes"].append(value["id"])
        else:
            accumulator["sum"] += value["v"]
            accumulator["count"] += 1
        return accumulator

    def get_result(self, accumulator: dict[str, Any]) -> dict[str, Any]:
        return accumulator

    def merge(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"sum": a["sum"] + b["sum"], "count": a["count"] + b["count"], "probes": a["probes"] + b["probes"]}


class Described(ProcessWindowFunction):
    """The window's key and bounds beside the aggregate."""

    def process(self, key: Any, context: Any, elements: Any):
        window = context.window()
        for acc in elements:
            yield {"key": key, "start": window.start, "end": window.end, "sum": acc["sum"], "count": acc["count"],
                   "probes": sorted(acc["probes"])}


class SlidingSum(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any):
        window = context.window()
        for element in elements:
            yield {"key": key, "start": window.start, "end": window.end, "sum": element["v"]}


class Session(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any):
        window = context.window()
        times = [e["t"] for e in elements]
        yield {"key": key, "start": window.start, "end": window.end, "count": len(times),
               "sum": sum(e["v"] for e in elements), "first": min(times), "last": max(times)}


def _add_v(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"key": a["key"], "v": a["v"] + b["v"]}


def build_windows_job(env: Any, rows: list[dict[str, Any]], splits: int) -> None:
    """Add the job to `env`: sinks "tumbling", "sliding", "sessions" and "late"."""
    add_window_stages(env.from_collection(rows, splits=splits, watermark_strategy=strategy()))


def add_window_stages(stream: Any) -> Any:
    """The job's stages over `stream` (rows of `window_rows`, stamped by `strategy`), into sinks
    "tumbling", "sliding", "sessions" and "late"; returns the regular rows' stream."""
    tumbling = stream.key_by("key").window(TumblingEventTimeWindows.of(TUMBLE)).side_output_late_data(LATE) \
        .aggregate(SumCount(), Described(), name="tumbling")
    tumbling.sink_to(CollectSink("tumbling"))
    tumbling.get_side_output(LATE).map(lambda r: {"id": r["id"], "key": r["key"], "t": r["t"]}, name="late-ids") \
        .sink_to(CollectSink("late"))
    regular = stream.filter(lambda r: not r["probe"], name="regular")
    regular.map(lambda r: {"key": r["key"], "v": r["v"]}, name="values").key_by("key") \
        .window(SlidingEventTimeWindows.of(SLIDE_SIZE, SLIDE)).allowed_lateness(LATENESS) \
        .reduce(_add_v, SlidingSum(), name="sliding").sink_to(CollectSink("sliding"))
    regular.key_by("key").window(EventTimeSessionWindows.with_gap(GAP)) \
        .process(Session(), name="sessions").sink_to(CollectSink("sessions"))
    return regular


def reference(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What the job commits for the regular rows ("tumbling" without its `probes` field)."""
    tumbling: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    sliding: dict[tuple[str, int], int] = defaultdict(int)
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["probe"]:
            continue
        start = row["t"] // TUMBLE * TUMBLE
        tumbling[(row["key"], start)][0] += row["v"]
        tumbling[(row["key"], start)][1] += 1
        last = row["t"] // SLIDE * SLIDE
        for start in range(last, row["t"] - SLIDE_SIZE, -SLIDE):
            sliding[(row["key"], start)] += row["v"]
        by_key[row["key"]].append(row)
    sessions = []
    for key, key_rows in by_key.items():
        key_rows.sort(key=lambda r: r["t"])
        group = [key_rows[0]]
        for row in key_rows[1:]:
            if row["t"] <= group[-1]["t"] + GAP:  # windows that touch merge, as in Flink
                group.append(row)
            else:
                sessions.append(_session(key, group))
                group = [row]
        sessions.append(_session(key, group))
    return {
        "tumbling": [{"key": k, "start": s, "end": s + TUMBLE, "sum": v[0], "count": v[1]}
                     for (k, s), v in tumbling.items()],
        "sliding": [{"key": k, "start": s, "end": s + SLIDE_SIZE, "sum": v} for (k, s), v in sliding.items()],
        "sessions": sessions,
    }


def _session(key: str, group: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["t"] for r in group]
    return {"key": key, "start": min(times), "end": max(times) + GAP, "count": len(group),
            "sum": sum(r["v"] for r in group), "first": min(times), "last": max(times)}


def without_probes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Committed "tumbling" records without their `probes` field and without the windows only
    probes reached (what `reference` has)."""
    return [{k: v for k, v in r.items() if k != "probes"} for r in records if r.get("count", 1)]


def check_probes(rows: list[dict[str, Any]], tumbling: list[dict[str, Any]], late: list[dict[str, Any]],
                 once: bool = True) -> int:
    """Each probe is counted once (`once=False`: at least once): in its own tumbling window's result
    or in the late output. Returns how many late records there were.

    Raises:
        AssertionError: a probe is missing, repeated, or in a window it does not belong to, or a
            regular row was late.
    """
    probes = {r["id"]: r for r in rows if r["probe"]}
    seen: dict[int, int] = defaultdict(int)
    for result in tumbling:
        for probe_id in result["probes"]:
            probe = probes[probe_id]
            assert (probe["key"], probe["t"] // TUMBLE * TUMBLE) == (result["key"], result["start"]), (probe, result)
            seen[probe_id] += 1
    for record in late:
        assert record["id"] in probes, f"a regular row was late: {record}"
        seen[record["id"]] += 1
    if once:
        assert {i: n for i, n in seen.items() if n != 1} == {}, "probes counted more than once"
    assert set(seen) == set(probes), f"probes lost: {sorted(set(probes) - set(seen))}"
    return len(late)
