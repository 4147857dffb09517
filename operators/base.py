"""The operator contract: what a task's operator chain is made of.

A task runs a chain of `StreamOperator`s. Records travel through the chain one input
buffer at a time, so per-buffer costs stay off the per-record path: as lists of dicts
(`process_batch`), or — for operators that declare `accepts_columns` — as one
`pyarrow.RecordBatch` (`process_columns`), so a vectorised chain never builds a dict
(`operators.columns` holds the conversions).

State is reached through the `OperatorContext` the task hands to `open()`: keyed state for keyed
operators (scoped to the current key), operator (non-keyed) state, and the sink committer — the
"external system" a two-phase-commit sink commits to, which outlives task restarts.

Time reaches an operator through three hooks, each returning the *elements* it emits, in order:
record lists and the watermark events (`runtime.records.messages.Watermark`, `WatermarkStatus`) the
operators after it get: `process_watermark` (the task's input watermark rose; the default passes
it on), `process_watermark_status` (the input went idle or active; passed on) and
`on_processing_time` (a time the operator asked for through `ctx.processing_time.schedule`).
Side outputs go through `ctx.side_outputs` (`operators.side_outputs`).

Operators are pure: no I/O, no clocks except `ctx.clock`, no ray/pyspark/kazoo.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from state.keyed import KeyedStateBackend

Record = dict[str, Any]


#: characters of a record, and of its error, that an error message shows at most
RECORD_PREVIEW_CHARS = 300
_MAX_DEPTH = 20


class OperatorError(RuntimeError):
    """A user function failed; names the operator and the record (by its first
    `RECORD_PREVIEW_CHARS` characters and its size when it is long: a 10 MB record must not make
    a 10 MB message, kept once per restart)."""

    def __init__(self, operator: str, record: Any, cause: BaseException) -> None:
        super().__init__(f"operator {operator!r} failed on record {describe_record(record)}: "
                         f"{_cut(repr(cause), RECORD_PREVIEW_CHARS)}")
        self.operator = operator
        self.record = record
        self.cause = cause


def describe_record(record: Any, limit: int = RECORD_PREVIEW_CHARS) -> str:
    """`repr(record)` for an error message: whole when at most `limit` characters, else its first
    `limit` characters and the length of the whole repr — computed without building it."""
    pieces: list[str] = []
    length = 0
    for piece in _repr_pieces(record, limit, 0):
        pieces.append(piece)
        length += len(piece)
        if length > limit:
            return f"{''.join(pieces)[:limit]}... [record of {_repr_length(record, 0):,} characters]"
    return "".join(pieces)


def _repr_pieces(value: Any, limit: int, depth: int) -> Any:
    """`repr(value)` in pieces, lazily (a consumer stops after `limit` characters); long strings
    and bytes are cut to `limit` + 1 characters up front."""
    if isinstance(value, str | bytes | bytearray):
        yield repr(value[: limit + 1]) if len(value) > limit else repr(value)
    elif depth < _MAX_DEPTH and type(value) in (dict, list, tuple):
        is_dict = type(value) is dict
        yield "{" if is_dict else "[" if type(value) is list else "("
        for i, item in enumerate(value.items() if is_dict else value):
            if i:
                yield ", "
            if is_dict:
                yield from _repr_pieces(item[0], limit, depth + 1)
                yield ": "
                item = item[1]
            yield from _repr_pieces(item, limit, depth + 1)
        if type(value) is tuple and len(value) == 1:
            yield ","
        yield "}" if is_dict else "]" if type(value) is list else ")"
    else:
        yield repr(value)


def _repr_length(value: Any, depth: int) -> int:
    """len(repr(value)), near enough, without building the repr of strings, bytes and containers."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, bytes | bytearray):
        return len(value) + 3
    if depth < _MAX_DEPTH and type(value) in (dict, list, tuple):
        if type(value) is dict:
            inner = sum(_repr_length(k, depth + 1) + 2 + _repr_length(v, depth + 1) for k, v in value.items())
        else:
            inner = sum(_repr_length(v, depth + 1) for v in value)
        return 2 + inner + 2 * max(0, len(value) - 1)
    return len(repr(value))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text):,} characters]"


class SinkCommitter(Protocol):
    """The external system behind a sink (a transactional store, like Kafka's transactions).

    `stage` is the pre-commit: the records are durable in the external system but invisible
    until `commit`; commits are idempotent per transaction id. Executors must make a stage
    durable before the checkpoint that staged it is acknowledged.

    A committer with a true `commits_checkpoints` attribute is told of completed checkpoints by
    the executor (Flink's global committer) and commits every sink's staged transactions itself:
    a sink's completion notification need not commit them (recovery and end of input still do).
    """

    def stage(self, sink: str, transaction_id: str, records: list[Record]) -> None: ...

    def commit(self, sink: str, transaction_id: str, records: list[Record] | None = None) -> None:
        """Make a transaction visible: `records` given, or (None) the ones staged under its id."""
        ...


class Clock(Protocol):
    def now(self) -> float: ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class ProcessingTimeService(Protocol):
    """The task's processing time, offered to its operators (Flink's `ProcessingTimeService`)."""

    def now(self) -> float:
        """The task clock (seconds; virtual on the simulator)."""
        ...

    def schedule(self, when: float, operator: StreamOperator) -> Cancellable:
        """Call `operator.on_processing_time(now)` once the clock reached `when`, on the task's
        own thread, and run what it emits through the rest of the chain."""
        ...


@dataclass(frozen=True)
class DeclaredState:
    """The state an operator restores, as known before it runs; a restore checks the checkpoint
    against it (`runtime.jobmaster.restore.match`).

    Attributes:
        keyed: the keyed state names it uses (in its task's keyed state backend).
        operator: the operator state names its `snapshot_state` writes.
        computed: where it names keyed state by a computed value (e.g. "Fn.process_element line
            12"), so `keyed` may be incomplete; empty when `keyed` is complete.
    """

    keyed: frozenset[str] = frozenset()
    operator: frozenset[str] = frozenset()
    computed: tuple[str, ...] = ()


@dataclass
class OperatorContext:
    """Everything an operator instance may use, handed over by its task in `open()`."""

    operator_name: str
    subtask: int
    parallelism: int
    max_parallelism: int
    clock: Clock
    committer: SinkCommitter
    keyed_backend: KeyedStateBackend | None = None
    #: True when checkpointing is on; a 2PC sink without checkpoints commits at end of input
    checkpointing: bool = True
    #: the completed checkpoint this task attempt was restored from (None: fresh start)
    restored_checkpoint_id: int | None = None
    #: the task's processing-time service (None: the operator runs outside a task)
    processing_time: ProcessingTimeService | None = None
    #: seconds between periodic watermark emissions (`env.set_auto_watermark_interval`)
    auto_watermark_interval: float = 0.2
    #: where operators send side-output records (`operators.side_outputs.SideOutputs`; None: dropped)
    side_outputs: Any = None
    #: the timer services of the chain's operators (`operators.timer_service`), for inspection
    timer_services: list[Any] = field(default_factory=list)


class StreamOperator(abc.ABC):
    """One operator of a chain. Subclasses override what they need."""

    name: str = "operator"
    #: implements `process_columns`: Arrow batches reach it as they are, without dicts
    accepts_columns: bool = False
    #: its work is columnar anyway: records reaching it are converted to a batch first
    prefers_columns: bool = False
    #: the records reaching it become Arrow (a sink stages them): the task checks them for one
    #: Arrow type per field first, as it does its output (`runtime/records/record_types.py`)
    stages_records: bool = False

    def open(self, ctx: OperatorContext) -> None:
        self.ctx = ctx

    @abc.abstractmethod
    def process_batch(self, records: list[Record]) -> list[Record]:
        """Process one input buffer's records, return the output records (in order)."""

    def process_columns(self, batch: Any) -> Any:
        """Vectorised `process_batch` (only called when `accepts_columns`): one input buffer as a
        `pyarrow.RecordBatch`; returns a RecordBatch or a list of records, in order."""
        raise NotImplementedError(f"operator {self.name!r} does not process Arrow batches")

    def end_input(self) -> list[Record]:
        """All input consumed; return any final records."""
        return []

    def needs_watermarks(self) -> bool:
        """Whether the job needs watermarks for this operator (it makes or uses event time: a
        timestamp assigner, timers, windows); then every source emits `+inf` at its end."""
        return False

    def process_watermark(self, watermark: Any) -> list[Any]:
        """The input watermark rose to `watermark` (a `Watermark` event): the elements to emit —
        record lists it fires (timers, windows), then the watermark for the next operator."""
        return [watermark]

    def process_watermark_status(self, status: Any) -> list[Any]:
        """The input went idle or active again (a `WatermarkStatus`): the elements to emit."""
        return [status]

    def on_processing_time(self, now: float) -> list[Any]:
        """A time this operator scheduled came (`ctx.processing_time.schedule`): the elements
        to emit (records, watermark events)."""
        return []

    def snapshot_state(self, checkpoint_id: int) -> dict[str, list[Any]]:
        """Operator (non-keyed) state as named lists of Arrow-representable values.

        Called synchronously when the checkpoint triggers; the result must not be mutated later.
        Keyed state is snapshotted by the task through the keyed backend, not here.
        """
        return {}

    def restore_state(self, state: dict[str, list[Any]]) -> None:  # noqa: B027
        """Restore from the merged operator state of the checkpoint (all subtasks' lists,
        redistributed by the task when parallelism changed)."""

    def declared_state(self) -> DeclaredState:
        """The keyed and operator state this operator restores (none by default); an operator
        that snapshots or uses state overrides this, or a restore reports its state as unused."""
        return DeclaredState()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027
        pass

    def listens_for_completion(self) -> bool:
        """Whether this operator must hear of every completed checkpoint at once, by a call of its
        own: any operator overriding `notify_checkpoint_complete` (a user's listener) does. One
        whose notification only tidies bookkeeping a later completion subsumes may say False: its
        task then learns non-final completions late, from the next barrier or trigger
        (`runtime.jobmaster.coordination.completions`), and the final checkpoint still by a call."""
        return type(self).notify_checkpoint_complete is not StreamOperator.notify_checkpoint_complete

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:  # noqa: B027
        pass

    def close(self) -> None:  # noqa: B027
        pass


KeySelector = Callable[[Record], Any]
