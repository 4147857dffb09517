"""One local Ray for the whole test session, started with the recipe of PLATFORM.md.

If Ray cannot start, every test that needs it FAILS with the reason (never skips).
"""

from __future__ import annotations

import os

import pytest

from runtime.ray.cluster import LOCAL_ENV, local_runtime_env


@pytest.fixture(scope="session")
def ray_session():
    import ray

    for key, value in LOCAL_ENV.items():
        os.environ.setdefault(key, value)
    if not ray.is_initialized():
        try:
            ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False,
                     runtime_env=local_runtime_env(), log_to_driver=False)
        except Exception as exc:  # pragma: no cover - environment failure
            pytest.fail(f"could not start a local Ray for the Ray tests: {exc!r}", pytrace=False)
    yield ray
    ray.shutdown()
