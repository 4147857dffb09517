"""The project's local Spark sessions are safe by default: `spark_bridge.local_session` binds every
port the Spark JVM opens to loopback. Before it, `SparkSession.builder.master("local[2]")` (the test
fixture and the Spark benchmark) left the driver's RPC and block-manager ports on the machine's
address, reachable from the network."""

from __future__ import annotations

import os

import psutil
import pytest

from runtime.ray.cluster import is_loopback
from spark_bridge.io.session import LOOPBACK_CONFIG, _local_ip, local_session

pytestmark = pytest.mark.spark


def _spark_jvms() -> list[psutil.Process]:
    """The JVMs this Python process started (PySpark's gateway: `spark-submit ... pyspark-shell`)."""
    children = psutil.Process(os.getpid()).children(recursive=True)
    return [p for p in children if p.name() == "java" and "pyspark-shell" in " ".join(p.cmdline())]


def test_every_port_of_the_local_spark_session_is_on_loopback(spark) -> None:
    spark.range(10).count()  # the driver and block manager are up and serving
    jvms = _spark_jvms()
    assert jvms, "found no Spark JVM among this process's children"
    listening = [(p.pid, c.laddr.ip, c.laddr.port) for p in jvms for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    # the Py4J gateway, the driver's RPC endpoint and its block manager at least: the check saw them
    assert len(listening) >= 3, listening
    exposed = [entry for entry in listening if not is_loopback(entry[1])]
    assert not exposed, f"the Spark JVM listens beyond loopback: {exposed}"
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"


@pytest.mark.parametrize("key", sorted(LOOPBACK_CONFIG))
def test_local_session_refuses_to_override_a_loopback_setting(key: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        local_session(config={key: "0.0.0.0" if "ui" not in key else "true"})


def test_local_session_refuses_no_cores() -> None:
    with pytest.raises(ValueError, match="cores must be >= 1"):
        local_session(cores=0)


def test_the_jvm_is_told_its_local_address_and_this_process_keeps_its_environment(spark, monkeypatch) -> None:
    jvm = _spark_jvms()[0]
    assert jvm.environ().get("SPARK_LOCAL_IP") == "127.0.0.1"  # so Spark warns of no other address
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    with _local_ip("127.0.0.1"):
        assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert os.environ["SPARK_LOCAL_IP"] == "10.1.2.3"
    monkeypatch.delenv("SPARK_LOCAL_IP")
    with _local_ip("127.0.0.1"):
        pass
    assert "SPARK_LOCAL_IP" not in os.environ
