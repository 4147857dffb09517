"""Two-input streams of the public API: `ConnectedStreams` (`a.connect(b)`) and the interval join
(`a.key_by(k).interval_join(b.key_by(k)).between(lower, upper)`), PyFlink's names.

Each adds one operator of two inputs (`operators.two_input`) to the plan: a node whose first input
is `a` and second `b`, each with its own exchange (hash by its own key selector when keyed). The
graph builder gives those edges `input_index` 0 and 1 (`JobEdge.input_index`), so the task hands
each buffer to the right input and keeps a watermark valve per input; its barriers are aligned
across the channels of both inputs by one input gate. Streams are passed in (no import of
`runtime.api.environment`, which imports this module): the new operator's stream comes from
`DataStream._stream_of`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operators.base import Record
from operators.co_process import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    CoProcessOperator,
    KeyedCoProcessFunction,
    KeyedCoProcessOperator,
    as_co_process,
)
from operators.interval_join import IntervalJoinOperator, ProcessJoinFunction, check_bounds
from operators.side_outputs import OutputTag
from runtime.core.graph import JobGraphError

if TYPE_CHECKING:
    from runtime.api.environment import DataStream, KeyedStream

__all__ = ["ConnectedStreams", "IntervalJoin", "IntervalJoined"]

KeySelector = Callable[[Record], Any]


def _instance_of(what: str, fn: Any, base: type, methods: tuple[str, ...]) -> None:
    """Raise `JobGraphError` naming `what` unless `fn` is an instance of `base` implementing `methods`."""
    if isinstance(fn, type) and issubclass(fn, base):
        raise JobGraphError(f"{what}: pass an instance, {fn.__name__}(), not the class {fn.__name__}")
    if not isinstance(fn, base):
        raise JobGraphError(f"{what}: expected a {base.__name__} instance, got {type(fn).__name__} {fn!r}")
    for method in methods:
        if getattr(type(fn), method) is getattr(base, method):
            raise JobGraphError(f"{what}: {type(fn).__name__} does not implement {method}")


def _add_two_input(first: DataStream, second: DataStream, operator: Any, base_name: str,
                   name: str | None) -> DataStream:
    node = first._env._add_node(base_name, inputs=[(first._node, first._exchange), (second._node, second._exchange)],
                                operator=operator, user_name=name)
    return first._stream_of(node)


class ConnectedStreams:
    """Two streams feeding one operator (what `a.connect(b)` returns); keyed after `key_by`."""

    def __init__(self, first: DataStream, second: DataStream, keys: tuple[KeySelector, KeySelector] | None = None) -> None:
        self.first = first
        self.second = second
        #: the key selectors of both inputs (None: not keyed)
        self.keys = keys

    def key_by(self, key1: str | KeySelector, key2: str | KeySelector | None = None) -> ConnectedStreams:
        """Partition both inputs by key — `key1` for the first, `key2` for the second (a column
        name or a function `record -> key`) — so records of equal keys meet in one subtask and
        share its keyed state and timers.

        Raises:
            JobGraphError: a key is missing, or names a column its stream is known not to have.
        """
        if key1 is None or key2 is None:
            raise JobGraphError("connect(...).key_by(key1, key2): give a key for each input (a column name or a "
                                f"function), got key1={key1!r}, key2={key2!r}")
        first: KeyedStream = self.first.key_by(key1)
        second: KeyedStream = self.second.key_by(key2)
        return ConnectedStreams(first, second, (first.key_selector, second.key_selector))

    def process(self, fn: KeyedCoProcessFunction | CoProcessFunction, name: str | None = None) -> DataStream:
        """Run `fn.process_element1(record, ctx)` on the first input's records and
        `fn.process_element2(record, ctx)` on the second's: a `KeyedCoProcessFunction` on keyed
        connected streams, a `CoProcessFunction` otherwise.

        Raises:
            JobGraphError: `fn` is not an instance of the function class the streams take, or
                does not implement both methods.
        """
        what = f"connect(...).process {name!r}" if name else "connect(...).process"
        methods = ("process_element1", "process_element2")
        if self.keys is None:
            if isinstance(fn, KeyedCoProcessFunction) or fn is KeyedCoProcessFunction or (
                    isinstance(fn, type) and issubclass(fn, KeyedCoProcessFunction)):
                raise JobGraphError(f"{what}: a KeyedCoProcessFunction needs keyed inputs: "
                                    "a.connect(b).key_by(key_a, key_b).process(fn)")
            _instance_of(what, fn, CoProcessFunction, methods)
            return _add_two_input(self.first, self.second, CoProcessOperator(fn), "co-process", name)
        _instance_of(what, fn, KeyedCoProcessFunction, methods)
        try:
            operator = KeyedCoProcessOperator(fn, *self.keys)
        except TypeError as exc:
            raise JobGraphError(f"{what}: {exc}") from None
        return _add_two_input(self.first, self.second, operator, "keyed-co-process", name)

    def map(self, fn: CoMapFunction, name: str | None = None) -> DataStream:
        """One output record per input record: `fn.map1(record)` / `fn.map2(record)`."""
        what = f"connect(...).map {name!r}" if name else "connect(...).map"
        _instance_of(what, fn, CoMapFunction, ("map1", "map2"))
        return _add_two_input(self.first, self.second, CoProcessOperator(as_co_process(fn)), "co-map", name)

    def flat_map(self, fn: CoFlatMapFunction, name: str | None = None) -> DataStream:
        """Zero or more output records per input record: `fn.flat_map1(record)` / `fn.flat_map2(record)`."""
        what = f"connect(...).flat_map {name!r}" if name else "connect(...).flat_map"
        _instance_of(what, fn, CoFlatMapFunction, ("flat_map1", "flat_map2"))
        return _add_two_input(self.first, self.second, CoProcessOperator(as_co_process(fn)), "co-flat-map", name)

    def __repr__(self) -> str:
        return f"ConnectedStreams({self.first!r}, {self.second!r}, keyed={self.keys is not None})"


class IntervalJoin:
    """`left.interval_join(right)`: give the bounds with `between(lower, upper)`."""

    def __init__(self, left: KeyedStream, right: KeyedStream) -> None:
        self.left = left
        self.right = right

    def between(self, lower: float, upper: float) -> IntervalJoined:
        """Join a left record at `t` with the right records of its key at `t + lower` ..
        `t + upper` (inclusive; see `lower_bound_exclusive` / `upper_bound_exclusive`).

        Raises:
            JobGraphError: a bound is not a finite number, or `lower` > `upper`.
        """
        try:
            check_bounds(lower, upper)
        except ValueError as exc:
            raise JobGraphError(str(exc)) from None
        return IntervalJoined(self.left, self.right, lower, upper)


class IntervalJoined:
    """An interval join with its bounds: options, then `process(ProcessJoinFunction)`."""

    def __init__(self, left: KeyedStream, right: KeyedStream, lower: float, upper: float) -> None:
        self.left, self.right = left, right
        self.lower, self.upper = lower, upper
        self._lower_exclusive = self._upper_exclusive = False
        self._left_late: OutputTag | None = None
        self._right_late: OutputTag | None = None

    def lower_bound_exclusive(self) -> IntervalJoined:
        """Do not join pairs whose time difference equals the lower bound."""
        self._lower_exclusive = True
        return self

    def upper_bound_exclusive(self) -> IntervalJoined:
        """Do not join pairs whose time difference equals the upper bound."""
        self._upper_exclusive = True
        return self

    def side_output_left_late_data(self, tag: OutputTag) -> IntervalJoined:
        """Send left records arriving behind the watermark to side output `tag` (default: dropped)."""
        self._left_late = _tag("side_output_left_late_data", tag)
        return self

    def side_output_right_late_data(self, tag: OutputTag) -> IntervalJoined:
        """Send right records arriving behind the watermark to side output `tag` (default: dropped)."""
        self._right_late = _tag("side_output_right_late_data", tag)
        return self

    def process(self, fn: ProcessJoinFunction, name: str | None = None) -> DataStream:
        """Call `fn.process_element(left, right, ctx)` for every joined pair.

        Raises:
            JobGraphError: `fn` is not a `ProcessJoinFunction` instance implementing `process_element`.
        """
        what = f"interval_join(...).process {name!r}" if name else "interval_join(...).process"
        _instance_of(what, fn, ProcessJoinFunction, ("process_element",))
        operator = IntervalJoinOperator(fn, self.left.key_selector, self.right.key_selector, self.lower, self.upper,
                                        lower_exclusive=self._lower_exclusive, upper_exclusive=self._upper_exclusive,
                                        left_late=self._left_late, right_late=self._right_late)
        return _add_two_input(self.left, self.right, operator, "interval-join", name)


def _tag(what: str, tag: Any) -> OutputTag:
    if not isinstance(tag, OutputTag):
        raise JobGraphError(f"interval_join(...).{what}: expected an OutputTag, got {type(tag).__name__} {tag!r}")
    return tag
