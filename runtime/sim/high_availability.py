"""The simulator's high-availability services: two coordinator contenders in a leader election,
in memory or on a real ZooKeeper server.

`env.set_high_availability("zookeeper")` without `hosts` gives the in-memory services
(`checkpoint/io/ha_memory.py`: ZooKeeper's role played inside the process, no threads, no time).
With `hosts` the simulator uses that server, as the Ray executor does: each contender has its own
ZooKeeper session (`ZooKeeperCheckpointRecoveryFactory`), the first one started is awaited as
leader before the second joins, checkpoint ids come from the server's shared counter and completed
checkpoints are registered in its store, fenced by the leader's election node. An unreachable
server fails the run before it starts, within `operation_timeout`, naming the hosts.

Why a real server keeps the run deterministic: the simulator calls ZooKeeper synchronously from
its single thread and waits for every outcome it depends on (the first leader at start, the
standby's leadership after a coordinator crash) before virtual time moves on, so the order of
events is the same as in memory. What the server brings from outside the run shows only in the
checkpoint ids (its counter continues from earlier runs of the job under the same `cluster_id`)
and in failures: a session lost mid-run fails the checkpoint it was registering (STORAGE_FAILURE,
as on Ray), it does not elect the standby.

A crash of the leader ends its session (its election node goes at once), the standby is awaited
as leader and takes over the store and counter, and a new standby joins (a replacement process,
as Ray starts one).
"""

from __future__ import annotations

from typing import Any

from checkpoint.io.ha_memory import InMemoryHighAvailabilityServices
from checkpoint.io.recovery import HighAvailabilityConfig, HighAvailabilityError

#: contenders in the election: the leader and one standby
CONTENDERS = 2


class SimHighAvailability:
    """The contenders of one simulated job (see the module docstring)."""

    def __init__(self, config: HighAvailabilityConfig, job_id: str) -> None:
        self.config = config
        self.job_id = job_id
        self.hosts = config.hosts
        self._memory = InMemoryHighAvailabilityServices() if not config.hosts else None
        #: per contender: (its services, its election), in join order
        self.contenders: list[tuple[Any, Any]] = []
        self._joined = 0
        try:
            for _ in range(CONTENDERS):
                self._join()
        except BaseException:
            self.close()
            raise

    @property
    def uses_server(self) -> bool:
        """Whether the services are a real ZooKeeper server's (`hosts` given)."""
        return self._memory is None

    def _join(self) -> None:
        """One more contender; the first is awaited as leader."""
        contender_id = f"coordinator-{self._joined}"
        self._joined += 1
        services = self._memory if self._memory is not None else self._server_services()
        election = services.create_leader_election(self.job_id, contender_id)
        self.contenders.append((services, election))
        election.start()
        if len(self.contenders) == 1:
            self._await_leader(election)

    def _server_services(self) -> Any:
        from checkpoint.io.ha_services import create_recovery_factory

        config = self.config
        services = create_recovery_factory(config.mode, hosts=config.hosts, cluster_id=config.cluster_id,
                                           session_timeout=config.session_timeout,
                                           operation_timeout=config.operation_timeout)
        services.client  # connect now: an unreachable server fails here, naming the hosts  # noqa: B018
        return services

    def _await_leader(self, election: Any) -> None:
        # a contender of an earlier, dead process may hold the election until its session expires
        within = self.config.operation_timeout + self.config.session_timeout
        if not election.await_leadership(within):
            leader = getattr(election, "current_leader", lambda: None)()
            raise HighAvailabilityError(f"contender {election.contender_id!r} of job {self.job_id!r} did not become "
                                        f"leader in ZooKeeper at {self.hosts} within {within:g} s (leader now: "
                                        f"{leader!r})")

    def leader(self) -> tuple[Any, Any]:
        """(services, election) of the leading contender."""
        for services, election in self.contenders:
            if election.is_leader:
                return services, election
        raise HighAvailabilityError(f"no coordinator of job {self.job_id!r} leads"
                                    + (f" in ZooKeeper at {self.hosts}" if self.hosts else ""))

    def crash_leader(self) -> str:
        """The leader's process died: its session ends, the standby leads (awaited), a new
        standby joins. Returns the new leader's contender id."""
        services, election = self.leader()
        if self._memory is not None:
            election.expire_session()  # in memory it rejoins at the back, as a restarted process
        else:
            self.contenders.remove((services, election))
            services.close()  # the session ends: the election node goes at once
            self._await_leader(self.contenders[0][1])
            self._join()
        return self.leader()[1].contender_id

    def close(self) -> None:
        """End every contender's session (the run is over)."""
        for services, election in self.contenders:
            election.stop()
            if services is not self._memory:
                services.close()
        self.contenders.clear()
