"""Two-input operators on the simulator: a keyed co-process with event-time timers and an interval
join commit exactly the output of a plain-Python reference (`runtime.workloads.two_input`) with
crashes, aligned, unaligned and with an alignment timeout; at-least-once loses nothing; a restore
at another parallelism, with every state backend, brings back the join's buffers and the pending
timers of both operators."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from sim_jobs import RESCALES

from checkpoint.io.tools import load_checkpoint, open_checkpoints, pending_timers, read_checkpoint
from checkpoint.storage.keyed_files import read_keyed_snapshots
from operators import CollectSink, KeyedCoProcessFunction
from operators.interval_join import LEFT_BUFFER, RIGHT_BUFFER
from runtime import FaultPlan, JobFailedError, RestartStrategy, StreamEnvironment, TaskCrash
from runtime.checker.invariants import InvariantChecker
from runtime.checker.output_invariants import record_key
from runtime.workloads.two_input import SINKS, build_two_input_job, reference, two_input_rows
from state.serialization import KeyedStateSnapshot, keyed_snapshot_from_bytes

LEFT_ROWS, RIGHT_ROWS = two_input_rows(400)
REFERENCE = reference(LEFT_ROWS, RIGHT_ROWS)
EXPECTED = {sink: Counter(map(record_key, records)) for sink, records in REFERENCE.items()}


def multisets(result: Any) -> dict[str, Counter]:
    return {sink: Counter(map(record_key, result.output(sink))) for sink in SINKS}


def two_input_env(mode: str = "aligned", parallelism: int = 2, storage: str | None = None, restarts: bool = True,
                  **options: Any) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002, mode=mode, tolerable_failures=1000, storage=storage,
                             alignment_timeout=0.0005 if mode == "aligned-timeout" else None, **options)
    env.set_auto_watermark_interval(0.001)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001) if restarts
                             else RestartStrategy.no_restart())
    build_two_input_job(env, LEFT_ROWS, RIGHT_ROWS, splits=3)
    return env


def test_the_reference_has_something_to_join():
    assert len(REFERENCE["joined"]) > len(LEFT_ROWS) // 2
    assert len(REFERENCE["balances"]) > 50 and REFERENCE["alerts"]
    assert any(r["left"] and r["right"] for r in REFERENCE["balances"])


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "aligned-timeout"])
@pytest.mark.parametrize("seed", [4, 9])
def test_co_process_and_interval_join_commit_exactly_the_reference(mode, seed):
    checker = InvariantChecker(reference=REFERENCE)
    result = two_input_env(mode).execute("two", executor="sim", seed=seed,
                                         faults=FaultPlan.random(seed=seed, crashes=2), invariants=checker)
    assert multisets(result) == EXPECTED
    assert result.failures, "the plan's crashes struck"
    assert checker.checks["timer-fires-once"] > 0 and checker.checks["watermark-monotonic"] > 0
    if mode != "aligned":  # in-flight data of the two-input tasks was persisted as channel state
        assert any(c.persisted_bytes for c in result.checkpoints if c.completed)


def test_at_least_once_loses_nothing():
    result = two_input_env("at-least-once").execute("two", executor="sim", seed=7,
                                                    faults=FaultPlan.random(seed=7, crashes=2))
    assert result.failures
    for sink in ("joined", "alerts"):
        assert set(EXPECTED[sink]) <= set(map(record_key, result.output(sink))), sink
    # a replayed record counts again in its bucket's sums: each bucket fires, with at least its sums
    sums: dict[tuple[str, int], tuple[int, int]] = {}
    for r in result.output("balances"):
        before = sums.get((r["key"], r["end"]), (0, 0))
        sums[(r["key"], r["end"])] = (max(before[0], r["left"]), max(before[1], r["right"]))
    for r in REFERENCE["balances"]:
        got = sums[(r["key"], r["end"])]
        assert got[0] >= r["left"] and got[1] >= r["right"], r


def _buffered(storage: str, checkpoint_id: int) -> int:
    """Records in the interval join's buffers in checkpoint `checkpoint_id`."""
    store = open_checkpoints(storage)
    completed = read_checkpoint(store, "two", checkpoint_id, verify_files=False)
    found = 0
    for ack in completed.acks.values():
        for snapshot in read_keyed_snapshots(store, ack.handles.get("keyed", ())):
            if not isinstance(snapshot, KeyedStateSnapshot):
                snapshot = keyed_snapshot_from_bytes(snapshot)
            for name in (LEFT_BUFFER, RIGHT_BUFFER):
                for group in snapshot.groups.get(name, {}).values():
                    found += sum(len(records) for buckets in group.values() for records in buckets.values())
    return found


@pytest.mark.parametrize(("backend", "merging", "mode", "parallelism"), RESCALES)
def test_restore_with_another_parallelism_keeps_buffers_and_pending_timers(tmp_path, backend, merging, mode,
                                                                           parallelism):
    storage = str(tmp_path / "ckpt")
    options = {"state_backend": backend, "file_merging": merging}
    crash = FaultPlan.of(TaskCrash(task="pair[0]", after_records=250))
    with pytest.raises(JobFailedError):
        two_input_env(mode, storage=storage, restarts=False, **options).execute("two", executor="sim", seed=4,
                                                                                faults=crash)
    checkpoint, _ = load_checkpoint(storage)  # what restore_from starts from
    timers = pending_timers(open_checkpoints(storage), "two", checkpoint.checkpoint_id)
    services = {name for counts in timers.values() for name, n in counts.items() if n}
    assert {"_timer_state/event_user-timers", "_timer_state/event_interval-join-left",
            "_timer_state/event_interval-join-right"} <= services, services
    assert _buffered(storage, checkpoint.checkpoint_id) > 0, "the checkpoint holds buffered join records"
    restored = two_input_env(mode, parallelism=parallelism, storage=storage, **options).restore_from(storage)
    result = restored.execute("two", executor="sim", seed=4, invariants=True)
    assert multisets(result) == EXPECTED  # committed by both executions, each record once


class Sides(KeyedCoProcessFunction):
    def process_element1(self, record, ctx):
        yield {"i": record["i"], "input": 1}

    def process_element2(self, record, ctx):
        yield {"i": record["i"], "input": 2}


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_stream_connected_with_itself_reaches_each_input_once(mode):
    """Two edges between the same two vertices, one per input: every record reaches both inputs,
    each once, through crashes (their channels are told apart by their input index)."""
    env = StreamEnvironment(parallelism=2, buffer_size=4)
    env.enable_checkpointing(interval=0.002, mode=mode)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001))
    stream = env.from_collection([{"k": i % 5, "i": i} for i in range(300)], splits=3)
    stream.connect(stream).key_by("k", "k").process(Sides(), name="self").sink_to(CollectSink("out"))
    result = env.execute("self", executor="sim", seed=3, faults=FaultPlan.random(seed=3, crashes=2), invariants=True)
    assert result.failures
    assert Counter((r["i"], r["input"]) for r in result.output("out")) == Counter(
        (i, side) for i in range(300) for side in (1, 2))
