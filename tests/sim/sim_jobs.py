"""The page-view job the simulator tests share: two partitions, map to app id, keyBy,
count, sink "pv"."""

from __future__ import annotations

from collections import Counter
from typing import Any

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.options import CheckpointingMode, RestartStrategy

ROWS = [{"user": i, "app": f"app{(i * 7) % 5}", "ts": i} for i in range(600)]
APPS = Counter(r["app"] for r in ROWS)
#: the failure-free output: every running count of every app
EXPECTED = multiset([{"app": app, "count": c} for app, n in APPS.items() for c in range(1, n + 1)])


def pageview(mode: CheckpointingMode, *, unaligned: bool = False, chaining: bool = True,
             sink: CollectSink | None = None, **options: Any) -> StreamEnvironment:
    """The job with checkpoints every 2 ms (`options`: more `enable_checkpointing` options);
    `chaining=False`: source, to-app, count and sink each their own vertex; `sink`: another sink
    named "pv" than `CollectSink("pv")`."""
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2, buffer_timeout=0.001)
    if not chaining:
        env.disable_chaining()
    env.enable_checkpointing(interval=0.002, mode=mode, unaligned=unaligned, tolerable_failures=1000, **options)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001))
    (
        env.from_collection(ROWS, splits=2)
        .map(lambda r: {"app": r["app"]}, name="to-app")
        .key_by("app")
        .process(CountPerKey("app"), name="count")
        .sink_to(sink if sink is not None else CollectSink("pv"))
    )
    return env


#: restores at another parallelism the event-time, window and two-input tests run: (state backend,
#: file merging, checkpoint mode, new parallelism)
RESCALES = [
    ("memory", False, "aligned", 3),
    ("memory", False, "unaligned", 1),
    ("incremental", False, "unaligned", 3),
    ("incremental", False, "aligned", 1),
    ("incremental", True, "aligned", 3),
    ("incremental", True, "unaligned", 1),
]


def event_time_env(mode: str = "aligned", parallelism: int = 2, storage: str | None = None, restarts: bool = True,
                   **options: Any) -> StreamEnvironment:
    """An environment for the event-time jobs: checkpoints every 2 ms in `mode` (a mode name; an
    alignment timeout of 0.5 ms for "aligned-timeout"), watermarks every 1 ms, 20 quick restarts
    (`restarts=False`: none); `options`: more `enable_checkpointing` options."""
    env = StreamEnvironment(parallelism=parallelism, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002, mode=mode, tolerable_failures=1000, storage=storage,
                             alignment_timeout=0.0005 if mode == "aligned-timeout" else None, **options)
    env.set_auto_watermark_interval(0.001)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=20, delay=0.001) if restarts
                             else RestartStrategy.no_restart())
    return env
