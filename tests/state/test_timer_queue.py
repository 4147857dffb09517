"""`TimerQueue`: timers as keyed state — against a reference model, through a snapshot, restore
and rescaling by key group (incremental and merged snapshots: `tests/sim/test_event_time.py`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state import (
    KeyedStateBackend,
    key_group_for,
    key_group_range_for_subtask,
    state_backend_for,
    subtask_for_key_group,
)
from state.timer_queue import TimerQueue, timer_state_name

MAX_P = 16
NAME = timer_state_name("event", "user-timers")


def backend_for(parallelism: int = 1, subtask: int = 0) -> KeyedStateBackend:
    return KeyedStateBackend("op", key_group_range_for_subtask(MAX_P, parallelism, subtask), MAX_P)


def test_a_timer_is_registered_once_per_key_namespace_and_time():
    backend = backend_for()
    queue = TimerQueue(backend, NAME)
    backend.set_current_key("a")
    assert queue.add(10) and not queue.add(10)
    assert queue.add(10, namespace=(0, 10))  # another namespace: another timer
    backend.set_current_key("b")
    assert queue.add(10)
    assert len(queue) == 3
    assert backend.dump()[NAME] == {"a": {(10, None): None, (10, (0, 10)): None}, "b": {(10, None): None}}


def test_poll_hands_out_due_timers_earliest_first_with_their_key_current():
    backend = backend_for()
    queue = TimerQueue(backend, NAME)
    for key, t in [("a", 30), ("b", 10), ("c", 20), ("a", 5)]:
        backend.set_current_key(key)
        queue.add(t)
    fired = []
    while (timer := queue.poll(20)) is not None:
        fired.append(timer)
        assert backend.current_key == timer[1]
    assert fired == [(5, "a", None), (10, "b", None), (20, "c", None)]
    assert queue.peek() == 30 and len(queue) == 1


def test_deleted_timers_never_fire_and_leftovers_are_compacted():
    backend = backend_for()
    queue = TimerQueue(backend, NAME)
    backend.set_current_key("k")
    for t in range(500):
        queue.add(t)
    for t in range(0, 500, 2):
        queue.remove(t)
    assert len(queue) == 250
    assert len(queue._heap) <= 2 * len(queue) + 64
    fired = [timer[0] for timer in iter(lambda: queue.poll(1_000), None)]
    assert fired == list(range(1, 500, 2))


_OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 9), st.integers(0, 30)),
    st.tuples(st.just("remove"), st.integers(0, 9), st.integers(0, 30)),
    st.tuples(st.just("poll"), st.just(0), st.integers(0, 30)),
), max_size=80)


@pytest.mark.slow
@settings(max_examples=200)
@given(ops=_OPS)
def test_queue_agrees_with_a_set_of_timers(ops):
    backend = backend_for()
    queue = TimerQueue(backend, NAME)
    model: set[tuple[int, int]] = set()
    for op, key, t in ops:
        if op == "add":
            backend.set_current_key(key)
            assert queue.add(t) == ((key, t) not in model)
            model.add((key, t))
        elif op == "remove":
            backend.set_current_key(key)
            assert queue.remove(t) == ((key, t) in model)
            model.discard((key, t))
        else:
            fired = [timer for timer in iter(lambda t=t: queue.poll(t), None)]
            due = {(k, ts) for k, ts in model if ts <= t}
            assert [ts for ts, _, _ in fired] == sorted(ts for _, ts in due)
            assert {(k, ts) for ts, k, _ in fired} == due
            model -= due
        assert len(queue) == len(model)
    assert {(k, ts) for ts, k, _ in queue.timers()} == model


def _pending(blobs: list, new_parallelism: int) -> list[set]:
    backend = state_backend_for("memory")
    out = []
    for subtask in range(new_parallelism):
        restored = backend.restore_keyed_backend(
            "op", key_group_range_for_subtask(MAX_P, new_parallelism, subtask), MAX_P, blobs)
        queue = TimerQueue(restored, NAME)
        out.append({(k, ts) for ts, k, _ in queue.timers()})
        for key, _ in out[-1]:
            assert subtask_for_key_group(MAX_P, new_parallelism, key_group_for(key, MAX_P)) == subtask
    return out


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, old=st.integers(1, 3), new=st.integers(1, 3))
def test_timers_survive_snapshot_restore_and_rescaling_by_key_group(ops, old, new):
    backends = [backend_for(old, s) for s in range(old)]
    queues = [TimerQueue(b, NAME) for b in backends]
    model: set[tuple[int, int]] = set()
    for op, key, t in ops:
        owner = subtask_for_key_group(MAX_P, old, key_group_for(key, MAX_P))
        if op == "add":
            backends[owner].set_current_key(key)
            queues[owner].add(t)
            model.add((key, t))
        elif op == "remove":  # a deleted timer stays deleted after the restore
            backends[owner].set_current_key(key)
            queues[owner].remove(t)
            model.discard((key, t))
        else:
            for queue in queues:
                while queue.poll(t) is not None:
                    pass
            model = {(k, ts) for k, ts in model if ts > t}
    blobs = [b.snapshot(1).to_bytes() for b in backends]
    pending = _pending(blobs, new)
    assert set().union(*pending) == model
    assert sum(len(p) for p in pending) == len(model)
