"""Bytewax beside barrierflow (`benchmarks.peers`): the page-view job one child process of the
2-process Bytewax cluster runs."""

from __future__ import annotations

import array
import os
import time
from datetime import timedelta
from typing import Any

from benchmarks.peer_rows import INTERVAL_MS, KEYS, PARALLELISM, write_stamps

#: ints per batch of the generator source
BYTEWAX_BATCH = 1000


def child_bytewax(mode: str, records: int, work: str, proc_id: int, addresses: list[str]) -> dict[str, Any]:
    """One process of a 2-process Bytewax cluster; writes its `(created, done)` stamps to `work`/stamps."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import cluster_main

    stamp_dir = os.path.join(work, "stamps")
    os.makedirs(stamp_dir, exist_ok=True)
    stamps = array.array("d")

    class Numbers(StatefulSourcePartition):
        def __init__(self, part: int, resume: int | None) -> None:
            self.next = part if resume is None else resume
            self.step = PARALLELISM

        def next_batch(self) -> list[int]:
            if self.next >= records:
                raise StopIteration
            end = min(records, self.next + BYTEWAX_BATCH * self.step)
            batch = list(range(self.next, end, self.step))
            self.next = batch[-1] + self.step
            return batch

        def snapshot(self) -> int:
            return self.next

    class Source(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return [str(p) for p in range(PARALLELISM)]

        def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> Numbers:
            return Numbers(int(for_part), resume_state)

    class StampPart(StatelessSinkPartition):
        def write_batch(self, items: list[tuple[str, tuple[float, float]]]) -> None:
            for _key, (created, done) in items:
                stamps.append(created)
                stamps.append(done)

    class StampSink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> StampPart:
            return StampPart()

    def count(state: int | None, created: float) -> tuple[int, tuple[float, float]]:
        return (state or 0) + 1, (created, time.time())

    flow = Dataflow("pageview")
    items = op.input("inp", flow, Source())
    stamped = op.map("stamp", items, lambda i: (f"app{i % KEYS}", time.time()))
    counted = op.stateful_map("count", stamped, count)
    op.output("out", counted, StampSink())
    recovery = None
    if mode != "none":
        from pathlib import Path

        from bytewax.recovery import RecoveryConfig

        recovery = RecoveryConfig(Path(work) / "recovery")
    cluster_main(flow, addresses, proc_id, epoch_interval=timedelta(milliseconds=INTERVAL_MS),
                 recovery_config=recovery, worker_count_per_proc=1)
    write_stamps(os.path.join(stamp_dir, f"proc{proc_id}.bin"), stamps)
    return {"stamps": stamp_dir}
