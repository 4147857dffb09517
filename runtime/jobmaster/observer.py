"""`ExecutionObserver`: what an executor tells a checker watching its run, event by event.

The simulator calls an observer (`SimExecutor(invariants=...)`) at the points where the protocol's
invariants can break; `runtime.checker.invariants.InvariantChecker` is the one the project has
(`env.execute(..., invariants=True)` builds it). The executor does not know what is checked: the
observer only watches, and raises out of `after_event` / `finished` when something broke. Defined
here, below the executors, so the simulator needs nothing from the verification tools above it.
"""

from __future__ import annotations

from typing import Any, Protocol

from vocabulary.handles import TaskId


class ExecutionObserver(Protocol):
    """Hooks of one run, in the order an executor calls them: `bind` once; per deployment
    `committer`, `deploying`, `deployed`; the `on_*` hooks as events happen; `after_event` after
    every event (`raise_found` when an event raised); `finished` at the end."""

    def bind(self, executor: Any) -> None:
        """Start watching `executor`'s run (before anything is written through its storage)."""
        ...

    def committer(self, committer: Any) -> Any:
        """What the tasks get as their committer: `committer`, or a watching wrapper of it."""
        ...

    def deploying(self) -> None:
        """A deployment restored its checkpoint and cleaned up the committer; its tasks come next."""
        ...

    def deployed(self) -> None:
        """A new execution attempt's tasks exist (`executor.tasks`)."""
        ...

    def on_send(self, sender: TaskId, out_index: int, payload: Any) -> None:
        """`sender` put `payload` on the network on output channel `out_index`."""
        ...

    def on_deliver(self, receiver: TaskId, channel: int, payload: Any) -> None:
        """`payload` reached input `channel` of `receiver`."""
        ...

    def on_credit_returned(self, sender: TaskId, out_index: int) -> None:
        """A credit for `sender`'s output `out_index` is on its way back."""
        ...

    def on_credit_given(self, sender: TaskId, out_index: int) -> None:
        """That credit reached `sender`."""
        ...

    def on_trigger(self, checkpoint_id: int) -> None:
        """The coordinator triggers `checkpoint_id`."""
        ...

    def on_source_triggered(self, task_id: TaskId, checkpoint_id: int) -> None:
        """Source `task_id` took the trigger of `checkpoint_id`."""
        ...

    def on_notified(self, task_id: TaskId, checkpoint_id: int, *, completed: bool) -> None:
        """`task_id` was told `checkpoint_id` completed (`completed`) or aborted."""
        ...

    def on_completed(self, completed: Any) -> None:
        """The coordinator completed a checkpoint (`CompletedCheckpoint`)."""
        ...

    def after_event(self) -> None:
        """An event ended: check what it touched (raises what broke)."""
        ...

    def raise_found(self, error: BaseException) -> None:
        """An event raised `error`: raise what the observer found before it instead, if anything."""
        ...

    def finished(self, ok: bool) -> None:
        """The run ended (`ok`: successfully); raises what broke."""
        ...
