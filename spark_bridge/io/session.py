"""A local Spark session that is safe by default: every port it opens is on loopback.

`SparkSession.builder.master("local[N]")` alone binds the driver's RPC and block-manager ports to
the machine's address (the host name's IP, reachable from the network) and serves the web UI on
all interfaces at 4040. `local_session` binds the driver to 127.0.0.1 and turns the UI off; the
Py4J gateway between Python and the JVM is on loopback already. The JVM it starts is told its local
address is 127.0.0.1 (`SPARK_LOCAL_IP`, in the JVM's environment only), so Spark neither looks
for the machine's address nor warns that it uses it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from pyspark.sql import SparkSession

#: configuration every session of `local_session` has (a caller's `config` may add, not override)
LOOPBACK_CONFIG: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.enabled": "false",
}


def local_session(app_name: str = "barrierflow", *, cores: int = 2, memory: str = "1g",
                  config: dict[str, str] | None = None) -> SparkSession:
    """A local Spark session (`local[cores]`, `memory` for the driver, session time zone UTC,
    no console progress bar) whose ports are all on 127.0.0.1 (`LOOPBACK_CONFIG`).

    Args:
        app_name: Spark's application name.
        cores: worker threads of the local master.
        memory: `spark.driver.memory` (e.g. "1g"); applies when this call starts the JVM.
        config: further Spark settings.

    Raises:
        ValueError: `cores` < 1, or `config` would override a setting of `LOOPBACK_CONFIG` (named).
    """
    if cores < 1:
        raise ValueError(f"local_session: cores must be >= 1, got {cores}")
    extra = dict(config or {})
    clashes = sorted(k for k in extra if k in LOOPBACK_CONFIG and extra[k] != LOOPBACK_CONFIG[k])
    if clashes:
        raise ValueError(f"local_session: config may not override {clashes}: the session listens on loopback only")
    settings = {"spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
                "spark.driver.memory": memory, **extra, **LOOPBACK_CONFIG}
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _local_ip("127.0.0.1"):  # read when (and only if) this call starts the JVM
        return builder.getOrCreate()


@contextlib.contextmanager
def _local_ip(address: str) -> Iterator[None]:
    """`SPARK_LOCAL_IP` is `address` for a JVM started inside; this process's environment is put back."""
    before = os.environ.get("SPARK_LOCAL_IP")
    os.environ["SPARK_LOCAL_IP"] = address
    try:
        yield
    finally:
        if before is None:
            del os.environ["SPARK_LOCAL_IP"]
        else:
            os.environ["SPARK_LOCAL_IP"] = before
