"""A page-view job whose count tasks see a tenth of the records and whose sources read uneven
splits: tasks that handle fewer records than a failure-free estimate spreading every source
record over their vertex (where a `TaskCrash(at_fraction=f)` is placed), for fault tests on both
executors."""

from __future__ import annotations

from typing import Any

from operators import CollectSink
from runtime.api.environment import StreamEnvironment
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.options import RestartStrategy

#: the count task behind the filter and the source subtask with one of the three splits
COUNT_TASK = "count[0]"
SHORT_SOURCE = "Source: collection[1]"


def filtered_rows(n: int) -> list[dict[str, Any]]:
    return [{"app": f"app{(i * 7919) % 4}", "i": i} for i in range(n)]


def kept(record: dict[str, Any]) -> bool:
    return record["i"] % 10 == 0


def to_app(record: dict[str, Any]) -> dict[str, Any]:
    return {"app": record["app"]}


def filtered_env(rows: list[dict[str, Any]], interval: float = 0.05) -> StreamEnvironment:
    """source (3 splits over 2 subtasks) -> filter (keeps 1 in 10) -> map -> keyBy(app) -> count -> sink "pv"."""
    env = StreamEnvironment(parallelism=2, buffer_size=32, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=interval, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=5, delay=0.01))
    (env.from_collection(rows, splits=3).filter(kept, name="one-in-ten").map(to_app, name="to-app")
        .key_by("app").process(CountPerKey("app"), name="count").sink_to(CollectSink("pv")))
    return env


def filtered_reference(rows: list[dict[str, Any]]) -> Any:
    """The committed output of a correct run, as a multiset."""
    counts: dict[str, int] = {}
    out = []
    for row in filter(kept, rows):
        counts[row["app"]] = counts.get(row["app"], 0) + 1
        out.append({"app": row["app"], "count": counts[row["app"]]})
    return multiset(out)
