"""`FaultPlan`: what to break, and when — the same plan drives the simulator and the Ray executor.

A plan is a frozen list of faults plus the seed that picks unnamed targets. Both executors resolve
it once per run with `runtime.jobmaster.faults.schedule.FaultSchedule`, so a plan means the same on both:

* Where. A fault names its target task (`"vertex[subtask]"`, a bare vertex name meaning subtask
  0) or None: drawn from the *plan's* seed (`FaultPlan.seed`; the executor's `seed` plays no
  part), in plan order, identically on every executor.
* When, in logical terms. `after_records=N`: when the task has handled N records; `nth`
  (0-based): the nth acknowledgement, state write, control message, completed checkpoint or
  recovery of the run. Both count over the whole run, across execution attempts (records
  replayed after a restore count again), so a fault fires in whichever attempt its point falls.
  `at_fraction=f` of a `TaskCrash`: after `f` x the records the task handles in a failure-free
  run (an estimate: every source record spread over the task's vertex), or at the end of the
  task's input, before it reports it, if that comes first (a task behind a filter may never
  handle that many); of any other kind: once the job's sources have read `f` x their failure-free total (a
  point of the records, not of time, so the same on both executors; on Ray it is noticed within
  a heartbeat interval). `FaultPlan.random` draws `at_fraction`s, so a random fault lands
  inside the job whatever its size.
* When, in time. `at`: seconds since the job started — virtual seconds on the simulator, wall
  seconds (since the first deployment) on Ray, so the one field whose logical point differs.
* Once. Each fault fires at most once per job run.

Fault kinds, field by field (what breaks, where, when):

* `TaskCrash(task, at | after_records | at_fraction)` — the task fails (Ray: `ray.kill` of its
  actor) at that moment; the job fails over globally from the latest completed checkpoint.
* `CoordinatorCrash(at | at_fraction)` — the coordinator process dies; a new one (HA: the elected
  standby) recovers the completed checkpoints from durable storage and the job fails over.
* `LostAcknowledgement(task, nth)` — the `nth` acknowledgement `task` sends never reaches the
  coordinator; that checkpoint can only time out or be subsumed.
* `ChannelStall(task, at | at_fraction, duration)` — every message sent to any input channel of
  `task` from `at` on is held back until `at + duration` (all its inputs at once).
* `StorageWriteFailure(task, nth)` — the `nth` state write of `task` fails with a `StorageError`;
  the task declines that checkpoint (STORAGE_FAILURE).
* `LostControlMessage(kind, task, nth)` — the `nth` control message of `kind` addressed to (or,
  for "ack", sent by) `task` is lost. Kinds: "trigger" (coordinator → source: inject a barrier),
  "complete" (coordinator → task: checkpoint completed; sinks commit on it, sources waiting for
  the final checkpoint end on it), "abort" (coordinator → task: checkpoint aborted, cancel the
  snapshot), "ack" (task → coordinator; counted with `LostAcknowledgement`'s counter).
* `DuplicatedControlMessage(kind, task, nth)` — that message arrives twice, the copy one
  control delay after the original.
* `DelayedControlMessage(kind, task, nth, delay)` — that message arrives `delay` seconds late;
  control messages are not FIFO, so it may arrive after later ones (a trigger after the next
  checkpoint's, a completion after a newer one).
* `TornWrite(task, nth, keep, garble)` — the `nth` state write of `task` lands partially: it
  reports success (the handles carry the checksum of the full data), but the first file it
  writes keeps only its first `keep` fraction of bytes (`garble`: same length, the rest zeroed).
  The checkpoint may complete with it; restoring it must fail its checksum and fall back to an
  older retained checkpoint, or fail the job with an error naming the file.
* `SlowStorage(at | at_fraction, duration, factor)` — state writes started in
  `[at, at + duration)` take `factor` times longer (every task: the storage is shared).
* `ChannelDelay(task, channel, at | at_fraction, duration, delay)` — a delay spike on one input
  channel of `task` (`channel`: its input channel index; None: drawn): messages sent on it in
  `[at, at + duration)` arrive `delay` seconds later than they would; FIFO is kept, so what
  follows queues behind them. The other inputs of `task` are not affected.
* `TaskStall(task, at | at_fraction, duration)` — the task hangs (a GC pause, a stuck call): it
  takes no step, and input, control messages, timers and finished snapshot writes addressed to
  it wait, until `at + duration` (None: 1.5 x the checkpoint timeout, so a checkpoint it takes
  part in times out). Nothing detects the hang; the task resumes where it stopped.
* `CoordinatorCrashBeforeNotify(nth)` — the coordinator dies right after the `nth` completed
  checkpoint of the run became durable (its metadata is in the store) and before any task was
  told: no sink committed it yet. Recovery must restore it and commit its transactions once.
* `TaskCrashDuringRecovery(task, nth, delay)` — `delay` seconds after the `nth` recovery of the
  run began (a failover after a task or coordinator crash that restarts the job: one that fails it
  for good is no recovery), `task` fails: during the restart delay (the job redeploying) or while
  the new attempt restores and replays its state.
* `CoordinatorStorageFailure(nth, what)` — the coordinator's `nth` storage write of kind `what`
  fails with a `StorageError` (nothing is written). `what`: "counter" (the checkpoint id
  counter's persist when the coordinator takes an id: every trigger that gets that far, periodic,
  final candidate or retry — the trigger is refused with STORAGE_FAILURE), "metadata" (a
  completed checkpoint's `_metadata` write in `store.add_checkpoint` — the checkpoint aborts with
  STORAGE_FAILURE) or "any" (either, `nth` counting both in the order they happen). Counted over
  the run, across coordinator crashes and replacements; a new coordinator's own recovery of the
  counter (before it triggers) is not counted. Only storage writes count: with high availability
  the id counter lives in ZooKeeper, so "counter" faults never fire there.
* `ProcessKill(process, task, at | at_fraction)` — Ray only: the operating system kills a process
  of the job (`os.kill(pid, SIGKILL)`), as the OOM killer or an operator's `kill -9` would, so Ray
  learns of it only when the process is gone (for a `TaskCrash` the driver asks Ray to kill the
  actor). `process` (`PROCESSES`): "worker" (the worker actor hosting `task`: every task in its
  slots dies), "coordinator", "committer" (the sinks' `CommitterService`) or "blob_store" (the
  `BlobStoreService` of in-memory checkpoint storage; with storage on disk there is none and the
  fault does nothing). `task` means something for "worker" only; `at_fraction` is a progress
  point, as a `CoordinatorCrash`'s. The simulator has no processes: it refuses the kind
  (`UnsupportedFaultError`).

Both executors implement every kind but `ProcessKill`. On Ray (`runtime.ray.executor`): the driver resolves the
plan and applies crashes, stalls and coordinator crashes; the task actors apply what strikes
their records, acknowledgements, writes and output channels and report their counts, and the
coordinator actor the triggers, completions and aborts it sends and its own storage writes
(with its own `FaultSchedule`, armed with the run's counts). Where Ray differs, by necessity: a
progress point is noticed within a heartbeat interval (0.1 s), not at the exact record; a
`TaskStall` holds the actor's calls, so its heartbeats wait too (a stall longer than
`heartbeat_timeout` is detected as a hang, which the simulator's is not); a
`TaskCrashDuringRecovery` strikes once the new attempt is deployed (the driver waits out the
restart delay and deploys synchronously), never during the restart delay; a replaced
coordinator counts control messages and storage writes on from its predecessor's last poll
(exact when a fault killed it); a task actor that dies unasked loses the records and
occurrences it counted since its last heartbeat.
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


#: the control messages `LostControlMessage` & co. can break
CONTROL_MESSAGE_KINDS = ("trigger", "complete", "abort", "ack")


def _check_kind(fault: object, kind: str) -> None:
    if kind not in CONTROL_MESSAGE_KINDS:
        raise ValueError(f"{type(fault).__name__}: kind must be one of {', '.join(CONTROL_MESSAGE_KINDS)}, "
                         f"got {kind!r}")


def _check_fraction(fault: object, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{type(fault).__name__}: {name} must be within [0, 1], got {value!r}")


@dataclass(frozen=True)
class LostControlMessage:
    """The `nth` control message of `kind` to `task` ("ack": sent by it) never arrives."""

    kind: str = "trigger"
    task: str | None = None
    nth: int = 0

    def __post_init__(self) -> None:
        _check_kind(self, self.kind)


@dataclass(frozen=True)
class DuplicatedControlMessage:
    """The `nth` control message of `kind` to `task` ("ack": sent by it) arrives twice."""

    kind: str = "trigger"
    task: str | None = None
    nth: int = 0

    def __post_init__(self) -> None:
        _check_kind(self, self.kind)


@dataclass(frozen=True)
class DelayedControlMessage:
    """The `nth` control message of `kind` to `task` ("ack": sent by it) arrives `delay` s late."""

    kind: str = "trigger"
    task: str | None = None
    nth: int = 0
    delay: float = 0.05

    def __post_init__(self) -> None:
        _check_kind(self, self.kind)
        if self.delay < 0:
            raise ValueError(f"DelayedControlMessage: delay must be >= 0 seconds, got {self.delay!r}")


@dataclass(frozen=True)
class TornWrite:
    """The `nth` state write of `task` reports success but its first file keeps only its first
    `keep` fraction of bytes (`garble`: full length, the rest zeroed); restore must notice."""

    task: str | None = None
    nth: int = 0
    keep: float = 0.5
    garble: bool = False

    def __post_init__(self) -> None:
        _check_fraction(self, "keep", self.keep)


@dataclass(frozen=True)
class SlowStorage:
    """State writes started in `[at, at + duration)` take `factor` times longer."""

    at: float | None = None
    at_fraction: float | None = None
    duration: float = 0.05
    factor: float = 20.0

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise ValueError(f"SlowStorage: factor must be >= 1, got {self.factor!r}")


@dataclass(frozen=True)
class ChannelDelay:
    """Messages sent on input `channel` of `task` in `[at, at + duration)` arrive `delay` s later
    (FIFO kept: later messages queue behind them); its other inputs are not affected."""

    task: str | None = None
    channel: int | None = None
    at: float | None = None
    at_fraction: float | None = None
    duration: float = 0.05
    delay: float = 0.02

    def __post_init__(self) -> None:
        if self.delay < 0 or self.duration < 0:
            raise ValueError(f"ChannelDelay: delay and duration must be >= 0 seconds, got {self!r}")


@dataclass(frozen=True)
class TaskStall:
    """`task` hangs from `at` for `duration` seconds (None: 1.5 x the checkpoint timeout): no
    step, and what is addressed to it waits."""

    task: str | None = None
    at: float | None = None
    at_fraction: float | None = None
    duration: float | None = None


@dataclass(frozen=True)
class CoordinatorCrashBeforeNotify:
    """The coordinator dies after the `nth` completed checkpoint is durable, before it commits
    the sinks' output of it or any task hears of it."""

    nth: int = 0


@dataclass(frozen=True)
class TaskCrashDuringRecovery:
    """`task` fails `delay` seconds after the `nth` recovery (failover) of the run began."""

    task: str | None = None
    nth: int = 0
    delay: float = 0.0


#: what a `CoordinatorStorageFailure` strikes: the id counter's writes, the metadata writes, or both
COORDINATOR_WRITE_KINDS = ("counter", "metadata", "any")


@dataclass(frozen=True)
class CoordinatorStorageFailure:
    """The coordinator's `nth` storage write of kind `what` ("counter": the checkpoint id
    counter's persist; "metadata": a completed checkpoint's metadata; "any": either), counted over
    the run, fails with a `StorageError`."""

    nth: int = 0
    what: str = "any"

    def __post_init__(self) -> None:
        if not isinstance(self.nth, int) or isinstance(self.nth, bool) or self.nth < 0:
            raise ValueError(f"CoordinatorStorageFailure: nth must be an integer >= 0 (0-based), got {self.nth!r}")
        if self.what not in COORDINATOR_WRITE_KINDS:
            raise ValueError(f"CoordinatorStorageFailure: what must be one of {', '.join(COORDINATOR_WRITE_KINDS)}, "
                             f"got {self.what!r}")


#: the processes a `ProcessKill` can strike
PROCESSES = ("worker", "coordinator", "committer", "blob_store")


@dataclass(frozen=True)
class ProcessKill:
    """Ray only: the process of `process` ("worker": the one hosting `task`) is killed with
    SIGKILL at `at` / `at_fraction`, without Ray being told."""

    process: str = "worker"
    task: str | None = None
    at: float | None = None
    at_fraction: float | None = None

    def __post_init__(self) -> None:
        if self.process not in PROCESSES:
            raise ValueError(f"ProcessKill: process must be one of {', '.join(PROCESSES)}, got {self.process!r}")


Fault = (TaskCrash | CoordinatorCrash | LostAcknowledgement | ChannelStall | StorageWriteFailure
         | LostControlMessage | DuplicatedControlMessage | DelayedControlMessage | TornWrite | SlowStorage
         | ChannelDelay | TaskStall | CoordinatorCrashBeforeNotify | TaskCrashDuringRecovery
         | CoordinatorStorageFailure | ProcessKill)


class UnsupportedFaultError(ValueError):
    """An executor was given a fault kind it does not implement (names the kind)."""


def check_supported(plan: FaultPlan, supported: tuple[type, ...], executor: str, other: str) -> None:
    """Refuse `plan` if it holds a fault kind `executor` does not implement.

    Raises:
        UnsupportedFaultError: naming the first such fault, the kinds `executor` implements and
            the `other` executor to run the plan on.
    """
    for fault in plan.faults:
        if not isinstance(fault, supported):
            raise UnsupportedFaultError(
                f"the {executor} executor does not implement fault kind {type(fault).__name__} ({fault!r}); "
                f"it implements {', '.join(k.__name__ for k in supported)}; run this plan on executor={other!r}"
            )


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
        lost_messages: int = 0,
        duplicated_messages: int = 0,
        delayed_messages: int = 0,
        torn_writes: int = 0,
        slow_storage: int = 0,
        channel_delays: int = 0,
        task_stalls: int = 0,
        notify_crashes: int = 0,
        recovery_crashes: int = 0,
        coordinator_storage_failures: int = 0,
        process_kills: int = 0,
    ) -> FaultPlan:
        """Draw faults from `seed`: each count is how many faults of one kind, at random moments
        on random tasks (`notify_crashes`: `CoordinatorCrashBeforeNotify`, `recovery_crashes`:
        `TaskCrashDuringRecovery`, `task_stalls`: `TaskStall`, `channel_delays`: `ChannelDelay`,
        `coordinator_storage_failures`: `CoordinatorStorageFailure`, `process_kills`: `ProcessKill`, Ray only).

        Kinds are drawn in a fixed order, the newer ones after the older ones, so a plan drawn
        without the newer kinds is the one it always was.
        """
        counts = {
            "crashes": crashes, "lost_acks": lost_acks, "stalls": stalls, "storage_failures": storage_failures,
            "coordinator_crashes": coordinator_crashes, "lost_messages": lost_messages,
            "duplicated_messages": duplicated_messages, "delayed_messages": delayed_messages,
            "torn_writes": torn_writes, "slow_storage": slow_storage, "channel_delays": channel_delays,
            "task_stalls": task_stalls, "notify_crashes": notify_crashes, "recovery_crashes": recovery_crashes,
            "coordinator_storage_failures": coordinator_storage_failures, "process_kills": process_kills,
        }
        negative = [name for name, count in counts.items() if count < 0]
        if negative:
            raise ValueError(f"FaultPlan.random: fault counts must be >= 0, got {negative[0]}={counts[negative[0]]}")
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
        # newer kinds: drawn only when asked for, after every older kind
        for _ in range(lost_messages):
            faults.append(LostControlMessage(rng.choice(CONTROL_MESSAGE_KINDS), nth=rng.randrange(0, 8)))
        for _ in range(duplicated_messages):
            faults.append(DuplicatedControlMessage(rng.choice(CONTROL_MESSAGE_KINDS), nth=rng.randrange(0, 8)))
        for _ in range(delayed_messages):
            faults.append(DelayedControlMessage(rng.choice(CONTROL_MESSAGE_KINDS), nth=rng.randrange(0, 8),
                                                delay=round(rng.uniform(0.001, 0.05), 4)))
        for _ in range(torn_writes):
            faults.append(TornWrite(nth=rng.randrange(0, 8), keep=round(rng.uniform(0.0, 0.9), 2),
                                    garble=rng.random() < 0.5))
        for _ in range(slow_storage):
            faults.append(SlowStorage(at_fraction=round(rng.uniform(0.0, 0.9), 4),
                                      duration=round(rng.uniform(0.005, 0.2), 4),
                                      factor=float(rng.choice((5, 20, 100)))))
        for _ in range(channel_delays):
            faults.append(ChannelDelay(at_fraction=round(rng.uniform(0.0, 0.9), 4),
                                       duration=round(rng.uniform(0.005, 0.1), 4),
                                       delay=round(rng.uniform(0.002, 0.05), 4)))
        for _ in range(task_stalls):
            faults.append(TaskStall(at_fraction=round(rng.uniform(0.02, 0.9), 4)))
        for _ in range(notify_crashes):
            faults.append(CoordinatorCrashBeforeNotify(nth=rng.randrange(0, 6)))
        for _ in range(recovery_crashes):
            faults.append(TaskCrashDuringRecovery(nth=rng.randrange(0, 2), delay=round(rng.uniform(0.0, 0.003), 5)))
        for _ in range(coordinator_storage_failures):
            # early writes, or anywhere in a longer run (a job's last trigger is its final checkpoint's)
            bound = rng.choice((4, 40))
            faults.append(CoordinatorStorageFailure(nth=rng.randrange(0, bound), what=rng.choice(COORDINATOR_WRITE_KINDS)))
        for _ in range(process_kills):
            faults.append(ProcessKill(process=rng.choice(PROCESSES), at_fraction=round(rng.uniform(0.02, 0.95), 4)))
        drawn = "".join(f", {name}={count}" for name, count in counts.items() if count and name != "crashes")
        return cls(tuple(faults), seed, f"FaultPlan.random(seed={seed}, crashes={crashes}{drawn})")

    def __bool__(self) -> bool:
        return bool(self.faults)

    def __repr__(self) -> str:
        if self.description:
            return self.description
        return f"FaultPlan.of({''.join(f'{f!r}, ' for f in self.faults)}seed={self.seed})"


def resolve_task(name: str | None, task_names: list[str], rng: random.Random) -> str:
    """The task a fault targets: its explicit name (a bare vertex means subtask 0) or a draw."""
    if name is None:
        return rng.choice(sorted(task_names))
    if name in task_names:
        return name
    if f"{name}[0]" in task_names:
        return f"{name}[0]"
    raise ValueError(f"fault names unknown task {name!r}; tasks are: {', '.join(sorted(task_names))}")
