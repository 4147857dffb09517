"""Fakes for driving operators directly: a recording committer and an `OperatorContext` factory."""

from __future__ import annotations

from typing import Any

from operators.base import OperatorContext, StreamOperator
from state.key_groups import KeyGroupRange
from state.keyed import KeyedStateBackend
from vocabulary.ports import ManualClock


class RecordingCommitter:
    """The external system: records every commit call, applies each transaction id once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.staged: dict[str, list[dict[str, Any]]] = {}
        self.committed: dict[str, tuple[str, list[dict[str, Any]]]] = {}

    def stage(self, sink: str, transaction_id: str, records: list[dict[str, Any]]) -> None:
        self.staged.setdefault(transaction_id, list(records))

    def commit(self, sink: str, transaction_id: str, records: list[dict[str, Any]] | None = None) -> None:
        self.calls.append(transaction_id)
        if records is None:
            records = self.staged[transaction_id]  # KeyError: committed but never staged
        self.committed.setdefault(transaction_id, (sink, list(records)))

    def output(self, sink: str) -> list[dict[str, Any]]:
        return [r for txn in sorted(self.committed) for s, recs in [self.committed[txn]] if s == sink for r in recs]


def make_ctx(
    *,
    subtask: int = 0,
    parallelism: int = 1,
    max_parallelism: int = 128,
    keyed: bool = True,
    checkpointing: bool = True,
    committer: RecordingCommitter | None = None,
    clock: ManualClock | None = None,
    name: str = "vertex",
) -> OperatorContext:
    backend = KeyedStateBackend(name, KeyGroupRange.of(max_parallelism), max_parallelism) if keyed else None
    return OperatorContext(
        operator_name=name,
        subtask=subtask,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        clock=clock or ManualClock(),
        committer=committer or RecordingCommitter(),
        keyed_backend=backend,
        checkpointing=checkpointing,
    )


def opened(op: StreamOperator, **ctx_args: Any) -> StreamOperator:
    op.open(make_ctx(**ctx_args))
    return op


class FakeTime:
    """A processing-time service: remembers what operators scheduled; `fire(now)` calls them."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.scheduled: list[list] = []

    def now(self) -> float:
        return self.clock.now()

    def schedule(self, when: float, operator):
        entry = [when, operator, False]
        self.scheduled.append(entry)

        class Handle:
            def cancel(self) -> None:
                entry[2] = True

        return Handle()

    def fire(self, now: float) -> list:
        self.clock.set(now)
        due = [e for e in self.scheduled if e[0] <= now and not e[2]]
        self.scheduled = [e for e in self.scheduled if e not in due]
        out = []
        for _, operator, _ in sorted(due, key=lambda e: e[0]):
            out += operator.on_processing_time(now)
        return out
