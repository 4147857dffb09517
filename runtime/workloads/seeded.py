"""Seeded random jobs for property tests, the VOPR-style runner and benchmarks.

A workload is described by a small frozen `JobSpec` drawn from a seed, so a failing example
is replayed by its seed alone. Every operator of `STAGES` has an output *multiset* that does
not depend on the arrival order of records (counts per key, per-record maps and filters), so a
failure-free run is a reference for any fault schedule: exactly-once means the committed
multiset and the final keyed state are identical to it.

Order-sensitive workloads (`build_stamped_job`, used by `runtime.verify.swarm`) add what the
order-free ones cannot see: every row carries an *origin* (its source split) and a sequence
number per (origin, key) (`stamp_rows`). Records of one key from one origin travel one path of
channels as long as no `rebalance` intervenes, and channels are FIFO across failover and
channel-state replay, so along such a path:

* `SequenceCheck` raises `OrderViolation` when a (origin, key) sequence number does not
  increase (exactly-once modes only: at-least-once may replay what state already saw);
* `AppendToList` keeps every stamp in a list state, `LastValue` the last stamp per origin and
  emits the previous one; compared with a failure-free run per origin (`normalize_state`), they
  catch a reordering even where no check ran;
* `order_violations` checks the committed output itself.

A keyed `count` restamps its output (origin = the stage, sequence = the count), so order holds
again after it; `stages_valid` accepts order-sensitive stages only where order holds.

Event-time stages (`EVENT_TIME_STAGES`) keep both properties: their output multiset and final
state do not depend on when watermarks and timers come, late records included (a result that
does is checked against a plain-Python reference in `runtime.workloads.event_time` instead).
Records are stamped with their (origin, key) position (`stamp_code`), by the source
(`source_watermarks`) or an `assign` stage; `delay` holds each record until the watermark passes
its position (an event-time timer per position), `ptimer` until a processing-time timer 1 ms
later or the end of input, and both emit every record once in (origin, key) order; `side` sends
every third record through a side output and unions it back (order lost, as with a union).
Two-input stages (`TWO_INPUT_STAGES`) keep them too: `coprocess` holds the records of the stream
and of a copy like `delay` in one keyed co-process, `ijoin` interval-joins the stream with a copy
with no record late, so both outputs are independent of timing.
Window stages (`WINDOW_STAGES`) assign timestamps themselves and emit every record once, through
its window or the late-data side output unioned back, so lateness does not change the output:
`window` (tumbling), `slide` (sliding: a record leaves through the last of its windows, the
last to become late), `session` (merging); order is lost, as with a union. `cwindow` counts per
key in a global window with a count trigger and restamps like `count`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any

from operators import (
    AggregateFunction,
    CollectSink,
    CountTrigger,
    EventTimeSessionWindows,
    GlobalWindows,
    KeyedProcessFunction,
    OutputTag,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TimeDomain,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from runtime.workloads.two_input_stages import hold_both, join_with_copy

SINK = "out"


class CountPerKey(KeyedProcessFunction):
    """The page-view count: emits (key, running count) for every record."""

    def __init__(self, key_field: str = "key") -> None:
        self.key_field = key_field

    def process_element(self, record: dict[str, Any], ctx: Any):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        yield {self.key_field: ctx.key, "count": count.value()}


class SumAndCountPerKey(KeyedProcessFunction):
    """Keeps a sum and a list of ids per key; emits only the id, so output is order-free."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        total = ctx.value_state("sum", default=0)
        total.update(total.value() + record["v"])
        seen = ctx.map_state("seen")
        seen.put(str(record["id"]), 1)
        yield {"key": ctx.key, "id": record["id"]}


@dataclass(frozen=True)
class JobSpec:
    seed: int
    num_rows: int
    num_keys: int
    skew: float
    parallelism: int
    splits: int
    stages: tuple[str, ...]
    buffer_size: int
    credits: int
    interval: float

    def rows(self) -> list[dict[str, Any]]:
        return draw_rows(self.seed, self.num_rows, self.num_keys, self.skew)


def draw_rows(seed: int, num_rows: int, num_keys: int, skew: float) -> list[dict[str, Any]]:
    """`num_rows` rows `{"id", "key", "v"}` over `num_keys` keys, Zipf-skewed by `skew`."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** skew for k in range(num_keys)]
    keys = rng.choices([f"k{k}" for k in range(num_keys)], weights=weights, k=num_rows)
    return [{"id": i, "key": keys[i], "v": rng.randrange(0, 10)} for i in range(num_rows)]


STAGES = ("map", "filter", "flat_map", "rebalance", "count", "sum")


def random_spec(seed: int) -> JobSpec:
    rng = random.Random(seed)
    n_stages = rng.randint(1, 3)
    stages = [rng.choice(STAGES) for _ in range(n_stages)]
    if not any(s in ("count", "sum") for s in stages):
        stages.append(rng.choice(("count", "sum")))
    return JobSpec(
        seed=seed,
        num_rows=rng.randint(20, 300),
        num_keys=rng.randint(1, 12),
        skew=rng.choice((0.0, 1.0, 2.0)),
        parallelism=rng.randint(1, 4),
        splits=rng.randint(1, 4),
        stages=tuple(stages),
        buffer_size=rng.choice((1, 4, 16, 64)),
        credits=rng.choice((1, 2, 8)),
        interval=rng.choice((0.0005, 0.002, 0.01)),
    )


def build_job(spec: JobSpec, env: Any) -> None:
    """Add `spec`'s pipeline to `env` (a `StreamEnvironment`), ending in `CollectSink(SINK)`."""
    stream = env.from_collection(spec.rows(), splits=spec.splits)
    for index, stage in enumerate(spec.stages):
        if stage == "map":
            stream = stream.map(lambda r: {**r, "v": r["v"] + 1}, name=f"map{index}")
        elif stage == "filter":
            stream = stream.filter(lambda r: r["id"] % 7 != 3, name=f"filter{index}")
        elif stage == "flat_map":
            stream = stream.flat_map(
                lambda r: [r, {**r, "id": r["id"] + 1_000_000}] if r["id"] % 5 == 0 else [r],
                name=f"flat_map{index}",
            )
        elif stage == "rebalance":
            stream = stream.rebalance()
        elif stage == "count":
            stream = stream.key_by("key").process(CountPerKey(), name=f"count{index}")
            stream = stream.map(lambda r: {**r, "id": r["count"], "v": 1}, name=f"reshape{index}")
        elif stage == "sum":
            stream = stream.key_by("key").process(SumAndCountPerKey(), name=f"sum{index}")
            stream = stream.map(lambda r: {**r, "v": 1}, name=f"reshape{index}")
    stream.sink_to(CollectSink(SINK))


def make_env(spec: JobSpec, *, mode: str = "aligned", attempts: int = 50) -> Any:
    """An environment for `spec` with checkpointing in `mode` (a `checkpoint.modes` name; an
    `aligned-timeout`/`timeout` alignment timeout is 0)."""
    from checkpoint.modes import parse_mode
    from runtime.api.environment import StreamEnvironment
    from vocabulary.options import RestartStrategy

    profile = parse_mode(mode)
    env = StreamEnvironment(parallelism=spec.parallelism, buffer_size=spec.buffer_size,
                            credits=spec.credits, buffer_timeout=0.001)
    if profile.enabled:
        env.enable_checkpointing(
            interval=spec.interval,
            **profile.checkpointing(alignment_timeout=0.0),
            max_concurrent=1,
            tolerable_failures=1_000_000,
        )
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=attempts, delay=0.001))
    build_job(spec, env)
    return env


def multiset(records: list[dict[str, Any]]) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in records)


# --------------------------------------------------------------------------- order-sensitive jobs

#: stages whose output multiset and state do not depend on arrival order
ORDER_FREE_STAGES = ("map", "filter", "flat_map", "rebalance", "count", "sum")
#: stages that are only deterministic where (origin, key) order holds (see `stages_valid`)
ORDER_SENSITIVE_STAGES = ("seqcheck", "list", "last")
#: unions, which lose (origin, key) order like a rebalance: with a mapped copy of the stream
#: (ids + 2,000,000, `sub` odd), or with the very same stream (`m.union(m)`: every record twice)
UNION_STAGES = ("union", "self_union")
#: stages on Arrow batches: `batches` adds one to `v` of a whole buffer at once (`map_batches`;
#: records flow on as columns), `kcount` is the built-in keyed `count()` (vectorised on columns)
#: restamped like `count`. Order-free; `kcount` restores (origin, key) order like `count`
COLUMNAR_STAGES = ("batches", "kcount")
#: event time: `assign` timestamps and watermarks (order-free, records unchanged), `delay` and
#: `ptimer` hold records for an event-time / processing-time timer (order-free, keep order),
#: `side` splits off a side output and unions it back (loses order, like a union)
TIMER_STAGES = ("assign", "delay", "ptimer", "side")
#: windows (see the module docstring), drawn with the event-time stages
WINDOW_STAGES = ("window", "slide", "session", "cwindow")
EVENT_TIME_STAGES = TIMER_STAGES + WINDOW_STAGES
#: two inputs (`runtime.workloads.two_input_stages`): `coprocess` holds the records of the stream
#: and of a copy of it (as `union` makes it) in one keyed co-process until the watermark passes
#: their position; `ijoin` interval-joins the stream with a copy on key and equal position, no
#: record late. Both lose (origin, key) order, like a union
TWO_INPUT_STAGES = ("coprocess", "ijoin")
#: origin of the records a keyed `count` at stage index i emits: RESTAMP_ORIGIN + i
RESTAMP_ORIGIN = 1000
#: `sub` stays below this (one more bit per `flat_map`), so `stamp_code` is unique
_MAX_SUB = 1 << 16


class OrderViolation(RuntimeError):
    """Records of one key from one origin arrived out of order (a lost FIFO guarantee)."""


def stamp_code(record: dict[str, Any]) -> int:
    """The record's position on its (origin, key) path: sequence number, then `sub`."""
    return record["seq"] * _MAX_SUB + record["sub"]


def stamp_rows(rows: list[dict[str, Any]], splits: int) -> list[dict[str, Any]]:
    """`rows` with `origin` (the split `from_collection(rows, splits)` puts the row in), `seq`
    (its number among the rows of its key in that split) and `sub` = 0 (see `flat_map`)."""
    from operators.sources import CollectionSource

    stamped: list[dict[str, Any]] = []
    for split in CollectionSource(rows, splits).splits():
        assert split.end is not None
        seqs: Counter = Counter()
        for row in rows[split.start:split.end]:
            stamped.append({**row, "origin": split.index, "seq": seqs[row["key"]], "sub": 0})
            seqs[row["key"]] += 1
    return stamped


class SequenceCheck(KeyedProcessFunction):
    """Forwards records; raises `OrderViolation` when a stamp does not exceed the last one seen
    for its (origin, key) (when `strict`; at-least-once replays legitimately repeat)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def process_element(self, record: dict[str, Any], ctx: Any):
        seen = ctx.map_state("seen")
        origin, code = str(record["origin"]), stamp_code(record)
        last = seen.get(origin)
        if self.strict and last is not None and code <= last:
            raise OrderViolation(
                f"order violation: key {ctx.key!r} origin {origin}: stamp {divmod(code, _MAX_SUB)} arrived "
                f"after {divmod(last, _MAX_SUB)} (record {record})")
        seen.put(origin, code)
        yield record


class AppendToList(KeyedProcessFunction):
    """Appends every record's stamp to the key's list state `history` (arrival order)."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        ctx.list_state("history").add(f"{record['origin']}/{record['seq']}.{record['sub']}")
        yield record


class LastValue(KeyedProcessFunction):
    """Keeps the last stamp seen per origin of the key; emits the record with `v` = the
    previous one (-1 for the first), so the output depends on arrival order."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        last = ctx.map_state("last")
        origin = str(record["origin"])
        previous = last.get(origin, -1)
        last.put(origin, stamp_code(record))
        yield {**record, "v": previous}


class StampedCount(KeyedProcessFunction):
    """Counts per key and restamps: emits one order-free record per input whose origin is
    this stage and whose sequence number is the count."""

    def __init__(self, origin: int) -> None:
        self.origin = origin

    def process_element(self, record: dict[str, Any], ctx: Any):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        n = count.value()
        yield {"id": n, "key": ctx.key, "v": 1, "origin": self.origin, "seq": n, "sub": 0}


class StampedSum(KeyedProcessFunction):
    """`SumAndCountPerKey` for stamped records: sums `v`, remembers ids, forwards the stamp."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        total = ctx.value_state("sum", default=0)
        total.update(total.value() + record["v"])
        ctx.map_state("seen").put(str(record["id"]), 1)
        yield {**record, "v": 1}


#: the watermark trails the highest (origin, key) position seen by this much: some records are late
WATERMARK_BOUND = 4 * _MAX_SUB
#: an event time past every record's: a timer there fires at the end of input
END_OF_TIME = 1 << 62
SIDE = OutputTag("side")


def stamp_strategy() -> WatermarkStrategy:
    """Timestamps = `stamp_code`, watermarks `WATERMARK_BOUND` behind the highest."""
    return WatermarkStrategy.for_bounded_out_of_orderness(WATERMARK_BOUND).with_timestamp_assigner(_stamp_time)


def _stamp_time(record: dict[str, Any], previous: Any) -> int:
    return stamp_code(record)


class DelayUntilWatermark(KeyedProcessFunction):
    """Holds each record until the watermark passes its `stamp_code` (one event-time timer per
    position), then emits it: every record once, in (origin, key) order, late ones too."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        position = stamp_code(record)
        held = ctx.map_state("held")
        held.put(position, held.get(position, []) + [record])
        ctx.timer_service().register_event_time_timer(position)
        return ()

    def on_timer(self, timestamp: int, ctx: Any):
        held = ctx.map_state("held")
        records = held.get(timestamp)
        held.remove(timestamp)
        yield from records


class DelayForProcessingTime(KeyedProcessFunction):
    """Holds a key's records until a processing-time timer 1 ms after the first of them; an
    event-time timer at `END_OF_TIME` flushes what still waits when the input ends (pending
    processing-time timers are dropped then) and deletes the processing-time timer."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        ctx.list_state("waiting").add(record)
        armed, timers = ctx.value_state("armed"), ctx.timer_service()
        if armed.value() is None:
            at = timers.current_processing_time() + 0.001
            timers.register_processing_time_timer(at)
            timers.register_event_time_timer(END_OF_TIME)
            armed.update(at)
        return ()

    def on_timer(self, timestamp: Any, ctx: Any):
        armed, waiting = ctx.value_state("armed"), ctx.list_state("waiting")
        if ctx.time_domain() is TimeDomain.EVENT_TIME and armed.value() is not None:
            ctx.timer_service().delete_processing_time_timer(armed.value())
        armed.clear()
        records = waiting.get()
        waiting.clear()
        yield from records


class SideSplit(KeyedProcessFunction):
    """Every third record (by id) goes to the side output `SIDE`, the rest to the main output."""

    def process_element(self, record: dict[str, Any], ctx: Any):
        if record["id"] % 3 == 0:
            ctx.output(SIDE, record)
        else:
            yield record


def _duplicate_some(record: dict[str, Any]) -> list[dict[str, Any]]:
    first = {**record, "sub": record["sub"] * 2}
    if record["id"] % 5 != 0:
        return [first]
    return [first, {**record, "id": record["id"] + 1_000_000, "sub": record["sub"] * 2 + 1}]


def _add_one_to_v(batch: Any) -> Any:
    import pyarrow.compute as pc

    return batch.set_column(batch.schema.get_field_index("v"), "v", pc.add(batch.column("v"), 1))


def _restamp_count(origin: int, record: dict[str, Any]) -> dict[str, Any]:
    """A built-in `count()`'s `{"key", "count"}` as `StampedCount` emits it."""
    n = record["count"]
    return {"id": n, "key": record["key"], "v": 1, "origin": origin, "seq": n, "sub": 0}


def _union_copy(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "id": record["id"] + 2_000_000, "sub": record["sub"] * 2 + 1}


def order_holds_after(stages: tuple[str, ...]) -> bool:
    """Whether (origin, key) order is defined after `stages` (a `rebalance` or a union loses it
    until a restamping `count`)."""
    ordered = True
    for stage in stages:
        if stage in ("rebalance", "side", "window", "slide", "session") or stage in UNION_STAGES \
                or stage in TWO_INPUT_STAGES:
            ordered = False
        elif stage in ("count", "kcount", "cwindow"):
            ordered = True
    return ordered


def stages_valid(stages: tuple[str, ...]) -> bool:
    """Known stage names, order-sensitive ones only where order holds, `sub` in range."""
    for index, stage in enumerate(stages):
        if stage not in (ORDER_FREE_STAGES + ORDER_SENSITIVE_STAGES + UNION_STAGES + COLUMNAR_STAGES
                         + EVENT_TIME_STAGES + TWO_INPUT_STAGES):
            return False
        if stage in ORDER_SENSITIVE_STAGES and not order_holds_after(stages[:index]):
            return False
    if stages.count("ijoin") > 1:  # each joins every record with its copies: joins of joins grow fast
        return False
    return 1 << (stages.count("flat_map") + stages.count("union") + stages.count("coprocess")) < _MAX_SUB


def build_stamped_job(env: Any, rows: list[dict[str, Any]], splits: int, stages: tuple[str, ...], *,
                      strict_order: bool, rate: float | None = None, source_watermarks: bool = False) -> None:
    """Add a pipeline of `stages` over `stamp_rows(rows, splits)` to `env`, ending in
    `CollectSink(SINK)`. `strict_order`: `SequenceCheck`s raise (exactly-once modes). `rate`:
    the rows are read at `rate` records/s over all splits (for an executor on a wall clock; each
    split holds the same rows in the same order either way, so the output does not change).
    `source_watermarks`: the source stamps and watermarks every split (`stamp_strategy`).

    Raises:
        ValueError: `stages` is not `stages_valid`.
    """
    if not stages_valid(stages):
        raise ValueError(f"invalid stamped job stages {stages}: unknown stage, or an order-sensitive "
                         f"stage {ORDER_SENSITIVE_STAGES} after a rebalance with no count in between")
    stamped = stamp_rows(rows, splits)
    strategy = stamp_strategy() if source_watermarks else None
    if rate is None:
        stream = env.from_collection(stamped, splits=splits, watermark_strategy=strategy)
    else:
        stream = env.from_source(_paced_collection(stamped, splits, rate), watermark_strategy=strategy)
    for index, stage in enumerate(stages):
        name = f"{stage}{index}"
        if stage == "map":
            stream = stream.map(lambda r: {**r, "v": r["v"] + 1}, name=name)
        elif stage == "filter":
            stream = stream.filter(lambda r: r["id"] % 7 != 3, name=name)
        elif stage == "flat_map":
            stream = stream.flat_map(_duplicate_some, name=name)
        elif stage == "rebalance":
            stream = stream.rebalance()
        elif stage == "union":
            stream = stream.union(stream.map(_union_copy, name=f"copy{index}"), name=name)
        elif stage == "self_union":
            stream = stream.union(stream, name=name)
        elif stage == "batches":
            stream = stream.map_batches(_add_one_to_v, name=name)
        elif stage == "assign":
            stream = stream.assign_timestamps_and_watermarks(stamp_strategy(), name=name)
        elif stage == "side":
            split = stream.key_by("key").process(SideSplit(), name=name)
            stream = split.union(split.get_side_output(SIDE), name=f"unsplit{index}")
        elif stage == "coprocess":
            stream = hold_both(stream, stream.map(_union_copy, name=f"copy{index}"), DelayUntilWatermark(), name)
        elif stage == "ijoin":
            stream = join_with_copy(stream, _stamp_time, index, name)
        elif stage in ("delay", "ptimer"):
            held = DelayUntilWatermark() if stage == "delay" else DelayForProcessingTime()
            stream = stream.key_by("key").process(held, name=name)
        elif stage in WINDOW_STAGES:
            stream = _window_stage(stream, stage, index, name)
        elif stage == "kcount":
            stream = stream.key_by("key").count(name=name).map(partial(_restamp_count, RESTAMP_ORIGIN + index),
                                                              name=f"restamp{index}")
        else:
            stream = stream.key_by("key").process(_keyed_function(stage, index, strict_order), name=name)
    stream.sink_to(CollectSink(SINK))


#: window sizes in `stamp_code` units (a few positions of one (origin, key) path)
WINDOW_SIZE = 2 * _MAX_SUB
LATE = OutputTag("late")


class EmitElements(ProcessWindowFunction):
    """Emits the window's elements; with `slide`, only those whose last window this is."""

    def __init__(self, slide: int | None = None) -> None:
        self.slide = slide

    def process(self, key: Any, context: Any, elements: Any):
        start = context.window().start
        for record in elements:
            code = stamp_code(record)
            if self.slide is None or code - code % self.slide == start:
                yield record


class CountAll(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: dict[str, Any], accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class Restamped(ProcessWindowFunction):
    """The count so far as a restamped record (`StampedCount`'s form)."""

    def __init__(self, origin: int) -> None:
        self.origin = origin

    def process(self, key: Any, context: Any, elements: Any):
        for n in elements:
            yield {"id": n, "key": key, "v": 1, "origin": self.origin, "seq": n, "sub": 0}


def _window_stage(stream: Any, stage: str, index: int, name: str) -> Any:
    keyed = stream.assign_timestamps_and_watermarks(stamp_strategy(), name=f"stamp{index}").key_by("key")
    if stage == "cwindow":
        return keyed.window(GlobalWindows.create()).trigger(CountTrigger.of(3)) \
            .aggregate(CountAll(), Restamped(RESTAMP_ORIGIN + index), name=name)
    assigner = {"window": TumblingEventTimeWindows.of(WINDOW_SIZE),
                "slide": SlidingEventTimeWindows.of(WINDOW_SIZE, WINDOW_SIZE // 2),
                "session": EventTimeSessionWindows.with_gap(WINDOW_SIZE // 2)}[stage]
    windowed = keyed.window(assigner).side_output_late_data(LATE) \
        .process(EmitElements(WINDOW_SIZE // 2 if stage == "slide" else None), name=name)
    return windowed.union(windowed.get_side_output(LATE), name=f"unlate{index}")


def _paced_collection(rows: list[dict[str, Any]], splits: int, rate: float) -> Any:
    """`from_collection(rows, splits)` read at `rate` records/s: a generator whose split j yields
    the rows of the collection's split j in order (a generator interleaves indices over its
    splits, `GeneratorSource`; both give split j the same number of rows). Named "collection"
    like the source it stands for, so the job's vertices are the same."""
    from operators.sources import CollectionSource, GeneratorSource

    by_split = [rows[split.start:split.end] for split in CollectionSource(rows, splits).splits()]
    return GeneratorSource(count=len(rows), rate=rate, fn=partial(_split_row, by_split), splits=splits,
                           name="collection", timestamp_field=None)


def _split_row(by_split: list[list[dict[str, Any]]], index: int) -> dict[str, Any]:
    """Generator record `index`: row `index // n` of split `index % n` (n splits)."""
    split, position = divmod(index, len(by_split))[::-1]
    return by_split[split][position]


def _keyed_function(stage: str, index: int, strict_order: bool) -> KeyedProcessFunction:
    if stage == "count":
        return StampedCount(RESTAMP_ORIGIN + index)
    if stage == "seqcheck":
        return SequenceCheck(strict_order)
    return {"sum": StampedSum, "list": AppendToList, "last": LastValue}[stage]()


def normalize_state(final_state: dict[str, dict[str, dict[Any, Any]]]) -> dict[str, dict[str, dict[Any, Any]]]:
    """`final_state` with every `history` list split per origin (order kept within one): the
    interleaving of different origins depends on the network, the order within one must not."""
    out: dict[str, dict[str, dict[Any, Any]]] = {}
    for vertex, states in final_state.items():
        out[vertex] = {}
        for name, entries in states.items():
            if name == "history":
                entries = {key: _by_origin(items) for key, items in entries.items()}
            out[vertex][name] = entries
    return out


def _by_origin(items: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for item in items:
        grouped.setdefault(item.partition("/")[0], []).append(item)
    return grouped


def order_violations(records: list[dict[str, Any]], limit: int = 3) -> list[str]:
    """Up to `limit` places where committed `records` of one (origin, key) are not in stamp order."""
    last: dict[tuple[int, Any], int] = {}
    problems: list[str] = []
    for position, record in enumerate(records):
        path, code = (record["origin"], record["key"]), stamp_code(record)
        if path in last and code <= last[path]:
            problems.append(f"committed record {position} {record} after stamp {divmod(last[path], _MAX_SUB)}")
            if len(problems) >= limit:
                break
        last[path] = code
    return problems
