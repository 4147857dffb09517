"""`WindowedStream`: what `keyed.window(assigner)` returns (PyFlink's `WindowedStream`).

Options (`trigger`, `allowed_lateness`, `side_output_late_data`) are set on the windowed stream;
a function call (`reduce`, `aggregate`, `process`, `count`, `sum`) ends it with a keyed
`WindowOperator` (`operators.windows`) behind the key-by's hash exchange. Bad input is rejected
here, when the job is defined, with a `JobGraphError` naming the call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operators.side_outputs import OutputTag
from operators.windows.assigners import WindowAssigner
from operators.windows.functions import AggregateFunction, ProcessWindowFunction
from operators.windows.operator import WindowOperator
from operators.windows.triggers import Trigger
from operators.windows.vectorised import WindowCountSumOperator
from runtime.core.graph import JobGraphError

if TYPE_CHECKING:
    from runtime.api.environment import DataStream, KeyedStream

__all__ = ["WindowedStream"]

Record = dict[str, Any]


class WindowedStream:
    """A keyed stream cut into windows; finish it with a window function."""

    def __init__(self, keyed: KeyedStream, assigner: WindowAssigner) -> None:
        if isinstance(assigner, type) and issubclass(assigner, WindowAssigner):
            raise JobGraphError(f"window: pass an assigner instance such as {assigner.__name__}.of(...), "
                                f"not the class {assigner.__name__}")
        if not isinstance(assigner, WindowAssigner):
            raise JobGraphError(f"window: expected a WindowAssigner (TumblingEventTimeWindows.of(size), ...), "
                                f"got {type(assigner).__name__} {assigner!r}")
        self._keyed = keyed
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness: Any = 0
        self._late_tag: OutputTag | None = None

    def trigger(self, trigger: Trigger) -> WindowedStream:
        """Fire with `trigger` instead of the assigner's default (e.g. `CountTrigger.of(n)`)."""
        if not isinstance(trigger, Trigger):
            raise JobGraphError(f"window trigger: expected a Trigger, got {type(trigger).__name__} {trigger!r}")
        if self._assigner.merging and not trigger.can_merge():
            raise JobGraphError(f"window trigger: {trigger!r} cannot be used with merging windows "
                                f"({type(self._assigner).__name__})")
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness: Any) -> WindowedStream:
        """Keep each window `lateness` (in the timestamps' unit) after its end: a late record
        within it fires the window again with the record included."""
        if isinstance(lateness, bool) or not isinstance(lateness, int | float) or not (
                math.isfinite(lateness) and lateness >= 0):
            raise JobGraphError(f"window allowed_lateness: expected a finite number >= 0, got {lateness!r}")
        if lateness and not self._assigner.is_event_time:
            raise JobGraphError(f"window allowed_lateness: {type(self._assigner).__name__} is not an event-time "
                                "assigner; lateness applies to event time only")
        self._lateness = lateness
        return self

    def side_output_late_data(self, tag: OutputTag) -> WindowedStream:
        """Send records too late for every window they belong to to side output `tag`
        (`result.get_side_output(tag)`) instead of dropping them."""
        if not isinstance(tag, OutputTag):
            raise JobGraphError(f"window side_output_late_data: expected an OutputTag, got {type(tag).__name__} {tag!r}")
        self._late_tag = tag
        return self

    # ------------------------------------------------------------------ window functions

    def _finish(self, kind: str, fn: Any, window_function: Any, name: str | None, base: str) -> DataStream:
        what = f"window {base}" + (f" {name!r}" if name else "")
        if window_function is not None:
            if isinstance(window_function, type):
                raise JobGraphError(f"{what}: pass an instance of {window_function.__name__}, not the class")
            if not isinstance(window_function, ProcessWindowFunction):
                raise JobGraphError(f"{what}: expected a ProcessWindowFunction, got "
                                    f"{type(window_function).__name__} {window_function!r}")
        operator = WindowOperator(self._assigner, self._keyed.key_selector, kind, fn, window_function,
                                  self._trigger, self._lateness, self._late_tag, name=name or f"window-{base}")
        return self._keyed._then(operator, f"window-{base}", name)

    def reduce(self, fn: Callable[[Record, Record], Record], window_function: ProcessWindowFunction | None = None,
               name: str | None = None) -> DataStream:
        """Reduce each window's records incrementally with `fn(acc, record) -> record`; emit the
        result (or `window_function.process(key, context, [result])`'s records) when it fires."""
        if not callable(fn):
            raise JobGraphError(f"window reduce: expected a function, got {type(fn).__name__} {fn!r}")
        return self._finish("reduce", fn, window_function, name, "reduce")

    def aggregate(self, fn: AggregateFunction, window_function: ProcessWindowFunction | None = None,
                  name: str | None = None) -> DataStream:
        """Aggregate each window with one accumulator per key and window (`fn` an
        `AggregateFunction`); emit `fn.get_result(acc)` (a dict), or what `window_function`
        makes of it."""
        if isinstance(fn, type):
            raise JobGraphError(f"window aggregate: pass an instance of {fn.__name__}, not the class")
        if not isinstance(fn, AggregateFunction):
            raise JobGraphError(f"window aggregate: expected an AggregateFunction, got {type(fn).__name__} {fn!r}")
        if self._assigner.merging and type(fn).merge is AggregateFunction.merge:
            raise JobGraphError(f"window aggregate: {type(fn).__name__} must implement merge(a, b) for "
                                f"{type(self._assigner).__name__}, whose windows merge")
        return self._finish("aggregate", fn, window_function, name, "aggregate")

    def process(self, fn: ProcessWindowFunction, name: str | None = None) -> DataStream:
        """Keep each window's records; on firing call `fn.process(key, context, elements)`."""
        if fn is None:
            raise JobGraphError("window process: expected a ProcessWindowFunction, got None")
        return self._finish("process", None, fn, name, "process")

    def count(self, name: str | None = None) -> DataStream:
        """Records per key and window: `{<key>: key, "window_start", "window_end", "count"}`;
        counts Arrow batches vectorised."""
        return self._vectorised("count", None, name)

    def sum(self, field: str, name: str | None = None) -> DataStream:
        """Sum of `field` per key and window: `{<key>: key, "window_start", "window_end", field}`;
        sums Arrow batches vectorised."""
        if not isinstance(field, str) or not field:
            raise JobGraphError(f"window sum: expected a field name, got {field!r}")
        return self._vectorised("sum", field, name)

    def _vectorised(self, kind: str, field: str | None, name: str | None) -> DataStream:
        key_field = self._keyed.key_column if self._keyed.key_column is not None else "key"
        operator = WindowCountSumOperator(self._assigner, self._keyed.key_selector, key_field, field,
                                          self._trigger, self._lateness, self._late_tag, name=name or f"window-{kind}")
        columns = [key_field, "window_start", "window_end", field or "count"]
        return self._keyed._then(operator, f"window-{kind}", name, columns)

    def __repr__(self) -> str:
        return f"WindowedStream({self._keyed!r}, {self._assigner!r})"
