"""Windows on the simulator: tumbling, sliding (with allowed lateness) and session windows with
late data to a side output commit exactly the output of a plain-Python reference
(`runtime.workloads.windows`) whatever the faults and checkpointing mode; window state (contents,
merging sets, timers) restores and rescales with every state backend; a fired window stays fired.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from sim_jobs import RESCALES, event_time_env

from checkpoint.io.tools import (
    load_checkpoint,
    open_checkpoints,
    read_checkpoint,
    read_keyed_snapshots,
    resolve_job,
)
from operators import CollectSink, SlidingEventTimeWindows, TumblingEventTimeWindows, WatermarkStrategy
from operators.windows.triggers import EventTimeTrigger, TriggerResult
from operators.windows.vectorised import WindowCountSumOperator
from runtime import FaultPlan, JobFailedError, StreamEnvironment, TaskCrash
from runtime.checker.invariants import InvariantChecker, InvariantViolation
from runtime.checker.output_invariants import record_key
from runtime.workloads.windows import build_windows_job, check_probes, reference, window_rows, without_probes
from state.serialization import KeyedStateSnapshot, keyed_snapshot_from_bytes

ROWS = window_rows(600)
REFERENCE = reference(ROWS)
EXPECTED = {sink: Counter(map(record_key, records)) for sink, records in REFERENCE.items()}


def regular(result: Any) -> dict[str, Counter]:
    return {sink: Counter(map(record_key, without_probes(result.output(sink)))) for sink in EXPECTED}


def windows_env(mode: str = "aligned", parallelism: int = 2, storage: str | None = None, restarts: bool = True,
                **options: Any) -> StreamEnvironment:
    env = event_time_env(mode, parallelism, storage, restarts, **options)
    build_windows_job(env, ROWS, splits=3)
    return env


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "aligned-timeout"])
@pytest.mark.parametrize("seed", [4, 9])
def test_windows_and_late_data_commit_exactly_the_reference(mode, seed):
    checker = InvariantChecker()
    result = windows_env(mode).execute("win", executor="sim", seed=seed,
                                       faults=FaultPlan.random(seed=seed, crashes=2), invariants=checker)
    assert result.failures, "the plan's crashes struck"
    assert regular(result) == EXPECTED
    check_probes(ROWS, result.output("tumbling"), result.output("late"))
    assert checker.checks["window-fires-after-end"] > 0
    # windows fired throughout the run, not only at the end of input
    assert len([t for t in result.committer.transactions("sessions") if not t.endswith("final")]) > 3


def test_at_least_once_loses_nothing():
    result = windows_env("at-least-once").execute("win", executor="sim", seed=3,
                                                   faults=FaultPlan.random(seed=3, crashes=2))
    for sink, expected in REFERENCE.items():  # every window, with every record (some perhaps twice)
        got: dict[tuple, list[dict]] = {}
        for record in without_probes(result.output(sink)):
            got.setdefault((record["key"], record["start"], record["end"]), []).append(record)
        for want in expected:
            found = got.get((want["key"], want["start"], want["end"]), [])
            assert any(all(r[f] >= want[f] for f in ("sum", "count") if f in want) for r in found), (sink, want)
    late = {r["id"] for r in result.output("late")}
    in_windows = {i for r in result.output("tumbling") for i in r["probes"]}
    assert late | in_windows == {r["id"] for r in ROWS if r["probe"]}


def _open_windows(storage: str) -> dict[str, int]:
    """Entries per window state (contents, elements, merging sets) in the checkpoint a restore
    starts from."""
    checkpoint, _ = load_checkpoint(storage)
    store = open_checkpoints(storage)
    completed = read_checkpoint(store, resolve_job(store, None), checkpoint.checkpoint_id, verify_files=False)
    found: Counter = Counter()
    for ack in completed.acks.values():
        for snapshot in read_keyed_snapshots(store, ack.handles.get("keyed", ())):
            if not isinstance(snapshot, KeyedStateSnapshot):
                snapshot = keyed_snapshot_from_bytes(snapshot)
            for name, groups in snapshot.groups.items():
                if name.startswith("window-"):
                    found[name] += sum(len(v) for g in groups.values() for v in g.values())
    return dict(found)


@pytest.mark.parametrize(("backend", "merging", "mode", "parallelism"), RESCALES)
def test_restore_with_another_parallelism_keeps_open_windows(tmp_path, backend, merging, mode, parallelism):
    storage = str(tmp_path / "ckpt")
    options = {"state_backend": backend, "file_merging": merging}
    crash = FaultPlan.of(TaskCrash(task="sessions[0]", after_records=150))
    with pytest.raises(JobFailedError):
        windows_env(mode, storage=storage, restarts=False, **options).execute("win", executor="sim", seed=4,
                                                                             faults=crash)
    held = _open_windows(storage)
    assert held.get("window-contents") and held.get("window-merging") and held.get("window-elements"), held
    restored = windows_env(mode, parallelism=parallelism, storage=storage, **options).restore_from(storage)
    result = restored.execute("win", executor="sim", seed=4, invariants=True)
    assert regular(result) == EXPECTED  # committed by both executions, each window once
    check_probes(ROWS, result.output("tumbling"), result.output("late"))


def test_windowed_count_and_sum_over_arrow_batches_are_exactly_once(monkeypatch):
    vectorised = []
    process_columns = WindowCountSumOperator.process_columns

    def counted(self, batch):
        vectorised.append(batch.num_rows)
        return process_columns(self, batch)

    monkeypatch.setattr(WindowCountSumOperator, "process_columns", counted)
    keys = pa.array([f"k{i}" for i in range(4)])
    env = event_time_env("unaligned")
    stream = env.generate(count=2000, batch_fn=lambda idx: {"key": keys.take(pa.array(idx % 4)), "t": pa.array(idx * 3),
                                                           "v": pa.array(idx % 7)},
                          timestamp_field=None, watermark_strategy=WatermarkStrategy.for_monotonous_timestamps()
                          .with_timestamp_assigner("t"))
    stream.key_by("key").window(TumblingEventTimeWindows.of(100)).count(name="counts").sink_to(CollectSink("counts"))
    stream.key_by("key").window(SlidingEventTimeWindows.of(100, 25)).sum("v", name="sums").sink_to(CollectSink("sums"))
    result = env.execute("columns", executor="sim", seed=3, faults=FaultPlan.random(seed=3, crashes=2),
                         invariants=True)
    assert result.failures and sum(vectorised) > 1000
    counts: Counter = Counter()
    sums: Counter = Counter()
    for i in range(2000):
        key, t = f"k{i % 4}", i * 3
        counts[(key, t // 100 * 100)] += 1
        for start in range(t // 25 * 25, t - 100, -25):
            sums[(key, start)] += i % 7
    assert Counter(map(record_key, result.output("counts"))) == Counter(
        record_key({"key": k, "window_start": s, "window_end": s + 100, "count": n}) for (k, s), n in counts.items())
    assert Counter(map(record_key, result.output("sums"))) == Counter(
        record_key({"key": k, "window_start": s, "window_end": s + 100, "v": n}) for (k, s), n in sums.items())


def test_a_clean_run_checks_the_window_invariants():
    checker = InvariantChecker()
    windows_env().execute("win", executor="sim", seed=1, invariants=checker)
    assert checker.checks["window-fires-after-end"] > 0 and checker.checks["window-record-accounted"] > 0


def _violation() -> InvariantViolation:
    with pytest.raises(InvariantViolation) as info:
        windows_env().execute("win", executor="sim", seed=1, invariants=True)
    return info.value


def test_a_window_firing_before_its_end_is_caught(monkeypatch):
    monkeypatch.setattr(EventTimeTrigger, "on_element", lambda self, timestamp, window, ctx: TriggerResult.FIRE)
    found = _violation()
    assert found.invariant == "window-fires-after-end" and "before its end" in found.detail


def test_a_record_counted_twice_in_one_window_is_caught(monkeypatch):
    assign = TumblingEventTimeWindows.assign_windows
    monkeypatch.setattr(TumblingEventTimeWindows, "assign_windows",
                        lambda self, timestamp, now: assign(self, timestamp, now) * 2)
    found = _violation()
    assert found.invariant == "window-record-accounted" and "added twice" in found.detail
