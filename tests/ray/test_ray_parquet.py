"""`env.from_parquet` on Ray: task actors killed mid-read, every row counted exactly once."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from operators import CollectSink
from runtime import FaultPlan, StreamEnvironment
from vocabulary.options import RestartStrategy

ROWS = [{"i": i, "k": f"k{i % 5}"} for i in range(6_000)]


@pytest.mark.ray
def test_exactly_once_with_task_actors_killed(ray_session, tmp_path) -> None:
    for index in range(3):
        pq.write_table(pa.Table.from_pylist(ROWS[index * 2000:(index + 1) * 2000]),
                       tmp_path / f"part-{index}.parquet", row_group_size=500)
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    env.from_parquet(str(tmp_path)).key_by("k").count().sink_to(CollectSink("counts"))
    result = env.execute("parquet", executor="ray", faults=FaultPlan.random(seed=21, crashes=2))
    assert result.restarts >= 1, result.failures
    totals = Counter(r["k"] for r in ROWS)
    assert Counter((r["k"], r["count"]) for r in result.output("counts")) == \
        Counter((k, n) for k, total in totals.items() for n in range(1, total + 1))
    assert result.metrics.records_in > len(ROWS)  # the splits rewound and replayed
