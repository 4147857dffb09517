"""Window functions and the state a window's contents live in.

User functions (PyFlink's names): an `AggregateFunction` keeps one accumulator per key and window
(`create_accumulator`, `add(value, accumulator)`, `get_result`, `merge` for session windows); a
`ProcessWindowFunction` gets a window's elements (all of them, or the one reduced / aggregated
result) with a `context` (`context.window()`, `current_watermark()`, `output(tag, record)`).

Contents (`WindowContents`) are the window operator's keyed state for the current key, in map
state keyed by the window's key, so snapshots, restore and rescaling treat them as any keyed
state, and clearing a window removes its entries (a cleared window stays cleared after a restore):

* `reduce`: `window-contents` window -> the reduced record;
* `aggregate`: `window-contents` window -> the accumulator (never the elements);
* `process`: `window-contents` window -> element count and `window-elements` (window, i) -> the
  i-th element, so adding an element costs one write whatever the window's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from state.keyed import KeyedStateBackend

__all__ = ["AggregateFunction", "CoGroupFunction", "JoinFunction", "ProcessWindowFunction", "WindowContents"]

CONTENTS = "window-contents"
ELEMENTS = "window-elements"

Record = dict[str, Any]


class AggregateFunction:
    """Incremental aggregation with an accumulator (Flink's `AggregateFunction`). The accumulator
    must be storable as state (numbers, strings, lists, dicts, tuples of those)."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement create_accumulator()")

    def add(self, value: Record, accumulator: Any) -> Any:
        """Fold `value` into `accumulator`; return the new accumulator."""
        raise NotImplementedError(f"{type(self).__name__} must implement add(value, accumulator)")

    def get_result(self, accumulator: Any) -> Any:
        """The window's result (a dict record unless a `ProcessWindowFunction` follows)."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_result(accumulator)")

    def merge(self, a: Any, b: Any) -> Any:
        """Two accumulators as one (session windows merge)."""
        raise NotImplementedError(f"{type(self).__name__} must implement merge(a, b) for merging windows")


class ProcessWindowFunction:
    """Processes a window's elements at once (Flink's `ProcessWindowFunction`).

    `process(key, context, elements)` returns (or yields) output records; `context.window()` is
    the window (`.start`, `.end`, `.max_timestamp()`). `clear(context)` is called when the window
    is purged for good."""

    def process(self, key: Any, context: Any, elements: Iterable[Any]) -> Iterable[Record] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement process(key, context, elements)")

    def clear(self, context: Any) -> None:  # noqa: B027 - optional hook
        pass


class JoinFunction:
    """`join(left, right)` -> the joined record, for each pair of one key and window (PyFlink's)."""

    def join(self, first: Record, second: Record) -> Record:
        raise NotImplementedError(f"{type(self).__name__} must implement join(first, second)")


class CoGroupFunction:
    """`co_group(lefts, rights)` -> records, once per key and window (PyFlink's)."""

    def co_group(self, first: list[Record], second: list[Record]) -> Iterable[Record] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement co_group(first, second)")


class WindowContents:
    """A window's contents in keyed state (see the module docstring); the backend's current key
    is the key they belong to."""

    merges = True

    def __init__(self, backend: KeyedStateBackend) -> None:
        self.contents = backend.map_state(CONTENTS)

    def state_names(self) -> frozenset[str]:
        return frozenset({CONTENTS})

    def add(self, window: Any, value: Record) -> None:
        raise NotImplementedError

    def get(self, window: Any) -> list[Any] | None:
        """What the window function gets (None: the window holds nothing)."""
        raise NotImplementedError

    def clear(self, window: Any) -> None:
        self.contents.remove(window)

    def merge(self, target: Any, sources: list[Any]) -> None:
        raise NotImplementedError


class ReducingContents(WindowContents):
    def __init__(self, backend: KeyedStateBackend, fn: Callable[[Record, Record], Record]) -> None:
        super().__init__(backend)
        self.fn = fn

    def _reduce(self, acc: Record | None, value: Record) -> Record:
        if acc is None:
            return value
        new = self.fn(acc, value)
        if not isinstance(new, dict):
            raise TypeError(f"reduce function returned {type(new).__name__} {new!r}, expected a dict")
        return new

    def add(self, window: Any, value: Record) -> None:
        self.contents.put(window, self._reduce(self.contents.get(window), value))

    def get(self, window: Any) -> list[Any] | None:
        acc = self.contents.get(window)
        return None if acc is None else [acc]

    def merge(self, target: Any, sources: list[Any]) -> None:
        acc = self.contents.get(target)
        for source in sources:
            value = self.contents.get(source)
            if value is not None:
                acc = self._reduce(acc, value)
                self.contents.remove(source)
        if acc is not None:
            self.contents.put(target, acc)


class AggregatingContents(WindowContents):
    def __init__(self, backend: KeyedStateBackend, fn: AggregateFunction) -> None:
        super().__init__(backend)
        self.fn = fn

    def add(self, window: Any, value: Record) -> None:
        contents = self.contents
        acc = contents.get(window) if contents.contains(window) else self.fn.create_accumulator()
        contents.put(window, self.fn.add(value, acc))

    def get(self, window: Any) -> list[Any] | None:
        if not self.contents.contains(window):
            return None
        return [self.fn.get_result(self.contents.get(window))]

    def merge(self, target: Any, sources: list[Any]) -> None:
        contents = self.contents
        has, acc = contents.contains(target), contents.get(target)
        for source in sources:
            if contents.contains(source):
                value = contents.get(source)
                acc = self.fn.merge(acc, value) if has else value
                has = True
                contents.remove(source)
        if has:
            contents.put(target, acc)


class ListContents(WindowContents):
    def __init__(self, backend: KeyedStateBackend) -> None:
        super().__init__(backend)
        self.elements = backend.map_state(ELEMENTS)

    def state_names(self) -> frozenset[str]:
        return frozenset({CONTENTS, ELEMENTS})

    def add(self, window: Any, value: Record) -> None:
        n = self.contents.get(window, 0)
        self.elements.put((window, n), value)
        self.contents.put(window, n + 1)

    def get(self, window: Any) -> list[Any] | None:
        n = self.contents.get(window, 0)
        return [self.elements.get((window, i)) for i in range(n)] if n else None

    def clear(self, window: Any) -> None:
        for i in range(self.contents.get(window, 0)):
            self.elements.remove((window, i))
        self.contents.remove(window)

    def merge(self, target: Any, sources: list[Any]) -> None:
        n = self.contents.get(target, 0)
        for source in sources:
            for element in self.get(source) or ():
                self.elements.put((target, n), element)
                n += 1
            self.clear(source)
        if n:
            self.contents.put(target, n)
