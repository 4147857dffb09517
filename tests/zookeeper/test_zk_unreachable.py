"""A ZooKeeper that cannot be reached fails within the operation timeout, naming host:port and
what a TCP probe found: a closed port, and a port that accepts but never answers (kazoo's
own `start(timeout)` would wait another session timeout for that one)."""

from __future__ import annotations

import time

import pytest

from checkpoint.io.ha_services import create_recovery_factory
from checkpoint.io.recovery import (
    DEFAULT_OPERATION_TIMEOUT,
    HighAvailabilityConfig,
    HighAvailabilityError,
)
from checkpoint.io.zookeeper_client import close_session

BOUND = 15.0  # seconds: generous, the timeouts below are 1 s (session timeout 10 s)


def connect(hosts: str) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(HighAvailabilityError) as info, create_recovery_factory(
            "zookeeper", hosts=hosts, session_timeout=10.0, operation_timeout=1.0) as factory:
        factory.create_id_counter("job").start()
    return info.value, time.monotonic() - started


@pytest.mark.slow
def test_a_closed_port_fails_naming_it_and_the_refusal(closed_port: int) -> None:
    error, elapsed = connect(f"127.0.0.1:{closed_port}")
    assert f"ZooKeeper at 127.0.0.1:{closed_port} within 1 s" in str(error)
    assert "refused" in str(error).lower(), error
    assert elapsed < BOUND


@pytest.mark.slow
def test_a_port_that_never_answers_fails_within_the_operation_timeout(silent_port: int) -> None:
    error, elapsed = connect(f"127.0.0.1:{silent_port}")
    assert f"127.0.0.1:{silent_port} accepts connections but did not complete a ZooKeeper handshake" in str(error)
    assert elapsed < 5.0, f"{elapsed:.1f} s: connecting must not wait for the session timeout (10 s)"


@pytest.mark.slow
def test_closing_a_dead_leader_session_is_bounded_too(silent_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(HighAvailabilityError, match=f"127.0.0.1:{silent_port}"):
        close_session(f"127.0.0.1:{silent_port}", (1234, b"\0" * 16), timeout=1.0)
    assert time.monotonic() - started < 5.0


def test_the_operation_timeout_is_an_option() -> None:
    assert HighAvailabilityConfig.of("zookeeper", hosts="h:1").operation_timeout == DEFAULT_OPERATION_TIMEOUT == 5.0
    assert HighAvailabilityConfig.of("zookeeper", hosts="h:1", operation_timeout=2).operation_timeout == 2.0
    with pytest.raises(ValueError, match="operation_timeout must be > 0"):
        HighAvailabilityConfig.of("zookeeper", hosts="h:1", operation_timeout=0)
