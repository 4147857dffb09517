"""One job over every event-time operator, with a plain-Python reference.

Two sources: "left" (`window_rows`: event times out of order, every `PROBE_EVERY`-th row a
probe that is usually late) and "right" (the right rows of `two_input_rows`), both stamped per
split `DISORDER` + 5 behind their highest time. Over them, in one job graph:

* the window stages of `runtime.workloads.windows` on "left": tumbling (an aggregate, late probes
  to a side output), sliding (with allowed lateness) and session windows;
* the two-input stages of `runtime.workloads.two_input` on the regular "left" rows and "right": a
  keyed co-process with event-time timers and a side output, and an interval join;
* a window join and a window co-group of the regular "left" rows and "right" on key, in tumbling
  windows of `TUMBLE`: sinks "window-pairs" and "window-groups".

No regular row is ever late, so `reference` is exact for everything but the probes, which
`check_probes` accounts for. `check` compares a run's committed output with the reference:
exactly equal, or, under at-least-once, nothing missing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from operators import CoGroupFunction, CollectSink, JoinFunction, TumblingEventTimeWindows
from runtime.checker.output_invariants import record_key
from runtime.workloads import two_input, windows
from runtime.workloads.event_time import strategy
from runtime.workloads.windows import TUMBLE, add_window_stages, check_probes, window_rows, without_probes

SINKS = (*windows.SINKS, *two_input.SINKS, "window-pairs", "window-groups")
#: per sink, the fields naming a result (the others count or sum records: at-least-once may add to them)
IDENTITY = {"tumbling": ("key", "start", "end"), "sliding": ("key", "start", "end"),
            "sessions": ("key", "start", "end"), "balances": ("key", "end"), "window-groups": ("key", "start")}

__all__ = ["SINKS", "build_combined_job", "check", "combined_rows", "reference"]


def combined_rows(count: int, keys: int = 5) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`count` "left" rows (probes among them) and `count` "right" rows."""
    return window_rows(count, keys), two_input.two_input_rows(count, keys)[1]


class WindowPair(JoinFunction):
    def join(self, first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
        return {"key": first["key"], "l": first["id"], "r": second["id"]}


class WindowGroup(CoGroupFunction):
    def co_group(self, first: list[dict[str, Any]], second: list[dict[str, Any]]):
        rows = [*first, *second]
        yield {"key": rows[0]["key"], "start": min(r["t"] for r in rows) // TUMBLE * TUMBLE,
               "left": len(first), "right": len(second), "v": sum(r["v"] for r in first),
               "w": sum(r["w"] for r in second)}


def build_combined_job(env: Any, left_rows: list[dict[str, Any]], right_rows: list[dict[str, Any]],
                       splits: int) -> None:
    """Add the job to `env`: the sinks of `SINKS`."""
    left = env.from_collection(left_rows, splits=splits, name="left", watermark_strategy=strategy())
    right = env.from_collection(right_rows, splits=splits, name="right", watermark_strategy=strategy())
    regular = add_window_stages(left)
    two_input.add_two_input_stages(regular, right)
    regular.join(right).where("key").equal_to("key").window(TumblingEventTimeWindows.of(TUMBLE)) \
        .apply(WindowPair(), name="window-pair").sink_to(CollectSink("window-pairs"))
    regular.co_group(right).where("key").equal_to("key").window(TumblingEventTimeWindows.of(TUMBLE)) \
        .apply(WindowGroup(), name="window-group").sink_to(CollectSink("window-groups"))


def reference(left_rows: list[dict[str, Any]], right_rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What the job commits for the regular rows ("tumbling" without its `probes` field; "late"
    is left to `check_probes`)."""
    regular = [r for r in left_rows if not r["probe"]]
    out = {**windows.reference(left_rows), **two_input.reference(regular, right_rows)}
    buckets: dict[tuple[str, int], tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in regular:
        buckets[(row["key"], row["t"] // TUMBLE * TUMBLE)][0].append(row)
    for row in right_rows:
        buckets[(row["key"], row["t"] // TUMBLE * TUMBLE)][1].append(row)
    out["window-pairs"] = [{"key": key, "l": a["id"], "r": b["id"]}
                           for (key, _), (lefts, rights) in buckets.items() for a in lefts for b in rights]
    out["window-groups"] = [{"key": key, "start": start, "left": len(lefts), "right": len(rights),
                             "v": sum(r["v"] for r in lefts), "w": sum(r["w"] for r in rights)}
                            for (key, start), (lefts, rights) in buckets.items()]
    return out


def check(result: Any, left_rows: list[dict[str, Any]], right_rows: list[dict[str, Any]], *,
          exactly_once: bool = True) -> None:
    """`result` committed the reference's output: every sink equal as a multiset and every probe
    once in its window or the late output (`exactly_once`), else every reference record present
    or, for a windowed aggregate, a record of the same window whose counts and sums are as large,
    every probe at least once, and nothing the reference lacks (no record, window, or probe in
    another window).

    Raises:
        AssertionError: naming the sink and what is missing or extra.
    """
    for sink, expected in reference(left_rows, right_rows).items():
        got = result.output(sink)
        if sink == "tumbling":
            got = without_probes(got)
        if exactly_once:
            have, want = Counter(map(record_key, got)), Counter(map(record_key, expected))
            assert have == want, f"{sink}: missing {list((want - have).elements())[:5]}, " \
                                 f"extra {list((have - want).elements())[:5]}"
        else:
            _nothing_missing(sink, got, expected)
    check_probes(left_rows, result.output("tumbling"), result.output("late"), once=exactly_once)


def _nothing_missing(sink: str, got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Every record of `expected` in `got` (a windowed aggregate's: a record of its window with counts
    and sums as large), and nothing in `got` the reference lacks (an aggregate: no window it lacks)."""
    fields = IDENTITY.get(sink)
    if fields is None:
        have, want = {record_key(r) for r in got}, {record_key(r) for r in expected}
        assert not want - have, f"{sink}: missing {sorted(want - have)[:5]}"
        assert not have - want, f"{sink}: not in the reference {sorted(have - want)[:5]}"
        return
    found: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for record in got:
        found[tuple(record[f] for f in fields)].append(record)
    for want in expected:
        counted = [f for f in want if f not in fields]
        assert any(all(r[f] >= want[f] for f in counted) for r in found[tuple(want[f] for f in fields)]), \
            f"{sink}: missing {want}"
    extra = set(found) - {tuple(r[f] for f in fields) for r in expected}
    assert not extra, f"{sink}: windows not in the reference {sorted(extra)[:5]}"
