"""What a finished job hands back: committed output, checkpoint stats, metrics, final state."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]


class JobFailedError(RuntimeError):
    """The job failed for good (restart attempts exhausted, or a non-recoverable error)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class CollectCommitter:
    """The "external system" behind `CollectSink`s: outlives task restarts; commits are
    idempotent per transaction id, so a transaction re-committed after recovery is not repeated."""

    def __init__(self) -> None:
        self._committed: dict[str, OrderedDict[str, list[Record]]] = {}
        self.duplicate_commits = 0

    def commit(self, sink: str, transaction_id: str, records: list[Record]) -> None:
        txns = self._committed.setdefault(sink, OrderedDict())
        if transaction_id in txns:
            self.duplicate_commits += 1
            return
        txns[transaction_id] = list(records)

    def output(self, sink: str) -> list[Record]:
        return [r for records in self._committed.get(sink, {}).values() for r in records]

    def transactions(self, sink: str) -> list[str]:
        return list(self._committed.get(sink, {}))

    @property
    def sinks(self) -> list[str]:
        return sorted(self._committed)


@dataclass
class JobMetrics:
    """Run metrics; times are virtual seconds on the simulator, wall seconds on Ray."""

    records_in: int = 0  # records read by sources (replays included)
    records_out: int = 0  # records committed by sinks
    duration: float = 0.0
    restarts: int = 0
    latencies: list[float] = field(default_factory=list, repr=False)
    events: int = 0

    @property
    def throughput(self) -> float:
        return self.records_in / self.duration if self.duration > 0 else 0.0

    def latency_percentile(self, q: float) -> float | None:
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, int(round(q / 100.0 * (len(ordered) - 1)))))
        return ordered[index]


@dataclass
class JobResult:
    """Returned by `env.execute(...)`."""

    job_name: str
    executor: str
    seed: int | None
    committer: CollectCommitter
    checkpoints: list[Any]  # list[checkpoint.stats.CheckpointStats]
    metrics: JobMetrics
    final_state: dict[str, dict[str, dict[Any, Any]]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    trace: list[tuple] = field(default_factory=list, repr=False)
    replay: str = ""

    def output(self, name: str) -> list[Record]:
        """Committed records of sink `name` (never uncommitted ones)."""
        if name not in self.sink_names:
            raise KeyError(f"no sink named {name!r}; sinks: {', '.join(self.sink_names) or '(none)'}")
        return self.committer.output(name)

    sink_names: list[str] = field(default_factory=list)

    @property
    def completed_checkpoints(self) -> list[Any]:
        return [c for c in self.checkpoints if c.completed]

    @property
    def aborted_checkpoints(self) -> list[Any]:
        return [c for c in self.checkpoints if not c.completed]

    @property
    def restarts(self) -> int:
        return self.metrics.restarts
