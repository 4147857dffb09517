"""The event-time invariants of `InvariantChecker`: watermarks and timers, event by event.

Like the rest of the checker it watches from outside and changes nothing: the simulator reports
what each task sends (`on_send`), and on every deployment the checker wraps, forwarding every
call unchanged, each task's `TaskTime.entered_chain` (the task's input watermark) and the
`add` / `remove` / `poll` of each timer queue of its operators' timer services.

Invariants (the name is what a violation reports):

* ``watermark-monotonic`` — within an execution attempt, the watermarks a task sends on an output
  channel never go backwards, nor does the watermark its operators get (its valve's output).
* ``timer-fires-once`` — within an execution attempt, every timer fires at most once per
  registration: a timer handed out must be registered (restored, or registered since) and not
  deleted or fired since; an event-time timer fires only once the operator's watermark reached
  its time.
* ``event-timers-fire-by-end`` — when a job finished successfully no event-time timer is left:
  the end of input moved every watermark to `+inf`.
* ``window-fires-after-end`` — a window of an event-time assigner with the event-time trigger
  fires only once the operator's watermark reached its end (`max_timestamp()`); that no window
  fires after its cleanup time (end + allowed lateness) follows from ``window-record-accounted``:
  a record for such a window is late, and a window without records has no contents to fire.
* ``window-record-accounted`` — each record a window operator takes is added once to each of its
  windows the watermark has not passed (end + allowed lateness; for merging windows, to the one
  window it merged into), or, when it passed them all, goes to the late output or is counted as
  dropped — never both, never neither. Together with the committed output's comparison to a
  reference this is "each record counted once per window it belongs to, or late".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from operators.windows.operator import WindowOperator
from operators.windows.triggers import EventTimeTrigger
from runtime.records.messages import Watermark
from vocabulary.handles import TaskId

if TYPE_CHECKING:
    from runtime.checker.invariants import InvariantChecker

__all__ = ["EventTimeChecks"]


class EventTimeChecks:
    """The event-time part of an `InvariantChecker` (see the module docstring)."""

    def __init__(self, checker: InvariantChecker) -> None:
        self.checker = checker
        self._sent: dict[tuple[TaskId, int], float] = {}
        self._tasks: list[tuple[TaskId, Any]] = []

    def deployed(self, tasks: dict[TaskId, Any]) -> None:
        """A new execution attempt: watch its tasks' watermarks and timers."""
        self._sent = {}
        self._tasks = []
        for task_id, task in tasks.items():
            self._watch_watermark(task_id, task.time)
            for operator in task.chain.operators:
                if isinstance(operator, WindowOperator):
                    self._watch_windows(task_id, operator)
            for service in task.chain.timer_services:
                self._tasks.append((task_id, service))
                for domain, queue in (("event", service.event), ("processing", service.processing)):
                    self._watch_queue(task_id, service, domain, queue)

    def on_send(self, sender: TaskId, out_index: int, payload: Any) -> None:
        if type(payload) is not Watermark:
            return
        key = (sender, out_index)
        last = self._sent.get(key)
        self.checker.checks["watermark-monotonic"] += 1
        if last is not None and payload.timestamp < last:
            self.checker._violate("watermark-monotonic", f"task {sender}, output channel {out_index}",
                                  f"sent watermark {payload.timestamp} after {last}")
        self._sent[key] = payload.timestamp if last is None else max(last, payload.timestamp)

    def finished(self, graph: Any) -> None:
        """The job finished successfully: no event-time timer may be left (in a job with
        watermarks: without any, event-time timers cannot fire)."""
        if not graph.watermarks:
            return
        for task_id, service in self._tasks:
            self.checker.checks["event-timers-fire-by-end"] += 1
            if len(service.event):
                left = service.event.timers()[:3]
                self.checker._violate("event-timers-fire-by-end", f"task {task_id}, timer service {service.name!r}",
                                      f"{len(service.event)} event-time timer(s) never fired, e.g. {left} "
                                      f"(watermark {service.current_watermark})")
                return

    # ------------------------------------------------------------------ wrappers

    def _watch_watermark(self, task_id: TaskId, time: Any) -> None:
        entered = time.entered_chain
        checks = self.checker.checks

        def watched(events: list[Any]) -> None:
            last = time.current_watermark
            for event in events:
                if type(event) is Watermark:
                    checks["watermark-monotonic"] += 1
                    if event.timestamp < last:
                        self.checker._violate("watermark-monotonic", f"task {task_id}",
                                              f"its input watermark went from {last} back to {event.timestamp}")
                    last = max(last, event.timestamp)
            entered(events)

        time.entered_chain = watched

    def _watch_queue(self, task_id: TaskId, service: Any, domain: str, queue: Any) -> None:
        registered = {(key, namespace, timestamp) for timestamp, key, namespace in queue.timers()}
        add, remove, poll, backend = queue.add, queue.remove, queue.poll, queue.backend
        checker = self.checker

        def watched_add(timestamp: Any, namespace: Any = None) -> bool:
            added = add(timestamp, namespace)
            if added:
                registered.add((backend.current_key, namespace, timestamp))
            return added

        def watched_remove(timestamp: Any, namespace: Any = None) -> bool:
            removed = remove(timestamp, namespace)
            if removed:
                registered.discard((backend.current_key, namespace, timestamp))
            return removed

        def watched_poll(up_to: Any) -> Any:
            timer = poll(up_to)
            if timer is None:
                return None
            timestamp, key, namespace = timer
            checker.checks["timer-fires-once"] += 1
            subject = f"task {task_id}, {domain}-time timer {timestamp!r} of key {key!r}"
            if (key, namespace, timestamp) not in registered:
                checker._violate("timer-fires-once", subject, "fired though it is not registered: it fired "
                                 "already, was deleted, or was never registered in this execution attempt")
            elif domain == "event" and timestamp > service.current_watermark:
                checker._violate("timer-fires-once", subject,
                                 f"fired at watermark {service.current_watermark}, before its time")
            registered.discard((key, namespace, timestamp))
            return timer

        queue.add, queue.remove, queue.poll = watched_add, watched_remove, watched_poll

    def _watch_windows(self, task_id: TaskId, operator: WindowOperator) -> None:
        emit, process, add = operator._emit, operator._process_element, operator.contents.add
        checker, service = self.checker, operator.timer_service
        checks_end = operator.assigner.is_event_time and type(operator.trigger) is EventTimeTrigger
        added: list[Any] = []

        def watched_emit(key: Any, window: Any, state_window: Any, out: list[Any]) -> None:
            checker.checks["window-fires-after-end"] += 1
            watermark = service.current_watermark
            if checks_end and window.max_timestamp() > watermark:
                checker._violate("window-fires-after-end", f"task {task_id}, operator {operator.name!r}",
                                 f"window {window!r} of key {key!r} fired at watermark {watermark}, before its end")
            emit(key, window, state_window, out)

        def watched_add(window_key: Any, value: Any) -> None:
            added.append(window_key)
            add(window_key, value)

        def watched_process(record: Any, out: list[Any]) -> None:
            added.clear()
            late_before = operator.num_late_records_dropped
            side = operator._side
            sent_late: list[Any] = []

            def watched_side(tag: Any, late_record: Any) -> None:
                sent_late.append(late_record)
                side(tag, late_record)

            operator._side = watched_side
            try:
                process(record, out)
            finally:
                operator._side = side
            late = len(sent_late) + operator.num_late_records_dropped - late_before
            checker.checks["window-record-accounted"] += 1
            subject = f"task {task_id}, operator {operator.name!r}"
            if len(set(added)) != len(added):
                checker._violate("window-record-accounted", subject,
                                 f"record {record!r} added twice to one window: {added}")
            elif (late > 0) == bool(added) or late > 1:
                checker._violate("window-record-accounted", subject,
                                 f"record {record!r} added to {len(added)} window(s) and sent late {late} time(s)")

        operator._emit = watched_emit  # type: ignore[method-assign]
        operator._process_element = watched_process  # type: ignore[method-assign]
        operator.contents.add = watched_add  # type: ignore[method-assign]
