"""`FaultPlan`: what to break, and when — the same plan drives the simulator and the Ray executor.

A plan is a frozen list of faults. Each fault names its target task (`"vertex[subtask]"`, a bare
vertex name meaning subtask 0, or None = chosen by the executor from the plan's seed) and its
moment: a time in seconds since the job started (virtual on the simulator, wall clock on Ray),
or a number of records the task has handled (`after_records`), or a fraction of the records the
task is expected to handle in a failure-free run (`at_fraction`, what `FaultPlan.random` draws,
so a random crash lands inside the job whatever its size).

Each fault fires at most once per job run, across restarts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TaskCrash:
    """The task fails (on Ray: `ray.kill` of its actor); the job fails over."""

    task: str | None = None
    at: float | None = None
    after_records: int | None = None
    at_fraction: float | None = None


@dataclass(frozen=True)
class CoordinatorCrash:
    """The coordinator dies; a new one recovers from the completed-checkpoint store."""

    at: float | None = None
    at_fraction: float | None = None


@dataclass(frozen=True)
class LostAcknowledgement:
    """The `nth` acknowledgement sent by `task` (0-based, counted over the run) never arrives."""

    task: str | None = None
    nth: int = 0


@dataclass(frozen=True)
class ChannelStall:
    """Every message on the input channels of `task` is held back `duration` seconds from `at`."""

    task: str | None = None
    at: float | None = None
    at_fraction: float | None = None
    duration: float = 0.05


@dataclass(frozen=True)
class StorageWriteFailure:
    """The `nth` state write of `task` fails (the task declines with STORAGE_FAILURE)."""

    task: str | None = None
    nth: int = 0


Fault = TaskCrash | CoordinatorCrash | LostAcknowledgement | ChannelStall | StorageWriteFailure


@dataclass(frozen=True)
class FaultPlan:
    """An immutable list of faults plus the seed that picks unnamed targets.

    `FaultPlan()` injects nothing.
    """

    faults: tuple[Fault, ...] = ()
    seed: int = 0
    description: str = field(default="", compare=False)

    @classmethod
    def of(cls, *faults: Fault, seed: int = 0) -> FaultPlan:
        return cls(tuple(faults), seed)

    @classmethod
    def random(
        cls,
        seed: int,
        crashes: int = 1,
        *,
        lost_acks: int = 0,
        stalls: int = 0,
        storage_failures: int = 0,
        coordinator_crashes: int = 0,
    ) -> FaultPlan:
        """Draw faults from `seed`: crashes at random fractions of the run, on random tasks."""
        if min(crashes, lost_acks, stalls, storage_failures, coordinator_crashes) < 0:
            raise ValueError("FaultPlan.random: fault counts must be >= 0")
        rng = random.Random(seed)
        faults: list[Fault] = []
        for _ in range(crashes):
            faults.append(TaskCrash(at_fraction=round(rng.uniform(0.02, 0.98), 4)))
        for _ in range(lost_acks):
            faults.append(LostAcknowledgement(nth=rng.randrange(0, 12)))
        for _ in range(stalls):
            faults.append(ChannelStall(at_fraction=round(rng.uniform(0.0, 0.9), 4),
                                       duration=round(rng.uniform(0.005, 0.2), 4)))
        for _ in range(storage_failures):
            faults.append(StorageWriteFailure(nth=rng.randrange(0, 8)))
        for _ in range(coordinator_crashes):
            faults.append(CoordinatorCrash(at_fraction=round(rng.uniform(0.05, 0.95), 4)))
        return cls(tuple(faults), seed, f"FaultPlan.random(seed={seed}, crashes={crashes})")

    def __bool__(self) -> bool:
        return bool(self.faults)

    def __repr__(self) -> str:
        return self.description or f"FaultPlan({list(self.faults)!r}, seed={self.seed})"


def resolve_task(name: str | None, task_names: list[str], rng: random.Random) -> str:
    """The task a fault targets: its explicit name (a bare vertex means subtask 0) or a draw."""
    if name is None:
        return rng.choice(sorted(task_names))
    if name in task_names:
        return name
    if f"{name}[0]" in task_names:
        return f"{name}[0]"
    raise ValueError(f"fault names unknown task {name!r}; tasks are: {', '.join(sorted(task_names))}")
