"""What a finished job hands back: committed output, checkpoint stats, metrics, final state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.jobmaster.committer.collect import CollectCommitter, Record
from vocabulary.errors import SuppressRestartsError
from vocabulary.histogram import LatencyHistogram
from vocabulary.task_metrics import StepTimes


def suppresses_restarts(exc: BaseException | None) -> bool:
    """Whether `exc` (or a remote error standing for one) must fail the job without a restart."""
    return isinstance(exc, SuppressRestartsError) or bool(getattr(exc, "suppress_restarts", False))


class JobFailedError(RuntimeError):
    """The job failed for good (restart attempts exhausted, or a non-recoverable error)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class GcPauses:
    """One process's cyclic garbage collections of the full heap (generation 2) during a run.

    Attributes:
        frozen: objects exempt from every collection's scan (`gc.freeze`: the start-up heap).
        full_collections: generation-2 collections since the process froze its heap.
        longest: seconds of the longest of them (0.0 without any).
        total: their seconds summed.
    """

    frozen: int
    full_collections: int = 0
    longest: float = 0.0
    total: float = 0.0


#: `JobMetrics.worker_calls`: the key prefix of a control call's items, the key of the
#: acknowledgement reports a worker sent, and of the data calls that came as socket frames
CONTROL_ITEM = "control: "
REPORTS_SENT = "report (sent)"
DATA_FRAMES = "data frames (socket)"
CONTROL_FRAMES = "control frames (socket)"


@dataclass
class JobMetrics:
    """Run metrics; times are virtual seconds on the simulator, wall seconds on Ray."""

    records_in: int = 0  # records read by sources (replays included)
    records_out: int = 0  # records committed by sinks
    #: whether a sink stages in the committer, so each completed checkpoint is committed with one
    #: call (`JobGraph.stages_in_committer`; not when every sink is a `DiscardingSink`)
    global_commits: bool = True
    duration: float = 0.0
    restarts: int = 0
    #: end-to-end latencies of the records that reached a sink task, merged over tasks: exact
    #: count/min/max/mean, percentiles within 1 % (`vocabulary.histogram`); `len()` is the count
    latencies: LatencyHistogram = field(default_factory=LatencyHistogram, repr=False)
    #: stamped records that reached a sink task within the latency warm-up
    #: (`StreamEnvironment.set_latency_warmup`): not in `latencies`
    latency_warmup_records: int = 0
    events: int = 0
    #: earliest `created_at` stamp of a record that reached a sink task (None: no stamps)
    first_created_at: float | None = None
    #: when the last stamped record reached its sink task
    last_arrival_at: float | None = None
    #: when the last sink transaction was committed, i.e. the job's output became visible (wall
    #: seconds, Ray only; None on the simulator)
    last_commit_at: float | None = None
    #: when every task of the first attempt was deployed and started, and `duration` began (wall
    #: seconds, Ray only; None on the simulator, whose job starts at 0)
    running_since: float | None = None
    #: buffer debloating: per task with inputs, the buffer size (records) it last asked its
    #: senders for (empty without debloating)
    buffer_sizes: dict[str, int] = field(default_factory=dict)
    #: the same tasks: the smallest buffer size each asked for in its last attempt (the latest
    #: can be the job's own again once a drain made the measured throughput high)
    smallest_buffer_sizes: dict[str, int] = field(default_factory=dict)
    #: per task ("vertex[i]"), the control calls between it and the coordinator in its last
    #: execution attempt, by kind: received "trigger", "complete" (a non-final completion),
    #: "complete_final", "abort"; sent "ack", "decline" (`Task.control_calls`). Completions a
    #: task learned from a barrier or trigger are no call and not counted
    control_calls: dict[str, dict[str, int]] = field(default_factory=dict)
    #: per task ("vertex[i]"), what its steps cost (`vocabulary.task_metrics`; calibration input)
    tasks: dict[str, StepTimes] = field(default_factory=dict)
    #: Ray: calls the coordinator actors sent (`control`: triggers and notifications, batched per
    #: worker; `commit`) and received (`report`: acknowledgements, batched per worker), and the
    #: messages they carried (`control messages`, `acks`); `report frames`: the reports that came
    #: as socket frames (`data_transport="socket"`), not Ray calls, and `control frames` the
    #: `control` batches sent so (counted apart from `control`); empty on the simulator
    coordinator_calls: dict[str, int] = field(default_factory=dict)
    #: CPU seconds of the control-path services, by name: on Ray the processes of the
    #: coordinator actors ("coordinator") and of the committer service ("committer"); on the
    #: simulator what `CostModel.checkpoint_cpu` charged ("control"). Calibration input
    service_cpu: dict[str, float] = field(default_factory=dict)
    #: Ray: per actor process (a worker named by the subtasks it hosts, "count[0]" or
    #: "Source: gen[0], count[0]"; "coordinator"; "committer"), its full garbage collections in
    #: the run (a pause of every task the process hosts); empty on the simulator
    gc_pauses: dict[str, GcPauses] = field(default_factory=dict)
    #: Ray: per worker process (named as in `gc_pauses`) of the last attempt, the calls it received
    #: by the subtask method they invoked (heartbeats, pushes, returned credits: a call each; a
    #: `control` call counts as "control", each of its items as `CONTROL_ITEM` + its method), the
    #: acknowledgement reports it sent (`REPORTS_SENT`) and, with `data_transport="socket"`, how
    #: many of the data calls came as socket frames (`DATA_FRAMES`) and how many of the `control`
    #: calls (`CONTROL_FRAMES`); empty on the simulator
    worker_calls: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.records_in / self.duration if self.duration > 0 else 0.0

    @property
    def end_to_end_throughput(self) -> float | None:
        """Stamped records that reached a sink task over the span from the first one's creation
        to the last one's arrival (deployment and teardown excluded; replays counted again)."""
        if self.first_created_at is None or self.last_arrival_at is None:
            return None
        span = self.last_arrival_at - self.first_created_at
        return (len(self.latencies) + self.latency_warmup_records) / span if span > 0 else None

    def add_task_span(self, first_created_at: float | None, last_arrival_at: float | None) -> None:
        """Widen the span with one task's (None: that task saw no stamped record)."""
        if first_created_at is not None:
            self.first_created_at = (first_created_at if self.first_created_at is None
                                     else min(self.first_created_at, first_created_at))
        if last_arrival_at is not None:
            self.last_arrival_at = (last_arrival_at if self.last_arrival_at is None
                                    else max(self.last_arrival_at, last_arrival_at))

    def calls_per_checkpoint(self, completed: int) -> float | None:
        """Control calls per completed checkpoint (`completed` of them): every trigger,
        acknowledgement, decline, abort and non-final completion notification of `control_calls`,
        plus the one global commit per completed checkpoint (`commit_checkpoint`, when there are
        `global_commits`); the final checkpoint's notifications (one per task, a fixed cost per
        job) are left out. None when nothing completed or no task reported its calls."""
        if completed <= 0 or not self.control_calls:
            return None
        calls = sum(n for kinds in self.control_calls.values() for kind, n in kinds.items() if kind != "complete_final")
        return (calls + (completed if self.global_commits else 0)) / completed

    def latency_percentile(self, q: float) -> float | None:
        """The `q`-th latency percentile (0-100, nearest rank; within 1 %), None without stamps."""
        return self.latencies.percentile(q)


@dataclass(frozen=True)
class RestoredFrom:
    """The checkpoint of an earlier execution a run started from (`env.restore_from`)."""

    #: None: no checkpoint of the job had completed, so the run started from the beginning (`note`)
    checkpoint_id: int | None
    #: the run that took it (None: not recorded)
    run_id: str | None
    #: operator -> its parallelism when the checkpoint was taken
    parallelism: dict[str, int]
    #: why a restore started from the beginning
    note: str = ""

    @classmethod
    def of(cls, completed: Any) -> RestoredFrom:
        """What `completed` (a `CompletedCheckpoint`) says about itself."""
        return cls(completed.checkpoint_id, completed.run_id, dict(completed.parallelism))

    def describe(self, parallelism: dict[str, int]) -> str:
        """One line: which run and checkpoint, and each operator's parallelism then and now
        (`parallelism`: the operators of the job that restores it)."""
        if self.checkpoint_id is None:
            return f"the beginning: {self.note}"
        run = f"run {self.run_id}" if self.run_id else "a run that recorded no id"
        changes = [f"{op} {then} -> {parallelism[op]}" for op, then in self.parallelism.items()
                   if op in parallelism and parallelism[op] != then]
        if changes:
            scale = "rescaled: " + ", ".join(changes)
        else:
            scale = "parallelism " + ", ".join(f"{op} {n}" for op, n in self.parallelism.items()) + " as then"
        return f"checkpoint {self.checkpoint_id} of {run} ({scale})"


@dataclass
class JobResult:
    """Returned by `env.execute(...)`."""

    job_name: str
    executor: str
    seed: int | None
    committer: CollectCommitter
    #: `checkpoint.stats.CheckpointStats` of the run's checkpoints, by id: the latest 10,000 per
    #: coordinator (`checkpoint.stats.DEFAULT_MAX_HISTORY`); a long job's memory stays bounded
    checkpoints: list[Any]
    metrics: JobMetrics
    final_state: dict[str, dict[str, dict[Any, Any]]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: the checkpoint each deployment restored: the one `restore_from` gave (first, when given),
    #: then one per restart (None: from the beginning)
    restored_checkpoints: list[int | None] = field(default_factory=list)
    #: the earlier execution's checkpoint this run started from (`env.restore_from`; None: none)
    restored_from: RestoredFrom | None = None
    #: operator -> its parallelism in this run
    parallelism: dict[str, int] = field(default_factory=dict)
    #: how the coordinators were made highly available (e.g. "ZooKeeper at 127.0.0.1:2181, cluster
    #: id 'c'"; None: standalone), and how many times a standby took over
    high_availability: str | None = None
    promotions: int = 0
    #: how many times an injected fault (`CoordinatorCrash`, `CoordinatorCrashBeforeNotify`) killed
    #: the checkpoint coordinator; on Ray, one that struck while a failover was cancelling the
    #: attempt is counted here though `failures` does not list it (that failover covers it)
    coordinator_crashes: int = 0
    trace: list[tuple] = field(default_factory=list, repr=False)
    replay: str = ""
    #: this run's id, recorded in the metadata of every checkpoint it took (`restore_from(dir,
    #: run_id=...)` names it; `barrierflow checkpoints ls` shows it)
    run_id: str | None = None

    def output(self, name: str) -> list[Record]:
        """Committed records of sink `name` (never uncommitted ones)."""
        if name not in self.sink_names:
            raise KeyError(f"no sink named {name!r}; sinks: {', '.join(self.sink_names) or '(none)'}")
        return self.committer.output(name)

    sink_names: list[str] = field(default_factory=list)

    @property
    def completed_checkpoints(self) -> list[Any]:
        return [c for c in self.checkpoints if c.completed]

    @property
    def aborted_checkpoints(self) -> list[Any]:
        return [c for c in self.checkpoints if not c.completed]

    @property
    def restarts(self) -> int:
        return self.metrics.restarts
