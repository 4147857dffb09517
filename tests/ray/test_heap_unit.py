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


def test_the_timer_counts_full_collections_only() -> None:
    timer = FullCollectionTimer()
    for generation in (0, 1, 2, 2):
        timer("start", {"generation": generation})
        timer("stop", {"generation": generation})
    timer("stop", {"generation": 2})  # a stop without its start (the timer came mid-collection)
    pauses = timer.pauses(frozen=7)
    assert pauses.frozen == 7 and pauses.full_collections == 2
    assert 0 <= pauses.longest <= pauses.total
