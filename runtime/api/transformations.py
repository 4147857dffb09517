"""The logical plan the API records: a `Transformation` per operator call (its operator template,
its inputs and how each input is exchanged), turned into a `JobGraph` by
`runtime.api.graph_builder` when the job runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from operators.base import Record, StreamOperator
from operators.sources import Source
from operators.watermarks import WatermarkStrategy
from runtime.core.graph import (
    JobGraphError,
)


@dataclass(frozen=True, slots=True)
class Exchange:
    """How a node's input is partitioned: 'forward', 'rebalance', 'broadcast', 'hash', or
    'default' (as for no exchange: forward at equal parallelism, rebalance otherwise);
    `output_tag`: the input is that side output of the upstream node."""

    kind: str
    key_selector: Callable[[Record], Any] | None = None
    label: str = ""
    output_tag: str | None = None


@dataclass(eq=False)
class Transformation:
    """One logical operator of the plan (see the module docstring)."""

    id: int
    base_name: str
    inputs: list[tuple[Transformation, Exchange | None]] = field(default_factory=list)
    operator: StreamOperator | None = None
    source: Source | None = None
    #: the source's split count follows the node's parallelism (from_collection/generate default)
    default_splits: bool = False
    sink_name: str | None = None
    parallelism: int | None = None
    user_name: str | None = None
    #: output fields when known before running (None: decided at runtime)
    columns: list[str] | None = None
    #: a source's watermark strategy (per-split timestamps and watermarks)
    watermark_strategy: WatermarkStrategy | None = None

    @property
    def display_name(self) -> str:
        return self.user_name or self.base_name


def check_callable(what: str, fn: Any) -> None:
    if not callable(fn):
        raise JobGraphError(f"{what}: expected a function, got {type(fn).__name__} {fn!r}")


def check_parallelism(node: Transformation, parallelism: Any) -> None:
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise JobGraphError(
            f"operator {node.display_name!r}: parallelism must be an integer >= 1, got {parallelism!r}"
        )
