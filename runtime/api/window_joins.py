"""Window joins and co-groups: `a.join(b).where(ka).equal_to(kb).window(assigner).apply(fn)`.

Built as Flink builds them, on windows: each input is tagged (a map puts the record under
`LEFT_FIELD` or `RIGHT_FIELD`, the other None, and its key under `KEY_FIELD`; the record keeps
its timestamp),
the tagged streams are unioned, keyed by the join key and windowed; a `ProcessWindowFunction`
splits each fired window's elements back into the two sides and calls the user function: for
`co_group`, `fn(lefts, rights)` once per key and window (either list may be empty); for `join`,
`fn(left, right)` for every pair (an inner join). So a window join is a keyed window like any
other: its state, timers, restore and rescaling are the window operator's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from operators.keyed import ColumnKeySelector, _checked_results
from operators.windows.assigners import WindowAssigner
from operators.windows.functions import CoGroupFunction, JoinFunction, ProcessWindowFunction
from operators.windows.triggers import Trigger
from runtime.core.graph import JobGraphError

if TYPE_CHECKING:
    from runtime.api.environment import DataStream

__all__ = ["CoGroupedStreams", "JoinedStreams"]

Record = dict[str, Any]

KEY_FIELD = "__join_key"
LEFT_FIELD = "__join_left"
RIGHT_FIELD = "__join_right"


class _Tag:
    """Puts a record of one side under its field, with the join key beside it and the other
    side's field None: one set of fields for both sides' records, as state needs (picklable)."""

    def __init__(self, key_selector: Callable[[Record], Any], left: bool) -> None:
        self.key_selector = key_selector
        self.left = left

    def __call__(self, record: Record) -> Record:
        return {KEY_FIELD: self.key_selector(record), LEFT_FIELD: record if self.left else None,
                RIGHT_FIELD: None if self.left else record}


class _SplitSides(ProcessWindowFunction):
    """A fired window's tagged elements, split into sides and handed to the user function."""

    def __init__(self, fn: Any, join: bool) -> None:
        self.fn = fn
        self.join = join

    def process(self, key: Any, context: Any, elements: Iterable[Any]) -> Iterable[Record]:
        lefts = [e[LEFT_FIELD] for e in elements if e.get(LEFT_FIELD) is not None]
        rights = [e[RIGHT_FIELD] for e in elements if e.get(RIGHT_FIELD) is not None]
        if not self.join:
            results = self.fn(lefts, rights)
            return [] if results is None else list(_checked_results(results, "the co_group function"))
        out = []
        for left in lefts:
            for right in rights:
                result = self.fn(left, right)
                if not isinstance(result, dict):
                    raise TypeError(f"the join function returned {type(result).__name__} {result!r}, expected a dict")
                out.append(result)
        return out


def _selector(what: str, key: Any) -> Callable[[Record], Any]:
    if isinstance(key, str):
        return ColumnKeySelector(key)
    if not callable(key):
        raise JobGraphError(f"{what}: expected a column name or a function record -> key, got {key!r}")
    return key


class _TwoInputs:
    """Shared by `join` and `co_group`: where / equal_to / window, then `apply`."""

    _kind = "join"

    def __init__(self, left: DataStream, right: DataStream) -> None:
        if getattr(right, "_env", None) is None or not hasattr(right, "_node"):
            raise JobGraphError(f"{self._kind}: expected a DataStream, got {type(right).__name__} {right!r}")
        if right._env is not left._env:
            raise JobGraphError(f"{self._kind}: the streams belong to different StreamEnvironments")
        self._left, self._right = left, right
        self._key_left: Callable[[Record], Any] | None = None
        self._key_right: Callable[[Record], Any] | None = None
        self._assigner: WindowAssigner | None = None
        self._trigger: Trigger | None = None
        self._lateness: Any = 0

    def where(self, key: Any) -> Any:
        """The key of the first stream's records: a column name or a function."""
        self._key_left = _selector(f"{self._kind} where", key)
        return self

    def equal_to(self, key: Any) -> Any:
        """The key of the second stream's records (must equal the first's to meet)."""
        if self._key_left is None:
            raise JobGraphError(f"{self._kind}: call where(key) before equal_to(key)")
        self._key_right = _selector(f"{self._kind} equal_to", key)
        return self

    def window(self, assigner: WindowAssigner) -> Any:
        """The windows both streams' records meet in (`TumblingEventTimeWindows.of(size)`, ...)."""
        if self._key_right is None:
            raise JobGraphError(f"{self._kind}: call where(key).equal_to(key) before window(assigner)")
        if not isinstance(assigner, WindowAssigner):
            raise JobGraphError(f"{self._kind} window: expected a WindowAssigner, got "
                                f"{type(assigner).__name__} {assigner!r}")
        self._assigner = assigner
        return self

    def trigger(self, trigger: Trigger) -> Any:
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness: Any) -> Any:
        self._lateness = lateness
        return self

    def _apply(self, fn: Callable[..., Any], join: bool, name: str | None) -> DataStream:
        if self._assigner is None:
            raise JobGraphError(f"{self._kind}: call where(key).equal_to(key).window(assigner) before apply(fn)")
        assert self._key_left is not None and self._key_right is not None
        label = name or self._kind
        left = self._left.map(_Tag(self._key_left, left=True), name=f"{label}-left")
        right = self._right.map(_Tag(self._key_right, left=False), name=f"{label}-right")
        windowed = left.union(right, name=f"{label}-union").key_by(KEY_FIELD).window(self._assigner)
        if self._trigger is not None:
            windowed = windowed.trigger(self._trigger)
        if self._lateness:
            windowed = windowed.allowed_lateness(self._lateness)
        return windowed.process(_SplitSides(fn, join), name=label)


class JoinedStreams(_TwoInputs):
    """`a.join(b)`: an inner join of the records of both streams per key and window."""

    _kind = "join"

    def apply(self, fn: JoinFunction | Callable[[Record, Record], Record], name: str | None = None) -> DataStream:
        """Emit `fn(left, right)` (or `fn.join(left, right)`) for every pair of one key and window."""
        if isinstance(fn, JoinFunction):
            fn = fn.join
        if not callable(fn):
            raise JobGraphError(f"join apply: expected a JoinFunction or a function (left, right) -> record, got {fn!r}")
        return self._apply(fn, True, name)


class CoGroupedStreams(_TwoInputs):
    """`a.co_group(b)`: both streams' records of one key and window, together."""

    _kind = "co_group"

    def apply(self, fn: CoGroupFunction | Callable[[list[Record], list[Record]], Iterable[Record]],
              name: str | None = None) -> DataStream:
        """Emit what `fn(lefts, rights)` (or `fn.co_group(...)`) returns, per key and window."""
        if isinstance(fn, CoGroupFunction):
            fn = fn.co_group
        if not callable(fn):
            raise JobGraphError(f"co_group apply: expected a CoGroupFunction or a function (lefts, rights) -> "
                                f"records, got {fn!r}")
        return self._apply(fn, False, name)
