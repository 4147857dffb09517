"""One local Ray for the whole test session, started with the recipe of PLATFORM.md.

If Ray cannot start, every test that needs it FAILS with the reason (never skips).
"""

from __future__ import annotations

import pytest

from runtime.ray.cluster import ensure_ray


@pytest.fixture(scope="session")
def ray_session():
    import ray

    try:
        ensure_ray()  # the embedded default, as users get it
    except Exception as exc:  # pragma: no cover - environment failure
        pytest.fail(f"could not start a local Ray for the Ray tests: {exc!r}", pytrace=False)
    yield ray
    ray.shutdown()
