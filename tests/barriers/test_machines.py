"""Stateful (model-based) tests: random interleavings through a real gate and handler.

One `GateMachine` drives 1–8 channels with buffers, barriers (per channel in increasing id
order, with skipped ids and channels that skip ids), cancel markers, end-of-partition, polls and
clock advances, and checks after every gate call:

* per channel, the gate hands out exactly what was pushed, in order (barriers the handler took
  on arrival excepted): nothing lost or duplicated, through holding and spilling;
* triggers strictly increase; the trigger/abort/finish sequence equals a small flat reference
  model of the handler's rules (fed the events in the order the handler sees them);
* aligned trigger of X: every channel delivered exactly its buffers before barrier X (or ended);
* unaligned trigger of X (unaligned handler or alignment timeout): at finish, the channel state
  of every channel is exactly its buffers after the trigger moment and before barrier X;
* a blocked channel delivers nothing until its checkpoint triggered or aborted; the tracker and
  the unaligned handler never hold data;
* at the end (every channel ended and drained): the gate is finished, nothing is held, no spill
  is left behind, no checkpoint is pending.

Hypothesis explores short programs well; `test_seeded_random_walks` adds long walks over the same
rules from a fixed seed (a failing walk replays exactly; its index is in the message).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from runtime.core.barriers import (
    MAX_CHECKPOINTS_TO_TRACK,
    BarrierAligner,
    BarrierTracker,
    UnalignedBarrierHandler,
)
from runtime.core.input_gate import DEFAULT_SPILL_BOUND_BYTES, CheckpointedInputGate
from runtime.records.messages import (
    Buffer,
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfPartition,
)
from runtime.records.spilling import FileSpiller, MemorySpiller
from vocabulary.ports import ManualClock, ManualTimers
from vocabulary.reasons import CheckpointFailureReason as R

# ---------------------------------------------------------------------------- reference models


class AlignedModel:
    """The aligner's id rules, flat. `out`: +id trigger, -id abort."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.latest = -1
        self.current: int | None = None
        self.received: set[int] = set()
        self.closed: set[int] = set()
        self.out: list[int] = []
        self.finished: list[int] = []

    def _all_arrived(self, received: set[int]) -> bool:
        return all(c in received or c in self.closed for c in range(self.n))

    def _started(self, x: int) -> None:  # the unaligned model triggers here
        pass

    def _complete(self) -> None:
        if self.current is not None and self._all_arrived(self.received):
            self.out.append(self.current)
            self.current = None

    def barrier(self, c: int, x: int) -> None:
        if x == self.current:
            self.received.add(c)
        elif x > self.latest:
            if self.current is not None:
                self.out.append(-self.current)
            self.current, self.latest, self.received = x, x, {c}
            self._started(x)
        else:
            return
        self._complete()

    def cancel(self, x: int) -> None:
        if self.current is not None and x >= self.current:
            self.out.append(-self.current)
            if x > self.current:
                self.out.append(-x)
            self.current = None
        elif self.current is None and x > self.latest:
            self.out.append(-x)
        else:
            return
        self.latest = max(self.latest, x)

    def eop(self, c: int) -> None:
        self.closed.add(c)
        self._complete()


class UnalignedModel(AlignedModel):
    def _started(self, x: int) -> None:
        self.out.append(x)

    def _complete(self) -> None:
        if self.current is not None and self._all_arrived(self.received):
            self.finished.append(self.current)
            self.current = None


class TrackerModel:
    def __init__(self, n: int) -> None:
        self.n = n
        self.latest = -1
        self.pending: dict[int, set[int]] = {}
        self.closed: set[int] = set()
        self.out: list[int] = []
        self.finished: list[int] = []

    def _drop_older(self, x: int) -> None:
        for older in sorted(p for p in self.pending if p < x):
            del self.pending[older]
            self.out.append(-older)

    def _complete(self) -> None:
        while True:
            done = [x for x in sorted(self.pending) if all(c in self.pending[x] or c in self.closed for c in range(self.n))]
            if not done:
                return
            self._drop_older(done[0])
            del self.pending[done[0]]
            self.out.append(done[0])

    def barrier(self, c: int, x: int) -> None:
        if self.n == 1:
            if x > self.latest:
                self.latest = x
                self.out.append(x)
            return
        if x in self.pending:
            self.pending[x].add(c)
        elif x > self.latest:
            self.latest = x
            self.pending[x] = {c}
            if len(self.pending) > MAX_CHECKPOINTS_TO_TRACK:
                oldest = min(self.pending)
                del self.pending[oldest]
                self.out.append(-oldest)
        self._complete()

    def cancel(self, x: int) -> None:
        self._drop_older(x)
        if x in self.pending:
            del self.pending[x]
            self.out.append(-x)
        elif x > self.latest:
            self.latest = x
            self.out.append(-x)

    def eop(self, c: int) -> None:
        self.closed.add(c)
        self._complete()


# ---------------------------------------------------------------------------- the machine


class _Listener:
    def __init__(self, machine: GateMachine) -> None:
        self.m = machine

    def trigger_checkpoint(self, barrier: CheckpointBarrier, stats: Any) -> None:
        self.m.on_trigger(barrier, stats)

    def abort_checkpoint(self, checkpoint_id: int, reason: R) -> None:
        self.m.on_abort(checkpoint_id, reason)

    def add_input_channel_state(self, checkpoint_id: int, channel: int, buffers: list[Buffer]) -> None:
        assert buffers, "empty channel state reported"
        self.m.channel_state.setdefault(checkpoint_id, {}).setdefault(channel, []).extend(buffers)

    def finish_input_channel_state(self, checkpoint_id: int) -> None:
        self.m.on_finish(checkpoint_id)


def key_of(buffer: Buffer) -> int:
    return buffer.batch.column("k")[0].as_py()


class GateMachine(RuleBasedStateMachine):
    kind = "aligned"  # aligned | unaligned | tracker
    spill_bound = DEFAULT_SPILL_BOUND_BYTES
    file_spiller = False
    mixed_schemas = False
    limits = False  # aligned only: random max_held_bytes and alignment timeout (no model)

    @initialize(n=st.integers(1, 8), limit=st.sampled_from([None, 0, 40, 200]))
    def setup(self, n: int, limit: int | None) -> None:
        self.n = n
        self.clock = ManualClock()
        self.timers = ManualTimers(self.clock)
        listener = _Listener(self)
        kwargs: dict[str, Any] = {"clock": self.clock, "timers": self.timers}
        self.max_held_bytes = limit if self.limits else None
        if self.kind == "aligned":
            if self.limits:
                kwargs |= {"max_held_bytes": self.max_held_bytes, "alignment_timeout": 1.0}
            self.handler = BarrierAligner(n, listener, **kwargs)
        elif self.kind == "unaligned":
            self.handler = UnalignedBarrierHandler(n, listener, **kwargs)
        else:
            self.handler = BarrierTracker(n, listener, **kwargs)
        self.model = None
        if not self.limits:
            self.model = {"aligned": AlignedModel, "unaligned": UnalignedModel, "tracker": TrackerModel}[self.kind](n)
        self.spill_dir = tempfile.mkdtemp(prefix="gate-machine-") if self.file_spiller else None
        self.spiller = FileSpiller(self.spill_dir) if self.spill_dir else MemorySpiller()
        self.gate = CheckpointedInputGate(n, self.handler, spill_bound_bytes=self.spill_bound, spiller=self.spiller)

        self.issued = 0  # highest checkpoint id upstream has started
        self.last_marker = [0] * n  # last barrier/cancel id per channel
        self.ended = [False] * n
        self.closed = [False] * n
        self.num_buffers = [0] * n  # buffers pushed per channel
        self.barrier_pos: list[dict[int, int]] = [{} for _ in range(n)]  # id -> buffers before it
        self.expected: list[list[Any]] = [[] for _ in range(n)]  # what poll must return, in order
        self.delivered: list[list[Any]] = [[] for _ in range(n)]
        self.delivered_buffers = [0] * n
        self.blocked_for: list[int | None] = [None] * n
        self.events: list[int] = []  # +id trigger, -id abort
        self.triggered: list[int] = []
        self.aborted: list[int] = []
        self.unaligned_triggers: dict[int, list[int]] = {}  # id -> delivered_buffers at trigger
        self.channel_state: dict[int, dict[int, list[Buffer]]] = {}
        self.finished: list[int] = []
        self.deferred: list[tuple[str, int, Any]] = []
        self.done = False

    # -- listener callbacks (checked right after the gate call that caused them) ------------

    def on_trigger(self, barrier: CheckpointBarrier, stats: Any) -> None:
        assert not self.triggered or barrier.id > self.triggered[-1], f"trigger {barrier.id} after {self.triggered}"
        self.triggered.append(barrier.id)
        self.events.append(barrier.id)
        if stats.unaligned:
            assert self.kind != "tracker"
            self.unaligned_triggers[barrier.id] = list(self.delivered_buffers)
        else:
            assert self.kind != "unaligned"
            if self.max_held_bytes is not None:
                assert stats.bytes_buffered <= self.max_held_bytes
            self.deferred.append(("aligned" if self.kind == "aligned" else "tracker", barrier.id, list(self.delivered_buffers)))

    def on_abort(self, checkpoint_id: int, reason: R) -> None:
        allowed = {R.SUBSUMED, R.CANCELLED}
        if self.max_held_bytes is not None:
            allowed.add(R.ALIGNMENT_BUFFER_FULL)
        assert reason in allowed, reason
        if checkpoint_id in self.triggered:
            assert checkpoint_id in self.unaligned_triggers, f"aborted aligned checkpoint {checkpoint_id} after its trigger"
        self.aborted.append(checkpoint_id)
        self.events.append(-checkpoint_id)

    def on_finish(self, checkpoint_id: int) -> None:
        assert checkpoint_id in self.unaligned_triggers and checkpoint_id not in self.finished
        self.finished.append(checkpoint_id)
        self.deferred.append(("finish", checkpoint_id, None))

    def _run_deferred(self) -> None:
        deferred, self.deferred = self.deferred, []
        for what, x, snapshot in deferred:
            if what == "finish":
                self._check_channel_state(x)
                continue
            for c in range(self.n):
                if what == "aligned" and x in self.barrier_pos[c]:
                    assert snapshot[c] == self.barrier_pos[c][x], (
                        f"aligned trigger {x}: channel {c} delivered {snapshot[c]} buffers, "
                        f"{self.barrier_pos[c][x]} are before its barrier"
                    )
                elif what == "tracker" and x in self.barrier_pos[c]:
                    assert snapshot[c] >= self.barrier_pos[c][x]
                else:
                    assert self.closed[c], f"trigger {x} while channel {c} neither delivered the barrier nor ended"

    def _check_channel_state(self, x: int) -> None:
        at_trigger = self.unaligned_triggers[x]
        state = self.channel_state.get(x, {})
        for c in range(self.n):
            if x in self.barrier_pos[c]:
                end = self.barrier_pos[c][x]
            else:
                assert self.closed[c], f"finished {x} while channel {c} is open without its barrier"
                end = self.num_buffers[c]
            expected = list(range(at_trigger[c], end))
            assert [key_of(b) for b in state.get(c, [])] == expected, f"checkpoint {x} channel {c} state"

    # -- gate calls ------------------------------------------------------------------------

    def _push(self, c: int, payload: Any) -> None:
        on_arrival = not isinstance(payload, Buffer) and self.handler.handles_on_arrival(payload)
        if not on_arrival:
            self.expected[c].append(self._label(payload))
        self.gate.push(BufferOrEvent(c, payload))
        if on_arrival and self.model is not None:
            self.model.barrier(c, payload.id)
        self._run_deferred()

    @staticmethod
    def _label(payload: Any) -> Any:
        if isinstance(payload, Buffer):
            return ("buf", key_of(payload))
        if isinstance(payload, CheckpointBarrier):
            return ("barrier", payload.id)
        if isinstance(payload, CancelCheckpointMarker):
            return ("cancel", payload.id)
        return ("eop",)

    def _poll(self) -> bool:
        boe = self.gate.poll()
        if boe is None:
            if self.kind != "aligned":
                assert len(self.gate) == 0, "a non-blocking handler left data in the gate"
            self._run_deferred()
            return False
        c, payload = boe.channel, boe.payload
        label = self._label(payload)
        position = len(self.delivered[c])
        assert position < len(self.expected[c]) and self.expected[c][position] == label, (
            f"channel {c}: delivered {label} at position {position}, expected {self.expected[c][position:position + 1]}"
        )
        self.delivered[c].append(label)
        blocked_for = self.blocked_for[c]
        if blocked_for is not None:
            assert blocked_for in self.triggered or blocked_for in self.aborted, (
                f"channel {c} delivered {label} while blocked for checkpoint {blocked_for}"
            )
            self.blocked_for[c] = None
        if isinstance(payload, Buffer):
            self.delivered_buffers[c] += 1
        elif isinstance(payload, CheckpointBarrier):
            if self.handler.is_blocked(c):
                assert self.kind == "aligned"
                self.blocked_for[c] = payload.id
            if self.model is not None:
                self.model.barrier(c, payload.id)
        elif isinstance(payload, CancelCheckpointMarker):
            if self.model is not None:
                self.model.cancel(payload.id)
        else:
            self.closed[c] = True
            if self.model is not None:
                self.model.eop(c)
        self._run_deferred()
        return True

    # -- rules -------------------------------------------------------------------------------

    def _open_channel(self, pick: int) -> int | None:
        open_channels = [c for c in range(self.n) if not self.ended[c]]
        return open_channels[pick % len(open_channels)] if open_channels else None

    @rule(picks=st.lists(st.integers(0, 7), min_size=1, max_size=6), rows=st.integers(1, 3), odd=st.booleans())
    def push_buffers(self, picks: list[int], rows: int, odd: bool) -> None:
        for pick in picks:
            c = self._open_channel(pick)
            if c is None:
                return
            k = self.num_buffers[c]
            self.num_buffers[c] += 1
            records = [{"k": k, "c": c} for _ in range(rows)]
            if self.mixed_schemas and (odd ^ (k % 2 == 0)):
                records = [{"k": k, "text": "x" * k} for _ in range(rows)]
            self._push(c, Buffer.from_records(records))

    @rule(skip=st.sampled_from([0, 0, 0, 1]))
    def upstream_starts_checkpoint(self, skip: int) -> None:
        self.issued += 1 + skip

    @rule(picks=st.lists(st.integers(0, 7), min_size=1, max_size=8), older=st.integers(0, 3), cancel=st.integers(0, 11))
    def push_markers(self, picks: list[int], older: int, cancel: int) -> None:
        """Channels emit a barrier (rarely a cancel marker) for a checkpoint they have not yet:
        usually the newest, sometimes an older one, skipping the ids in between."""
        if all(self.ended[c] or self.last_marker[c] >= self.issued for c in range(self.n)):
            self.issued += 1  # every channel is up to date: upstream starts the next checkpoint
        for pick in picks:
            c = self._open_channel(pick)
            if c is None or self.last_marker[c] >= self.issued:
                continue
            x = max(self.last_marker[c] + 1, self.issued - older) if older < 2 else self.issued
            self.last_marker[c] = x
            if cancel == 0:
                self._push(c, CancelCheckpointMarker(x))
            else:
                self.barrier_pos[c][x] = self.num_buffers[c]
                self._push(c, CheckpointBarrier(x, self.clock.now()))

    @rule(pick=st.integers(0, 7), really=st.integers(0, 3))
    def push_end_of_partition(self, pick: int, really: int) -> None:
        c = self._open_channel(pick)
        if c is None or really:
            return
        self.ended[c] = True
        self._push(c, EndOfPartition())

    @rule(times=st.integers(1, 8))
    def poll(self, times: int) -> None:
        for _ in range(times):
            if not self._poll():
                break

    @invariant()
    def matches_the_model(self) -> None:
        if getattr(self, "model", None) is None:
            return
        assert self.events == self.model.out, f"handler {self.events} != model {self.model.out}"
        assert self.finished == self.model.finished

    # -- the end -------------------------------------------------------------------------------

    def teardown(self) -> None:
        if not hasattr(self, "gate"):
            return
        try:
            if not self.done:
                self.finish()
        finally:
            self.spiller.close()
            if self.spill_dir:
                shutil.rmtree(self.spill_dir, ignore_errors=True)

    def finish(self) -> None:
        self.done = True
        for c in range(self.n):
            if not self.ended[c]:
                self.ended[c] = True
                self._push(c, EndOfPartition())
        while self._poll():
            pass
        assert self.delivered == self.expected
        assert self.gate.is_finished and len(self.gate) == 0
        stats = self.gate.stats()
        assert stats.bytes_held == 0 and stats.items_held == 0
        if self.kind != "aligned":
            assert stats.bytes_held_max == 0
        if self.spill_bound == 1 and stats.bytes_held_max > 0:
            assert stats.num_spills > 0
        assert len(self.spiller) == 0, "spills left behind"
        assert self.handler.stats().pending_checkpoint_id is None
        for x in self.unaligned_triggers:
            assert x in self.finished or x in self.aborted, f"unaligned checkpoint {x} never finished"
        self.matches_the_model()
        if currently_in_test_context():  # what the generator reached: --hypothesis-show-statistics
            self._record_coverage(stats)

    def _record_coverage(self, stats: Any) -> None:
        event(f"channels {'1' if self.n == 1 else '2+'}; triggers {min(len(self.triggered), 3)}+")
        event(f"aborts: {'yes' if self.aborted else 'no'}")
        event(f"held: {'yes' if stats.bytes_held_max else 'no'}; spilled: {'yes' if stats.num_spills else 'no'}")
        event(f"unaligned triggers: {'yes' if self.unaligned_triggers else 'no'}")
        event(f"channel state: {'yes' if any(self.channel_state.values()) else 'no'}")


# ---------------------------------------------------------------------------- the variants

FAST = settings(max_examples=120, stateful_step_count=50, deadline=None)


class AlignedMachine(GateMachine):
    kind = "aligned"


class AlignedMemorySpillMachine(GateMachine):
    kind = "aligned"
    spill_bound = 1


class AlignedFileSpillMachine(GateMachine):
    kind = "aligned"
    spill_bound = 1
    file_spiller = True
    mixed_schemas = True


class AlignedLimitsMachine(GateMachine):
    """max_held_bytes and an alignment timeout: no model, every property still holds."""

    kind = "aligned"
    limits = True
    spill_bound = 100

    @rule(dt=st.sampled_from([0.25, 0.5, 1.0]))
    def advance_time(self, dt: float) -> None:
        self.timers.advance(dt)
        self._run_deferred()


class UnalignedMachine(GateMachine):
    kind = "unaligned"


class TrackerMachine(GateMachine):
    kind = "tracker"


TestAligned = AlignedMachine.TestCase
TestAligned.pytestmark = [pytest.mark.slow]  # a long stateful run
TestAligned.settings = FAST
TestAlignedMemorySpill = AlignedMemorySpillMachine.TestCase
TestAlignedMemorySpill.pytestmark = [pytest.mark.slow]  # a long stateful run
TestAlignedMemorySpill.settings = settings(FAST, max_examples=80)
TestAlignedFileSpill = AlignedFileSpillMachine.TestCase
TestAlignedFileSpill.pytestmark = [pytest.mark.slow]  # a long stateful run
TestAlignedFileSpill.settings = settings(FAST, max_examples=50)
TestAlignedLimits = AlignedLimitsMachine.TestCase
TestAlignedLimits.pytestmark = [pytest.mark.slow]  # a long stateful run
TestAlignedLimits.settings = FAST
TestUnaligned = UnalignedMachine.TestCase
TestUnaligned.pytestmark = [pytest.mark.slow]  # a long stateful run
TestUnaligned.settings = FAST
TestTracker = TrackerMachine.TestCase
TestTracker.pytestmark = [pytest.mark.slow]  # a long stateful run
TestTracker.settings = FAST


WALKERS = [
    AlignedMachine,
    AlignedMemorySpillMachine,
    AlignedFileSpillMachine,
    AlignedLimitsMachine,
    UnalignedMachine,
    TrackerMachine,
]


def random_step(machine: GateMachine, rng: random.Random) -> None:
    choice = rng.randrange(6 if isinstance(machine, AlignedLimitsMachine) else 5)
    if choice == 0:
        machine.push_buffers([rng.randrange(8) for _ in range(rng.randint(1, 6))], rng.randint(1, 3), rng.random() < 0.5)
    elif choice == 1:
        machine.upstream_starts_checkpoint(rng.choice([0, 0, 0, 1]))
    elif choice == 2:
        machine.push_markers([rng.randrange(8) for _ in range(rng.randint(1, 8))], rng.randrange(4), rng.randrange(12))
    elif choice == 3:
        machine.push_end_of_partition(rng.randrange(8), rng.randrange(6))
    elif choice == 4:
        machine.poll(rng.randint(1, 8))
    else:
        machine.advance_time(rng.choice([0.25, 0.5, 1.0]))  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("machine_class", WALKERS, ids=lambda cls: cls.__name__)
def test_seeded_random_walks(machine_class: type[GateMachine]) -> None:
    rng = random.Random(f"barrierflow-{machine_class.__name__}")
    for walk in range(25):
        machine = machine_class()
        machine.setup(n=rng.randint(1, 8), limit=rng.choice([None, 0, 40, 200]))
        try:
            for _ in range(rng.randint(20, 120)):
                random_step(machine, rng)
                machine.matches_the_model()
            machine.finish()
        except AssertionError as exc:
            raise AssertionError(f"{machine_class.__name__} walk {walk}: {exc}") from exc
        finally:
            machine.teardown()
