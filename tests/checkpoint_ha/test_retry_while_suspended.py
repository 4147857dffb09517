"""A ZooKeeper read the driver needs to recover (the next checkpoint id, the restore plan) is
retried while the coordinator's client is suspended, within the session timeout; any other error,
or a suspension that outlasts it, stands (`runtime.ray.coordinator_handover.retry_while_suspended`).

The bug it fixes: a full suite run restarted ZooKeeper mid-job (`test_zookeeper_restart_mid_job_...`),
a failover came while the coordinator's client was still SUSPENDED, and the first read of the
recovery raised `HighAvailabilityError` and failed the job, though the client reconnected a moment
later with its session intact."""

from __future__ import annotations

import pytest
from kazoo.client import KazooState

from checkpoint.io.recovery import HighAvailabilityError, ZooKeeperSuspendedError
from checkpoint.io.zookeeper_client import require_connected
from runtime.ray.coordinator_handover import SUSPENDED_RETRY_DELAY, retry_while_suspended


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def failing(errors: list[BaseException]) -> object:
    def read() -> str:
        if errors:
            raise errors.pop(0)
        return "read"
    return read


def test_a_read_is_retried_while_suspended_and_returns_once_reconnected() -> None:
    clock = Clock()
    read = failing([ZooKeeperSuspendedError("suspended")] * 5)
    assert retry_while_suspended(read, 10.0, clock=clock, sleep=clock.sleep) == "read"
    assert clock.now == pytest.approx(5 * SUSPENDED_RETRY_DELAY)


def test_a_suspension_past_the_session_timeout_raises() -> None:
    clock = Clock()
    read = failing([ZooKeeperSuspendedError("suspended")] * 1000)
    with pytest.raises(ZooKeeperSuspendedError):
        retry_while_suspended(read, 1.0, clock=clock, sleep=clock.sleep)
    assert 1.0 <= clock.now <= 1.0 + 2 * SUSPENDED_RETRY_DELAY


def test_other_errors_are_not_retried() -> None:
    clock = Clock()
    with pytest.raises(HighAvailabilityError, match="lost"):
        retry_while_suspended(failing([HighAvailabilityError("lost")]), 10.0, clock=clock, sleep=clock.sleep)
    assert clock.now == 0.0


@pytest.mark.parametrize(("state", "error"), [(KazooState.SUSPENDED, ZooKeeperSuspendedError),
                                              (KazooState.LOST, HighAvailabilityError)])
def test_only_a_suspended_client_is_worth_waiting_for(state: str, error: type) -> None:
    class Client:
        pass

    client = Client()
    client.state = state
    with pytest.raises(HighAvailabilityError) as raised:
        require_connected(client, "read the counter")  # type: ignore[arg-type]
    assert type(raised.value) is error and "read the counter" in str(raised.value)
