"""`TimerQueue`: the timers of one time domain of a keyed operator, as keyed state.

Theory of operation
-------------------
A timer is `(key, namespace, timestamp)`: a key's wish to be called back at a time (the
namespace tells timers of one key apart beyond their time: a window for a window operator, None
for a user function's timers). Timers are keyed state, partitioned by key group like every other
(Flink's `KeyGroupPartitionedPriorityQueue` of `TimerHeapInternalTimer`s): each queue keeps its
timers in the operator's `KeyedStateBackend` as the map state `state_name`,

    key -> {(timestamp, namespace): None}

so full, incremental and merged snapshots, restore, rescaling by key group, the restore check
and the Spark landing handle them as they handle any keyed state, and a timer is registered once
per key, namespace and time (Flink deduplicates likewise). The state exists from the first timer
on: an operator that never registers one snapshots no timer state. Flink names these states
`_timer_state/event_<service>` and `_timer_state/processing_<service>`; so does `timer_state_name`.

The firing order lives in memory only: a heap of `(timestamp, sequence, key, namespace)`, rebuilt
from the state when the queue is created (a restored backend brings its timers). A deleted timer
stays in the heap until it surfaces and is found missing from the state (lazy deletion); the heap
is rebuilt when such leftovers outnumber the live timers. Equal times fire in registration order
(after a restore: key group, then key and time order). Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from state.keyed import KeyedStateBackend

__all__ = ["TIMER_STATE_PREFIX", "TimerQueue", "timer_state_name"]

#: what the names of timer states start with
TIMER_STATE_PREFIX = "_timer_state/"

#: leftovers (deleted timers still in the heap) tolerated beyond the live timers before a rebuild
_SLACK = 64


def timer_state_name(domain: str, service: str) -> str:
    """The keyed state holding the `domain` ("event" or "processing") timers of timer service
    `service` (Flink's `_timer_state/<domain>_<service>`)."""
    return f"{TIMER_STATE_PREFIX}{domain}_{service}"


class TimerQueue:
    """The timers of one domain of one keyed operator instance (see the module docstring).

    Args:
        backend: the operator instance's keyed state backend; `add`/`remove` act on its current key.
        state_name: the map state holding the timers.
    """

    def __init__(self, backend: KeyedStateBackend, state_name: str) -> None:
        self.backend = backend
        self.state_name = state_name
        #: the map state (None until the first timer, unless the backend was restored with one)
        self._state = backend.map_state(state_name) if state_name in backend.state_names else None
        self._seq = itertools.count()
        self._heap: list[tuple[Any, int, Any, Any]] = []
        self._live = 0
        self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(timestamp, next(self._seq), key, namespace)
                      for key, timers in self.backend.entries(self.state_name)
                      for timestamp, namespace in timers]
        heapq.heapify(self._heap)
        self._live = len(self._heap)

    def add(self, timestamp: Any, namespace: Any = None) -> bool:
        """Register a timer of the backend's current key; False if it was registered already."""
        entry = (timestamp, namespace)
        if self._state is None:
            self._state = self.backend.map_state(self.state_name)
        elif self._state.contains(entry):
            return False
        self._state.put(entry, None)
        heapq.heappush(self._heap, (timestamp, next(self._seq), self.backend.current_key, namespace))
        self._live += 1
        return True

    def remove(self, timestamp: Any, namespace: Any = None) -> bool:
        """Delete a timer of the backend's current key; False if there was none."""
        entry = (timestamp, namespace)
        if self._state is None or not self._state.contains(entry):
            return False
        self._state.remove(entry)
        self._live -= 1
        if len(self._heap) > 2 * self._live + _SLACK:
            self._rebuild()
        return True

    def peek(self) -> Any:
        """The earliest live timer's timestamp (None: no timer). Sets the backend's current key
        while it looks, as `poll` does."""
        head = self._head()
        return None if head is None else head[0]

    def poll(self, up_to: Any) -> tuple[Any, Any, Any] | None:
        """Remove and return the earliest timer `(timestamp, key, namespace)` due at `up_to`
        (timestamp <= `up_to`), with its key made the backend's current key; None if none is due."""
        head = self._head()
        if head is None or head[0] > up_to:
            return None
        timestamp, _, key, namespace = heapq.heappop(self._heap)
        self._state.remove((timestamp, namespace))  # type: ignore[union-attr]  # a live head has state
        self._live -= 1
        return timestamp, key, namespace

    def _head(self) -> tuple[Any, int, Any, Any] | None:
        """The heap's first live entry, leftovers dropped; its key is the current key after."""
        if not self._heap:
            return None
        heap, contains, set_key = self._heap, self._state.contains, self.backend.set_current_key  # type: ignore[union-attr]
        while heap:
            timestamp, _, key, namespace = heap[0]
            set_key(key)
            if contains((timestamp, namespace)):
                return heap[0]
            heapq.heappop(heap)
        return None

    def timers(self) -> list[tuple[Any, Any, Any]]:
        """Every live timer `(timestamp, key, namespace)`, in firing order (for inspection)."""
        return sorted(((t, k, ns) for k, timers in self.backend.entries(self.state_name) for t, ns in timers),
                      key=lambda timer: timer[0])

    def __len__(self) -> int:
        return self._live

    def __repr__(self) -> str:
        return f"TimerQueue({self.state_name!r}, timers={self._live})"
