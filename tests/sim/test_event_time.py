"""Event time on the simulator: event-time timers, deleted timers and side outputs commit exactly
the output of a plain-Python reference (`runtime.workloads.event_time`), whatever the faults and
checkpointing mode; timers are keyed state through restore and rescaling with every state backend;
watermarks become channel state; processing-time timers; idle splits.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from sim_jobs import RESCALES, event_time_env

from checkpoint.io.tools import (
    load_checkpoint,
    open_checkpoints,
    pending_timers,
    read_checkpoint,
    resolve_job,
)
from operators import CollectSink, KeyedProcessFunction, TimeDomain, WatermarkStrategy
from operators.sources import Source, SourceSplit, SplitReader
from runtime import FaultPlan, JobFailedError, RestartStrategy, StreamEnvironment, TaskCrash
from runtime.checker.invariants import InvariantChecker
from runtime.checker.output_invariants import record_key
from runtime.cli import main as cli
from runtime.records.messages import Watermark
from runtime.workloads.event_time import SINKS, build_event_time_job, event_rows, reference
from state.serialization import buffers_from_bytes

ROWS = event_rows(600)
REFERENCE = reference(ROWS)


def multisets(result: Any) -> dict[str, Counter]:
    return {sink: Counter(map(record_key, result.output(sink))) for sink in SINKS}


EXPECTED = {sink: Counter(map(record_key, records)) for sink, records in REFERENCE.items()}


def event_env(mode: str = "aligned", parallelism: int = 2, storage: str | None = None, restarts: bool = True,
              **options: Any) -> StreamEnvironment:
    env = event_time_env(mode, parallelism, storage, restarts, **options)
    build_event_time_job(env, ROWS, splits=3)
    return env


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "aligned-timeout"])
@pytest.mark.parametrize("seed", [4, 7])
def test_timers_and_side_outputs_commit_exactly_the_reference(mode, seed):
    checker = InvariantChecker(reference=REFERENCE)
    result = event_env(mode).execute("et", executor="sim", seed=seed, faults=FaultPlan.random(seed=seed, crashes=2),
                                     invariants=checker)
    assert multisets(result) == EXPECTED
    assert result.failures, "the plan's crashes struck"
    assert checker.checks["timer-fires-once"] > 0 and checker.checks["watermark-monotonic"] > 0
    # timers fired throughout the run, not only at the end of input
    firsts = [txn for txn in result.committer.transactions("totals") if not txn.endswith("final")]
    assert len(firsts) > 3


def test_at_least_once_loses_nothing():
    result = event_env("at-least-once").execute("et", executor="sim", seed=3, faults=FaultPlan.random(seed=3, crashes=2))
    got = {sink: {(r["key"], r.get("end", r.get("id", r.get("probe")))) for r in result.output(sink)} for sink in SINKS}
    for sink, records in REFERENCE.items():
        assert {(r["key"], r.get("end", r.get("id", r.get("probe")))) for r in records} <= got[sink], sink


class CrashAfterFirstTimer(KeyedProcessFunction):
    """Fails once, in `on_timer`, right after the first timer of the run fired: its output and
    the state it cleared exist in no checkpoint yet."""

    crashed = False

    def process_element(self, record, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() // 100 * 100 + 99)
        ctx.list_state("seen").add(record["id"])
        return ()

    def on_timer(self, timestamp, ctx):
        seen = ctx.list_state("seen").get()
        ctx.list_state("seen").clear()
        yield {"key": ctx.key, "end": timestamp, "ids": len(seen)}
        if not CrashAfterFirstTimer.crashed:
            CrashAfterFirstTimer.crashed = True
            raise RuntimeError("crash between a timer's firing and the next checkpoint")


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_crash_right_after_a_timer_fired_neither_loses_nor_repeats_it(mode):
    CrashAfterFirstTimer.crashed = False
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002, mode=mode)
    env.set_auto_watermark_interval(0.001)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=3, delay=0.001))
    env.from_collection(ROWS, splits=2, watermark_strategy=WatermarkStrategy.for_monotonous_timestamps()
                        .with_timestamp_assigner(lambda r, previous: r["id"])) \
        .key_by("key").process(CrashAfterFirstTimer(), name="fire") \
        .sink_to(CollectSink("fired"))
    result = env.execute("crash", executor="sim", seed=5, invariants=True)
    assert CrashAfterFirstTimer.crashed and len(result.failures) == 1
    fired = result.output("fired")
    assert Counter((r["key"], r["end"]) for r in fired).most_common(1)[0][1] == 1
    assert sum(r["ids"] for r in fired) == len(ROWS)


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "merging", "mode", "parallelism"), RESCALES)
def test_restore_with_another_parallelism_keeps_pending_timers(tmp_path, capsys, backend, merging, mode, parallelism):
    storage = str(tmp_path / "ckpt")
    options = {"state_backend": backend, "file_merging": merging}
    crash = FaultPlan.of(TaskCrash(task="buckets[0]", after_records=250))
    with pytest.raises(JobFailedError):
        event_env(mode, storage=storage, restarts=False, **options).execute("et", executor="sim", seed=4, faults=crash)
    checkpoint, _ = load_checkpoint(storage)  # what restore_from starts from
    timers = pending_timers(open_checkpoints(storage), "et", checkpoint.checkpoint_id)
    assert any(n for counts in timers.values() for n in counts.values()), "the checkpoint holds pending timers"
    assert cli(["checkpoints", "show", storage, str(checkpoint.checkpoint_id)]) == 0
    assert "timers pending: event_user-timers=" in capsys.readouterr().out
    restored = event_env(mode, parallelism=parallelism, storage=storage, **options).restore_from(storage)
    result = restored.execute("et", executor="sim", seed=4, invariants=True)
    assert multisets(result) == EXPECTED  # committed by both executions, each record once


def _channel_watermarks(storage: str) -> int:
    """Watermark events in the channel state of every checkpoint under `storage`."""
    store = open_checkpoints(storage)
    job = resolve_job(store, None)
    found = 0
    for checkpoint_id in store.list_checkpoint_ids(job):
        completed = read_checkpoint(store, job, checkpoint_id)
        for ack in completed.acks.values():
            for handle in (*ack.handles.get("input_channels", ()), *ack.handles.get("output_channels", ())):
                for batches in buffers_from_bytes(store.read_task_file(handle)).values():
                    found += sum(1 for b in batches if (b.schema.metadata or {}).get(b"barrierflow.event") == b"watermark")
    return found


def test_watermarks_overtaken_by_unaligned_barriers_are_channel_state_and_replayed(tmp_path):
    storage = str(tmp_path / "ckpt")
    env = event_env("unaligned", storage=storage, retained=50)
    result = env.execute("et", executor="sim", seed=7, faults=FaultPlan.random(seed=7, crashes=2), invariants=True)
    assert multisets(result) == EXPECTED
    assert _channel_watermarks(storage) > 0


class FlushOnTime(KeyedProcessFunction):
    """Each record's id waits in list state for a processing-time timer 1 ms later; an event-time
    timer at the key's last instant flushes what is left when the input ends (pending
    processing-time timers are dropped at the end of input, as in Flink)."""

    def process_element(self, record, ctx):
        ctx.list_state("waiting").add(record["id"])
        timers = ctx.timer_service()
        timers.register_processing_time_timer(timers.current_processing_time() + 0.001)
        timers.register_event_time_timer(10**9)
        return ()

    def on_timer(self, timestamp, ctx):
        waiting = ctx.list_state("waiting")
        ids = waiting.get()
        waiting.clear()
        yield from ({"id": i, "domain": ctx.time_domain().value} for i in ids)


def test_processing_time_timers_fire_exactly_once():
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001))
    env.from_collection(ROWS, splits=2, watermark_strategy=WatermarkStrategy.no_watermarks()
                        .with_timestamp_assigner(lambda r, previous: r["id"])) \
        .key_by("key").process(FlushOnTime(), name="flush").sink_to(CollectSink("ids"))
    result = env.execute("pt", executor="sim", seed=7, faults=FaultPlan.random(seed=7, crashes=2), invariants=True)
    out = result.output("ids")
    assert sorted(r["id"] for r in out) == [r["id"] for r in ROWS]
    assert {r["domain"] for r in out} == {TimeDomain.PROCESSING_TIME.value, TimeDomain.EVENT_TIME.value}


class _LateSplitReader(SplitReader):
    """Split 0: `count` records at once; split 1: one record, then nothing until `resume_at`
    (virtual seconds), then one more, late."""

    def __init__(self, split: SourceSplit, clock: Any, count: int, resume_at: float) -> None:
        self.split, self.clock, self.position = split, clock, 0
        self._rows = [{"key": f"k{i % 3}", "t": 10 * i} for i in range(count)] if split.index == 0 else \
            [{"key": "k9", "t": 5}, {"key": "k1", "t": 10 * count}]
        self._resume_at = resume_at

    def seek(self, position: int) -> None:
        self.position = position

    def read(self, max_records: int) -> list[dict[str, Any]]:
        if self.next_ready_time() is not None:
            return []
        end = 1 if self.split.index == 1 and self.position == 0 else self.position + max_records
        rows = self._rows[self.position:end]
        self.position += len(rows)
        return [dict(r) for r in rows]

    def finished(self) -> bool:
        return self.position >= len(self._rows)

    def next_ready_time(self) -> float | None:
        waiting = self.split.index == 1 and self.position == 1 and self.clock.now() < self._resume_at
        return self._resume_at if waiting else None


class _LateSource(Source):
    name = "late"

    def __init__(self, count: int, resume_at: float) -> None:
        self.count, self.resume_at = count, resume_at

    def splits(self) -> list[SourceSplit]:
        return [SourceSplit("late-0", 0), SourceSplit("late-1", 1)]

    def reader(self, split: SourceSplit, clock: Any) -> SplitReader:
        return _LateSplitReader(split, clock, self.count, self.resume_at)


class FiredAt(KeyedProcessFunction):
    def process_element(self, record, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp())
        return ()

    def on_timer(self, timestamp, ctx):
        yield {"t": timestamp, "at": ctx.now()}


@pytest.mark.slow
@pytest.mark.parametrize("idleness", [None, 0.01])
def test_an_idle_split_does_not_hold_the_watermark_back(idleness):
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, previous: r["t"])
    if idleness is not None:
        strategy = strategy.with_idleness(idleness)
    env = StreamEnvironment(parallelism=2)  # one split per source subtask
    env.enable_checkpointing(interval=0.01)
    env.set_auto_watermark_interval(0.002)
    env.from_source(_LateSource(200, resume_at=1.0), watermark_strategy=strategy) \
        .key_by("key").process(FiredAt(), name="fired").sink_to(CollectSink("fired"))
    result = env.execute("idle", executor="sim", seed=1, invariants=True)
    fired = result.output("fired")
    # every timer fires, the late record's too (registered after event time ended: at once)
    assert sorted(r["t"] for r in fired) == sorted([10 * i for i in range(200)] + [5, 2000])
    held = [r for r in fired if 5 < r["t"] < 1990]  # beyond the silent split's first record
    if idleness is None:  # the silent split holds them back until it reads again
        assert min(r["at"] for r in held) >= 1.0
    else:  # idle after 10 ms: the other split's watermark alone fires them
        assert max(r["at"] for r in held) < 1.0


def test_a_restored_source_never_emits_a_watermark_below_its_checkpointed_one(tmp_path):
    storage = str(tmp_path / "ckpt")
    crash = FaultPlan.of(TaskCrash(task="buckets[0]", after_records=250))
    with pytest.raises(JobFailedError):
        event_env(storage=storage, restarts=False).execute("et", executor="sim", seed=2, faults=crash)
    store = open_checkpoints(storage)
    job = resolve_job(store, None)
    latest = read_checkpoint(store, job, max(store.list_checkpoint_ids(job)))
    from runtime.jobmaster.restore.state_assignment import _read_operator_states

    offsets = [e for ack in latest.acks.values() for states in _read_operator_states(store, ack).values()
               for e in states.get("offsets", ())]
    assert offsets and all("watermark" in e for e in offsets)
    assert any(e["watermark"] is not None for e in offsets)
    checked = {e["split"]: e["watermark"] for e in offsets}
    sent: list[tuple[str, float]] = []

    class Spy(InvariantChecker):
        def on_send(self, sender, out_index, payload):
            if isinstance(payload, Watermark) and sender.vertex.startswith("Source"):
                sent.append((str(sender), payload.timestamp))
            super().on_send(sender, out_index, payload)

    restored = event_env(storage=storage).restore_from(storage).execute("et", executor="sim", seed=2, invariants=Spy())
    assert multisets(restored) == EXPECTED
    for subtask in range(2):  # split i is read by source subtask i % 2, before and after the restore
        task = f"Source: collection[{subtask}]"
        own = [w for split, w in checked.items() if int(split.rsplit("-", 1)[1]) % 2 == subtask]
        emitted = [t for sender, t in sent if sender == task]
        assert emitted and emitted[-1] == math.inf
        if None not in own:
            assert min(emitted) >= min(own), (task, emitted[:3], own)


class LastCountPerBucket(KeyedProcessFunction):
    """The highest running count of each key within each bucket of 100, when the bucket ends."""

    def process_element(self, record, ctx):
        end = ctx.timestamp() // 100 * 100 + 99
        counts = ctx.map_state("counts")
        counts.put(end, max(counts.get(end, 0), record["count"]))
        ctx.timer_service().register_event_time_timer(end)
        return ()

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.key, "end": timestamp, "count": ctx.map_state("counts").get(timestamp)}
        ctx.map_state("counts").remove(timestamp)


def test_timestamps_travel_in_arrow_batches_through_vectorised_operators():
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = pa.array([f"k{i}" for i in range(4)])
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002)
    env.set_auto_watermark_interval(0.001)
    env.generate(count=2000, batch_fn=lambda idx: {"key": keys.take(pa.array(idx % 4)), "t": pa.array(idx * 10)},
                 timestamp_field=None, watermark_strategy=WatermarkStrategy.for_monotonous_timestamps()
                 .with_timestamp_assigner("t")).set_parallelism(1) \
        .map_batches(lambda b: b.set_column(1, "t", pc.add(b.column("t"), 0)), name="same-rows") \
        .key_by("key").count(name="count").set_parallelism(1) \
        .key_by("key").process(LastCountPerBucket(), name="last").sink_to(CollectSink("last"))
    result = env.execute("columns", executor="sim", seed=3, faults=FaultPlan.random(seed=3, crashes=1),
                         invariants=True)
    expected = Counter()
    for key in range(4):  # ids key, key + 4, ... : the n-th has t = 10 * (key + 4 n) and count n + 1
        for n in range(500):
            expected[(f"k{key}", 10 * (key + 4 * n) // 100 * 100 + 99)] = n + 1
    got = {(r["key"], r["end"]): r["count"] for r in result.output("last")}
    assert got == dict(expected) and len(result.output("last")) == len(expected)


def test_every_event_time_timer_fires_before_the_final_checkpoint(tmp_path):
    storage = str(tmp_path / "ckpt")
    result = event_env(storage=storage, retained=100).execute("et", executor="sim", seed=1)
    assert multisets(result) == EXPECTED
    store = open_checkpoints(storage)
    final = max(store.list_checkpoint_ids("et"))
    assert read_checkpoint(store, "et", final).properties.get("final")
    timers = pending_timers(store, "et", final)
    assert not any(n for counts in timers.values() for name, n in counts.items() if "event" in name)
    earlier = [pending_timers(store, "et", c) for c in store.list_checkpoint_ids("et")[:-1]]
    assert any(any(counts.values()) for t in earlier for counts in t.values())
