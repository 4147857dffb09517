"""Window joins and co-groups (`a.join(b).where(..).equal_to(..).window(..).apply(fn)`) commit
exactly the pairs and groups of a plain-Python reference, through crashes, in every mode."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from sim_jobs import event_time_env

from operators import (
    CoGroupFunction,
    CollectSink,
    EventTimeSessionWindows,
    JoinFunction,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from runtime import FaultPlan
from runtime.checker.output_invariants import record_key
from runtime.core.graph import JobGraphError

SIZE = 100
ORDERS = [{"oid": i, "user": f"u{i % 7}", "amount": i % 13, "t": 7 * i + (i * 5) % 11} for i in range(300)]
CLICKS = [{"cid": i, "user": f"u{i % 5}", "page": i % 4, "t": 5 * i + (i * 3) % 11} for i in range(400)]


def _strategy() -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(20).with_timestamp_assigner(lambda r, previous: r["t"])


class Pair(JoinFunction):
    def join(self, first, second):
        return {"user": first["user"], "oid": first["oid"], "cid": second["cid"]}


class Totals(CoGroupFunction):
    def co_group(self, first, second):
        users = {r["user"] for r in first} | {r["user"] for r in second}
        yield {"user": users.pop(), "orders": len(first), "amount": sum(r["amount"] for r in first),
               "clicks": len(second)}


def build(env) -> None:
    orders = env.from_collection(ORDERS, splits=2, watermark_strategy=_strategy())
    clicks = env.from_collection(CLICKS, splits=3, watermark_strategy=_strategy())
    orders.join(clicks).where("user").equal_to(lambda r: r["user"]).window(TumblingEventTimeWindows.of(SIZE)) \
        .apply(Pair(), name="pairs").sink_to(CollectSink("pairs"))
    orders.co_group(clicks).where("user").equal_to("user").window(TumblingEventTimeWindows.of(SIZE)) \
        .apply(Totals(), name="totals").sink_to(CollectSink("totals"))
    orders.join(clicks).where("user").equal_to("user").window(EventTimeSessionWindows.with_gap(15)) \
        .apply(lambda a, b: {"oid": a["oid"], "cid": b["cid"]}, name="sessions").sink_to(CollectSink("sessions"))


def reference() -> dict[str, Counter]:
    windows: dict[tuple[str, int], tuple[list, list]] = defaultdict(lambda: ([], []))
    for r in ORDERS:
        windows[(r["user"], r["t"] // SIZE)][0].append(r)
    for r in CLICKS:
        windows[(r["user"], r["t"] // SIZE)][1].append(r)
    pairs = [{"user": u, "oid": o["oid"], "cid": c["cid"]} for (u, _), (os, cs) in windows.items() for o in os for c in cs]
    totals = [{"user": u, "orders": len(os), "amount": sum(o["amount"] for o in os), "clicks": len(cs)}
              for (u, _), (os, cs) in windows.items()]
    sessions = []
    for user in {r["user"] for r in ORDERS + CLICKS}:
        events = sorted([(r["t"], 0, r) for r in ORDERS if r["user"] == user]
                        + [(r["t"], 1, r) for r in CLICKS if r["user"] == user], key=lambda e: e[0])
        group: list = []
        for event in events:
            if group and event[0] > group[-1][0] + 15:
                sessions += _session_pairs(group)
                group = []
            group.append(event)
        sessions += _session_pairs(group)
    return {name: Counter(map(record_key, records)) for name, records in
            (("pairs", pairs), ("totals", totals), ("sessions", sessions))}


def _session_pairs(group: list) -> list[dict]:
    return [{"oid": a["oid"], "cid": b["cid"]} for _, sa, a in group if sa == 0 for _, sb, b in group if sb == 1]


EXPECTED = reference()


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "aligned-timeout"])
def test_window_joins_and_co_groups_commit_exactly_the_reference(mode):
    env = event_time_env(mode)
    build(env)
    result = env.execute("joins", executor="sim", seed=5, faults=FaultPlan.random(seed=5, crashes=2), invariants=True)
    assert result.failures
    for sink, expected in EXPECTED.items():
        assert Counter(map(record_key, result.output(sink))) == expected, sink
    assert sum(EXPECTED["pairs"].values()) > 100 and sum(EXPECTED["sessions"].values()) > 10


def test_window_join_calls_out_of_order_name_the_missing_step():
    env = event_time_env()
    a, b = env.from_collection(ORDERS), env.from_collection(CLICKS)
    with pytest.raises(JobGraphError, match=r"join: call where\(key\) before equal_to"):
        a.join(b).equal_to("user")
    with pytest.raises(JobGraphError, match=r"co_group: call where\(key\).equal_to\(key\) before window"):
        a.co_group(b).where("user").window(TumblingEventTimeWindows.of(10))
    with pytest.raises(JobGraphError, match="join: expected a DataStream"):
        a.join([1, 2])
    with pytest.raises(JobGraphError, match="join apply: expected a JoinFunction"):
        a.join(b).where("user").equal_to("user").window(TumblingEventTimeWindows.of(10)).apply(3)
