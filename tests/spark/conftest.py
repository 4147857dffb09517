"""One local Spark session (`local[2]`, UI off, 2 shuffle partitions) for the whole test run.

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
        from pyspark.sql import SparkSession

        session = (
            SparkSession.builder.master("local[2]")
            .appName("barrierflow-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
    except Exception as exc:  # noqa: BLE001 - any start failure must fail the tests loudly
        _START_ERROR.append(exc)
        pytest.fail(f"local Spark (pyspark, Java 17) could not start: {exc!r}", pytrace=False)
    yield session
    session.stop()
