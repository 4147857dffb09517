"""Fakes for driving operators directly: a recording committer and an `OperatorContext` factory."""

from __future__ import annotations

from typing import Any

from operators.base import OperatorContext, StreamOperator
from runtime.core.ports import ManualClock
from state.key_groups import KeyGroupRange
from state.keyed import KeyedStateBackend


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
