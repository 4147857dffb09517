"""Model-based test of the shared-state registry with merged files (hypothesis stateful).

Two tasks take checkpoints (up to 3 concurrent). For each checkpoint a task reuses the segments
of the last completed checkpoint it was *told* about (notifications lag), uploads new segments —
sometimes a copy of a segment a concurrent checkpoint also uploaded (the seed's 4.sst), sometimes
copies of reused segments under new keys (compaction) — into one merged physical file per task
and checkpoint. Checkpoints complete (subsuming older pending ones), abort, get dropped past
`retained`, the coordinator restarts (registry rebuilt from the retained checkpoints), tasks
fail over, and `gc` runs. Invariants after every step: reference counts are never negative, no
file reachable from a retained checkpoint (or needed by a pending one) is deleted, and after
`gc` no unreachable file survives.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from state.merging import pack_segments
from state.registry import SharedStateRegistry
from vocabulary.handles import StateHandle

TASKS = ("t0", "t1")
RETAINED = 2
MAX_CONCURRENT = 3


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.registry = SharedStateRegistry()
        self.disk: set[str] = set()
        self.next_id = 1
        self.counter = 0
        #: checkpoint -> task -> (handles, floor, new files)
        self.pending: dict[int, dict[str, tuple[list[StateHandle], int, list[str]]]] = {}
        self.retained: list[int] = []
        self.completed: dict[int, dict[str, list[StateHandle]]] = {}  # resolved handles per task
        self.notified: dict[str, int | None] = dict.fromkeys(TASKS)
        #: per task, its snapshots not yet confirmed or aborted (a writer's pending snapshots)
        self.snaps: dict[str, set[int]] = {t: set() for t in TASKS}

    # -- helpers -------------------------------------------------------------------------------

    def _upload(self, task: str, checkpoint_id: int, pieces: list[tuple[str, bytes]]) -> tuple[list[StateHandle], list[str]]:
        handles, paths = [], []
        for physical in pack_segments(task, checkpoint_id, pieces, max_file_size=64):
            self.disk.add(physical.name)
            paths.append(physical.name)
            for s in physical.segments:
                handles.append(StateHandle(physical.name, len(physical.data), s.checksum, s.offset, s.length,
                                           key=s.name))
        return handles, paths

    def _collect(self, **kw: bool) -> None:
        for path in self.registry.collect(**kw):
            self.disk.discard(path)

    def _abort(self, checkpoint_id: int) -> None:
        for _, _, paths in self.pending.pop(checkpoint_id).values():
            self.disk.difference_update(paths)  # never registered: the task deletes its uploads
        for snaps in self.snaps.values():
            snaps.discard(checkpoint_id)

    # -- rules ---------------------------------------------------------------------------------

    @precondition(lambda self: len(self.pending) < MAX_CONCURRENT)
    @rule(new=st.lists(st.integers(1, 30), min_size=0, max_size=3), duplicate=st.booleans(),
          compact=st.booleans(), data=st.data())
    def trigger(self, new: list[int], duplicate: bool, compact: bool, data) -> None:
        checkpoint_id = self.next_id
        self.next_id += 1
        per_task = {}
        for task in TASKS:
            base = self.notified[task]
            reused = list(self.completed[base][task]) if base in self.completed else []
            pieces: list[tuple[str, bytes]] = []
            for size in new:
                self.counter += 1
                pieces.append((f"{task}/k{self.counter}", bytes(size)))
            if duplicate:  # re-upload what a concurrent checkpoint of this task uploaded (4.sst)
                others = [h for c, t in self.pending.items() for h in t[task][0]
                          if h.key not in {r.key for r in reused} and h.key not in dict(pieces)]
                if others:
                    h = data.draw(st.sampled_from(sorted(others, key=lambda x: (x.key, x.path))))
                    pieces.append((h.key, bytes(h.length)))
            if compact and reused:
                moved = data.draw(st.sampled_from(reused))
                reused.remove(moved)
                pieces.append((f"{moved.key}#c{checkpoint_id}", bytes(moved.length)))
            handles, paths = self._upload(task, checkpoint_id, pieces)
            # the oldest checkpoint this task may still take as its base: the writer's reuse floor
            candidates = sorted(self.snaps[task]) + ([base] if base is not None else [])
            floor = min(candidates) if candidates else checkpoint_id
            self.snaps[task].add(checkpoint_id)
            per_task[task] = (reused + handles, floor, paths)
        self.pending[checkpoint_id] = per_task

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def complete(self, data) -> None:
        checkpoint_id = data.draw(st.sampled_from(sorted(self.pending)))
        per_task = self.pending.pop(checkpoint_id)
        for older in [c for c in self.pending if c < checkpoint_id]:
            self._abort(older)
        handles = [h for hs, _, _ in per_task.values() for h in hs]
        replaced = self.registry.register_checkpoint(checkpoint_id, handles, [f for _, f, _ in per_task.values()])
        self.completed[checkpoint_id] = {t: [replaced.get(h, h) for h in hs] for t, (hs, _, _) in per_task.items()}
        self.retained.append(checkpoint_id)
        while len(self.retained) > RETAINED:
            self.registry.release_checkpoint(self.retained.pop(0))
        self._collect()

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def abort(self, data) -> None:
        self._abort(data.draw(st.sampled_from(sorted(self.pending))))

    @rule(task=st.sampled_from(TASKS))
    def notify(self, task: str) -> None:
        """The next completion notification reaches the task (in order, possibly long after); like
        the writer, the task adopts as its base only a checkpoint it snapshotted itself."""
        later = sorted(c for c in self.completed if c in self.snaps[task])
        if later:
            self.notified[task] = later[0]
            self.snaps[task] = {c for c in self.snaps[task] if c > later[0]}

    @rule()
    def restart_coordinator(self) -> None:
        for checkpoint_id in sorted(self.pending):
            self._abort(checkpoint_id)
        self.registry = SharedStateRegistry()
        self.registry.rebuild(
            (c, [h for hs in self.completed[c].values() for h in hs], [c]) for c in self.retained)
        self.notified = dict.fromkeys(TASKS)  # tasks redeployed: nothing to reuse
        self.snaps = {t: set() for t in TASKS}
        self._collect()

    @rule()
    def gc(self) -> None:
        """The job stops: pending uploads are abandoned; gc removes what nothing retained needs."""
        for checkpoint_id in sorted(self.pending):
            del self.pending[checkpoint_id]  # a crashed task never deleted them: orphans
        reachable = self._reachable(include_pending=False)
        self.disk &= reachable
        assert self.disk == reachable
        self.notified = dict.fromkeys(TASKS)  # the job restarts from its retained checkpoints
        self.snaps = {t: set() for t in TASKS}

    # -- invariants ----------------------------------------------------------------------------

    def _reachable(self, include_pending: bool) -> set[str]:
        paths = {h.path for c in self.retained for hs in self.completed[c].values() for h in hs}
        if include_pending:
            paths |= {h.path for t in self.pending.values() for hs, _, _ in t.values() for h in hs}
        return paths

    @invariant()
    def nothing_reachable_is_deleted(self) -> None:
        missing = self._reachable(include_pending=True) - self.disk
        assert not missing, f"deleted while still reachable: {sorted(missing)}"

    @invariant()
    def reference_counts_match_the_retained_checkpoints(self) -> None:
        counts = self.registry.reference_counts()
        assert all(n >= 0 for n in counts.values())
        for key, n in counts.items():
            expected = sum(1 for c in self.retained if any(h.key == key for hs in self.completed[c].values() for h in hs))
            assert n == expected, (key, n, expected)


RegistryMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None,
                                             suppress_health_check=list(HealthCheck))
TestRegistryModel = RegistryMachine.TestCase
TestRegistryModel.pytestmark = [pytest.mark.slow]  # a long stateful run
