"""One local Spark session (`spark_bridge.local_session`: `local[2]`, on 127.0.0.1 only, UI off, 2 shuffle
partitions) for the whole test run.

If Spark cannot start, every test using it fails with the reason: Spark tests are never skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

_START_ERROR: list[BaseException] = []


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if _START_ERROR:
        pytest.fail(f"local Spark could not start: {_START_ERROR[0]!r}", pytrace=False)
    try:
        from spark_bridge.session import local_session

        session = local_session("barrierflow-tests", cores=2, memory="1g",
                                config={"spark.sql.shuffle.partitions": "2"})
        session.sparkContext.setLogLevel("ERROR")
    except Exception as exc:  # noqa: BLE001 - any start failure must fail the tests loudly
        _START_ERROR.append(exc)
        pytest.fail(f"local Spark (pyspark, Java 17) could not start: {exc!r}", pytrace=False)
    yield session
    session.stop()
