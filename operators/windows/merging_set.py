"""`MergingWindowSet`: the session windows of one key and where their state lives (Flink's).

Merging windows change as records come, but moving a window's contents at every merge would be
costly; so each in-flight window maps to a *state window*, the window its contents are kept under
(one of the windows merged into it). The mapping is itself keyed state, the map state
`window-merging` (window key -> state window key), so a snapshot holds it beside the contents it
points into, and a restore or rescale brings both back together.

`add_window` merges a new window into the set with the assigner's `merge_windows`, calls back
with each merge (result, merged windows, the result's state window, the state windows merged
into it) so the operator merges contents, triggers and timers, and returns the window the new
one ended up in. The operator loads the set for the current key, works on it and `persist`s it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from state.keyed import KeyedStateBackend

__all__ = ["MERGING_STATE", "MergingWindowSet"]

MERGING_STATE = "window-merging"

MergeFunction = Callable[[Any, list[Any], Any, list[Any]], None]


class MergingWindowSet:
    """The current key's merging windows (see the module docstring)."""

    def __init__(self, backend: KeyedStateBackend, assigner: Any) -> None:
        self.assigner = assigner
        self._state = backend.map_state(MERGING_STATE)
        window_of = assigner.window_of
        self.mapping: dict[Any, Any] = {window_of(k): window_of(v) for k, v in self._state.items()}
        self._initial = dict(self.mapping)

    def state_window(self, window: Any) -> Any:
        """The window `window`'s contents are kept under (None: not in the set)."""
        return self.mapping.get(window)

    def retire_window(self, window: Any) -> None:
        if self.mapping.pop(window, None) is None:
            raise RuntimeError(f"window {window!r} is not in the merging window set")

    def add_window(self, new_window: Any, merge: MergeFunction) -> Any:
        """Add `new_window`; returns the window it is part of now (itself when nothing merged)."""
        windows = [*self.mapping, new_window]
        result_window, merged_new = new_window, False
        for merge_result, merged in self.assigner.merge_windows(windows):
            merged = list(merged)
            if new_window in merged:
                merged.remove(new_window)
                merged_new = True
                result_window = merge_result
            state_window = self.mapping[merged[0]]
            merged_state_windows = [self.mapping.pop(w) for w in merged if w in self.mapping]
            self.mapping[merge_result] = state_window
            merged_state_windows.remove(state_window)
            if not (len(merged) == 1 and merged[0] == merge_result):
                merge(merge_result, merged, state_window, merged_state_windows)
        if not merged_new:
            self.mapping[result_window] = result_window
        return result_window

    def persist(self) -> None:
        """Write the changes back to keyed state."""
        if self.mapping == self._initial:
            return
        for window in self._initial:
            if window not in self.mapping:
                self._state.remove(window.key)
        for window, state_window in self.mapping.items():
            if self._initial.get(window) != state_window:
                self._state.put(window.key, state_window.key)
        self._initial = dict(self.mapping)

    def __repr__(self) -> str:
        return f"MergingWindowSet({self.mapping!r})"
