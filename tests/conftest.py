"""Suite-wide settings and fixtures.

In CI (`CI` set) hypothesis runs derandomized: the same examples every run, so a landing is
never blocked by a new random draw; exploration with fresh random examples happens on
developer machines and in `python -m runtime.sim.vopr`, and every failure found there is kept
as an `@example`.
"""

import os
from concurrent.futures import Executor, Future

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


class HeldExecutor(Executor):
    """Runs submitted jobs only when told: what a slow I/O thread looks like to a store."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Future, object]] = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        self.jobs.append((future, lambda: fn(*args, **kwargs)))
        return future

    def run_all(self) -> None:
        jobs, self.jobs = self.jobs, []
        for future, job in jobs:
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)


@pytest.fixture
def held_executor() -> HeldExecutor:
    return HeldExecutor()
