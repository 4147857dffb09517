"""Side outputs: records an operator sends beside its main output (Flink's `OutputTag`).

A process function calls `ctx.output(tag, record)`; `stream.get_side_output(tag)` is the stream of
those records, transformed and sunk like any other. The job graph gives such a stream an edge of
its own, tagged with the tag's name, from the vertex whose chain ends with the producing operator
(a side-output stream never chains, and its producer then ends its chain); the task's record
writer sends a tag's records only on the edges of that tag, and the main output only on untagged
edges. Records sent to a tag nothing consumes are dropped, as in Flink. They carry the timestamp
of the element or timer that produced them, and watermarks reach side-output edges like any other.
"""

from __future__ import annotations

from typing import Any

from operators.base import Record

__all__ = ["OutputTag", "SideOutputs"]


class OutputTag:
    """Names a side output (PyFlink's `OutputTag(tag_id)`); tags are equal by name.

    Raises:
        ValueError: `name` is not a non-empty string.
    """

    __slots__ = ("name",)

    def __init__(self, name: str, type_info: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"OutputTag: the name must be a non-empty string, got {name!r}")
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("OutputTag", self.name))

    def __getstate__(self) -> str:
        return self.name

    def __setstate__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"OutputTag({self.name!r})"


def check_side_output(tag: Any, record: Any) -> None:
    """What `ctx.output(tag, record)` checks: raise `TypeError` unless `tag` is an `OutputTag` and
    `record` a dict."""
    if not isinstance(tag, OutputTag):
        raise TypeError(f"ctx.output needs an OutputTag, got {type(tag).__name__} {tag!r}")
    if not isinstance(record, dict):
        raise TypeError(f"ctx.output({tag!r}, ...) needs a dict record, got {type(record).__name__} {record!r}")


class SideOutputs:
    """The side-output records of one task's chain, per tag, until the task sends them.

    Args:
        producer: the operator whose side outputs leave the task (the chain's last one).
        consumed: the tags some output edge of the task carries; others are dropped.
    """

    def __init__(self, producer: str | None, consumed: frozenset[str]) -> None:
        self.producer = producer
        self.consumed = consumed
        self._records: dict[str, list[Record]] = {}

    def emit(self, operator: str, tag: OutputTag, record: Record) -> None:
        """`operator` sends `record` (already stamped) to side output `tag`."""
        if operator == self.producer and tag.name in self.consumed:
            self._records.setdefault(tag.name, []).append(record)

    def take(self) -> list[tuple[str, list[Record]]]:
        """The records sent since the last call, per tag (tags in first-use order)."""
        if not self._records:
            return []
        out, self._records = list(self._records.items()), {}
        return out

    def __repr__(self) -> str:
        return f"SideOutputs(producer={self.producer!r}, consumed={sorted(self.consumed)})"
