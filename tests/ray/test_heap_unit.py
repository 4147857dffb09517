"""The actor processes' garbage collector (`runtime.ray.heap`), without Ray: freezing the start-up
heap empties the generation a full collection scans, and the timer counts only full collections."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runtime.ray.heap import FullCollectionTimer

#: run in a fresh interpreter: freezing is process-wide and would change this test process's collector
FREEZE = """
import gc, json
import numpy, pyarrow  # an actor's imports
from runtime.ray.heap import freeze_startup_heap, gc_pauses
gc.collect()
before = len(gc.get_objects(generation=2))
freeze_startup_heap()
after = len(gc.get_objects(generation=2))
gc.collect(generation=1)
gc.collect()
p = gc_pauses()
print(json.dumps({"before": before, "after": after, "frozen": p.frozen, "full": p.full_collections,
                  "longest": p.longest, "total": p.total}))
"""


@pytest.mark.slow
def test_freezing_the_startup_heap_leaves_full_collections_almost_nothing_to_scan() -> None:
    out = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, timeout=120, check=True)
    heap = json.loads(out.stdout)
    assert heap["before"] > 20_000, heap  # the imported modules, scanned by every full collection
    assert heap["after"] < 100 and heap["frozen"] > 0.9 * heap["before"], heap
    # the explicit full collection after the freeze is timed; the generation-1 one is not
    assert heap["full"] == 1 and 0 < heap["longest"] == heap["total"], heap


#: a worker that hosts another job freezes again: the earlier job's frozen cycles are collected
#: first, and the full collections are counted from there
REFREEZE = """
import gc, json
from runtime.ray.heap import freeze_startup_heap, gc_pauses

class Node:
    pass

freeze_startup_heap()
job = []  # the earlier job's objects, in reference cycles, alive when a freeze froze them
for _ in range(1000):
    a, b = Node(), Node()
    a.other, b.other = b, a
    job.append(a)
freeze_startup_heap()
del job, a, b  # the job ended: garbage, but frozen, so no collection frees the cycles
gc.collect()
frozen_with_cycles = gc.get_freeze_count()
full_before = gc_pauses().full_collections
freeze_startup_heap()
print(json.dumps({"with": frozen_with_cycles, "after": gc.get_freeze_count(), "full_before": full_before,
                  "full_after": gc_pauses().full_collections}))
"""


@pytest.mark.slow
def test_freezing_again_frees_the_frozen_cycles_and_counts_anew() -> None:
    out = subprocess.run([sys.executable, "-c", REFREEZE], capture_output=True, text=True, timeout=120, check=True)
    heap = json.loads(out.stdout)
    assert heap["with"] - heap["after"] >= 1900, heap  # the 2,000 nodes in cycles, collected at last
    assert heap["full_before"] >= 1 and heap["full_after"] == 0, heap


def test_the_timer_counts_full_collections_only() -> None:
    timer = FullCollectionTimer()
    for generation in (0, 1, 2, 2):
        timer("start", {"generation": generation})
        timer("stop", {"generation": generation})
    timer("stop", {"generation": 2})  # a stop without its start (the timer came mid-collection)
    pauses = timer.pauses(frozen=7)
    assert pauses.frozen == 7 and pauses.full_collections == 2
    assert 0 <= pauses.longest <= pauses.total
