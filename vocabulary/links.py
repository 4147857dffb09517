"""Slow network links: an extra delay on everything a task sends on its output channels.

A benchmark device (the `slow-channel` scenario) that both executors apply the same way: every
buffer and event a named task sends reaches its receivers `delay` seconds later than it would,
in order (each channel stays FIFO). It models an upstream subtask on a distant node: its data and
its barriers arrive late, while it and the receivers have headroom.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from vocabulary.handles import TaskId


def resolve_link_delays(link_delays: Mapping[str, float] | None, task_ids: Iterable[TaskId]) -> dict[TaskId, float]:
    """`link_delays` (a task name "vertex[i]" or a vertex name, for all its subtasks -> seconds)
    as a delay per task; a task name wins over its vertex's. Tasks without a delay are left out.

    Raises:
        ValueError: a name that is no task or vertex of the job, or a delay that is not a number >= 0.
    """
    if not link_delays:
        return {}
    tasks = list(task_ids)
    names = {str(t) for t in tasks}
    vertices = {t.vertex for t in tasks}
    for name, delay in link_delays.items():
        if name not in names and name not in vertices:
            raise ValueError(f"link_delays names unknown task or vertex {name!r}; tasks are: "
                             f"{', '.join(sorted(names))}")
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
            raise ValueError(f"link_delays[{name!r}] must be a number of seconds >= 0, got {delay!r}")
    resolved = {}
    for task in tasks:
        delay = link_delays.get(str(task), link_delays.get(task.vertex, 0.0))
        if delay > 0:
            resolved[task] = float(delay)
    return resolved
