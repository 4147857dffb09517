"""`create_recovery_factory`: the high-availability services for a recovery mode.

Apart from `checkpoint/io/recovery.py` because the ZooKeeper services (`checkpoint/io/zookeeper.py`) build
on that module's interfaces; ZooKeeper is imported only when asked for, so STANDALONE never needs
kazoo (Flink's `HighAvailabilityServicesUtils`).
"""

from __future__ import annotations

from checkpoint.io.recovery import (
    DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_SESSION_TIMEOUT,
    CheckpointRecoveryFactory,
    RecoveryMode,
    StandaloneCheckpointRecoveryFactory,
)


def create_recovery_factory(mode: RecoveryMode | str = RecoveryMode.STANDALONE, *,
                            hosts: str | None = None, cluster_id: str = "default",
                            session_timeout: float = DEFAULT_SESSION_TIMEOUT,
                            operation_timeout: float = DEFAULT_OPERATION_TIMEOUT) -> CheckpointRecoveryFactory:
    """The HA services for `mode`.

    Args:
        mode: STANDALONE or ZOOKEEPER (or their names).
        hosts: ZooKeeper connection string (`"host:port,..."`), required for ZOOKEEPER.
        cluster_id: separates clusters sharing one ZooKeeper (`/barrierflow/<cluster_id>/...`).
        session_timeout: ZooKeeper session timeout, seconds (the server may clamp it).
        operation_timeout: bound on every ZooKeeper call, seconds.

    Raises:
        ValueError: an unknown mode, a missing `hosts`, or a bad `cluster_id`/timeout.
    """
    mode = RecoveryMode.parse(mode)
    if mode is RecoveryMode.STANDALONE:
        return StandaloneCheckpointRecoveryFactory()
    if not isinstance(hosts, str) or not hosts.strip():
        raise ValueError(f"recovery mode ZOOKEEPER needs hosts='host:port[,host:port...]', got {hosts!r}")
    from checkpoint.io.zookeeper import ZooKeeperCheckpointRecoveryFactory

    return ZooKeeperCheckpointRecoveryFactory(hosts, cluster_id=cluster_id, session_timeout=session_timeout,
                                              operation_timeout=operation_timeout)
