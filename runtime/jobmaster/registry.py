"""The executors `env.execute(executor=NAME)` can run a job on, by name.

An executor is any callable `run_job(graph, **options) -> JobResult` (`Executor`). The built-in
ones are registered by module path ("module:function"), looked up on every use, so naming them
here imports neither Ray nor the simulator (and a patched `run_job` is the one called); a new executor calls
`register_executor(name, run_job)` (or passes a path) and needs no change to `runtime.api.environment`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from runtime.core.graph import JobGraph, JobGraphError
from runtime.jobmaster.result import JobResult


class Executor(Protocol):
    """Runs `graph` to completion (or raises `JobFailedError`)."""

    def __call__(self, graph: JobGraph, **options: Any) -> JobResult: ...


_EXECUTORS: dict[str, Executor | str] = {
    "sim": "runtime.sim.executor:run_job",
    "ray": "runtime.ray.executor:run_job",
}


def register_executor(name: str, run_job: Executor | str) -> None:
    """Make `env.execute(executor=name)` call `run_job` (a callable, or "module:function" imported
    on first use). Registering a name again replaces it."""
    if not name or not isinstance(name, str):
        raise ValueError(f"an executor name must be a non-empty string, not {name!r}")
    if isinstance(run_job, str) and ":" not in run_job:
        raise ValueError(f"executor {name!r}: {run_job!r} is not a 'module:function' path")
    _EXECUTORS[name] = run_job


def executor_names() -> list[str]:
    """The registered executor names."""
    return list(_EXECUTORS)


def get_executor(name: str) -> Executor:
    """The executor registered as `name`.

    Raises:
        JobGraphError: no executor is registered as `name` (the message lists the registered ones),
            or its module path does not import.
    """
    entry = _EXECUTORS.get(name)
    if entry is None:
        raise JobGraphError(f"unknown executor {name!r}; registered executors: {', '.join(executor_names())}")
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        try:
            entry = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise JobGraphError(f"executor {name!r}: cannot load {module_name}:{attribute}: {exc}") from exc
    return entry


class ExecutorOptionError(TypeError):
    """`env.execute(executor=NAME, **options)` got an option that executor does not have (the
    message names the executor, the option and the options it has)."""


def check_options(executor: str, options: Mapping[str, Any], accepting: Callable[..., Any]) -> None:
    """Refuse `options` that `accepting` (the executor's constructor) takes by no keyword.

    Raises:
        ExecutorOptionError: naming every unknown option, the executor and its options (an option of
            another executor, e.g. Ray's `slots_per_worker` on the simulator, is named so too).
    """
    params = inspect.signature(accepting).parameters.values()
    accepted = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self", "graph"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ExecutorOptionError(
            f"executor {executor!r} has no option {', '.join(unknown)}; its options are: {', '.join(sorted(accepted))}")
