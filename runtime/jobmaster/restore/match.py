"""Whether a checkpoint fits the job it is restored into, decided before any task starts.

`match_checkpoint(graph, shape)` compares what a checkpoint holds (`CheckpointShape`: per
operator, the source splits and their offsets, the keyed and operator state names, whether it
holds channel state) with the job graph, and either returns a `RestorePlan` or raises
`StateMismatchError` naming every mismatch, with the checkpoint id, the operator, and the names on
both sides. It is pure (no I/O): `runtime.jobmaster.restore.state_assignment.plan_restore` reads the shape from storage, and
any executor can call it before deploying (the simulator does, in its constructor).

What must match:

* **Operators.** State of an operator (job vertex) the job does not have; operator state of a
  chained operator the chain does not have at that position (`Task` keys it `"<index>:<name>"`).
* **Source splits.** The checkpoint's split ids per source must be the job's, and no offset may
  lie past the end of its split. The splits are the job's *input*, not its parallelism: rescaling
  deals the same splits to more or fewer subtasks. A source whose split count was not given
  (`from_collection(rows)`, `generate(...)`: one split per subtask) takes the checkpoint's count,
  as Flink restores the split assignment of its checkpoint. Another set of splits would make the
  offsets point into other records — duplicating or losing input — so a split mismatch is an error
  even with `allow_non_restored_state`.
* **State names.** Every keyed state name in the checkpoint must be one the job's operator uses,
  and every operator state name one its operator writes.

How the job's state names are known up front: keyed state is created lazily (the first
`ctx.value_state(name)` in `process_element`), so waiting for it would be non-deterministic (a
subtask may not see a record, a branch may not run before the first checkpoint) and late (the
job would already be producing output). Instead every operator reports `declared_state()`:
built-in operators know their names, a `KeyedProcessFunction` declares `state_names` or has the
string literals it passes to `ctx.value_state` / `list_state` / `map_state` read from its code
(`operators.state_names`). When a function names state with a computed value the list may be
incomplete; a checkpoint name outside it is then reported with the advice to declare
`state_names`, never silently dropped.

`allow_non_restored_state=True` (Flink's `allowNonRestoredState`) turns the operator and state
name mismatches into drops: the plan lists them and the restore leaves that state out (the caller
logs a warning listing what was dropped). State the job has but the checkpoint lacks is never a
mismatch: it starts empty, like a new operator.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from operators.base import DeclaredState
from runtime.core.graph import JobGraph, JobVertex
from runtime.core.operator_chain import operator_state_key
from vocabulary.errors import SuppressRestartsError

#: list at most this many names in one message
_SHOWN = 8


class RestoreError(SuppressRestartsError):
    """A checkpoint cannot be restored into this job (names the vertex and the reason); no
    restart can fix it."""


class StateMismatchError(RestoreError):
    """The job does not match the checkpoint it restores.

    Attributes:
        checkpoint_id: the checkpoint.
        mismatches: one sentence per mismatch, each naming the operator and the names on both sides.
        droppable: True when `allow_non_restored_state=True` would drop the unmatched state
            instead; False when a mismatch cannot be dropped (source splits, max parallelism).
    """

    def __init__(self, checkpoint_id: int, mismatches: list[str], droppable: bool) -> None:
        self.checkpoint_id = checkpoint_id
        self.mismatches = tuple(mismatches)
        self.droppable = droppable
        if droppable:
            advice = ("change the job back, or restore with allow_non_restored_state=True to drop the "
                      "state this job does not use")
        else:
            advice = ("allow_non_restored_state=True cannot fix this: source offsets are not droppable "
                      "state (other splits would duplicate or lose input), and neither are key groups "
                      "or in-flight data; restore into a job with the checkpoint's splits and settings")
        super().__init__(f"checkpoint {checkpoint_id} does not match this job: "
                         + "; ".join(mismatches) + f" ({advice})")


@dataclass
class VertexShape:
    """What a checkpoint holds for one job vertex (the union over its subtasks).

    Attributes:
        subtasks: the parallelism it was taken at.
        splits: source split id -> offset (records read); None when the vertex read no source.
        keyed: keyed state names.
        max_parallelism: the key groups of its keyed state; None without keyed state.
        operator: operator state key (`"<index>:<operator>"`) -> state names; not source offsets.
        channel_state: it holds in-flight data of unaligned checkpoints.
    """

    subtasks: int = 0
    splits: dict[str, int] | None = None
    keyed: set[str] = field(default_factory=set)
    max_parallelism: int | None = None
    operator: dict[str, set[str]] = field(default_factory=dict)
    channel_state: bool = False


@dataclass
class CheckpointShape:
    """What a checkpoint holds, per job vertex name (see `runtime.jobmaster.restore.state_assignment.checkpoint_shape`)."""

    checkpoint_id: int
    vertices: dict[str, VertexShape] = field(default_factory=dict)


@dataclass(frozen=True)
class RestorePlan:
    """How to restore a checkpoint into a job that matches it (or was allowed to drop state).

    Attributes:
        checkpoint_id: the checkpoint.
        graph: the job to run: the given one, with defaulted split counts set to the checkpoint's.
        dropped_vertices: operators whose state is dropped entirely.
        dropped_keyed: vertex -> keyed state names dropped.
        dropped_operator: vertex -> operator state key -> state names dropped.
        dropped: one sentence per drop, for the warning.
    """

    checkpoint_id: int
    graph: JobGraph
    dropped_vertices: frozenset[str] = frozenset()
    dropped_keyed: Mapping[str, frozenset[str]] = field(default_factory=dict)
    dropped_operator: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()


def match_checkpoint(graph: JobGraph, shape: CheckpointShape, *,
                     allow_non_restored_state: bool = False) -> RestorePlan:
    """Check that `shape`'s checkpoint fits `graph` and plan the restore.

    Raises:
        StateMismatchError: a mismatch (every one is named); with `allow_non_restored_state`
            only mismatches that cannot be dropped (source splits and the like).
    """
    graph = _with_checkpoint_splits(graph, shape)
    fatal: list[str] = []
    droppable: list[str] = []
    dropped_vertices: set[str] = set()
    dropped_keyed: dict[str, frozenset[str]] = {}
    dropped_operator: dict[str, dict[str, frozenset[str]]] = {}
    job_vertices = {v.name: v for v in graph.vertices}

    unknown = sorted(set(shape.vertices) - set(job_vertices))
    for name in unknown:
        droppable.append(f"it has state for operator {name!r} ({_describe(shape.vertices[name])}) which this "
                         f"job does not have (its operators: {_names(job_vertices)})")
        dropped_vertices.add(name)

    for vertex in graph.vertices:
        held = shape.vertices.get(vertex.name)
        if held is None:
            continue  # new in this job: starts empty
        fatal += _fixed_mismatches(vertex, held)
        declared = _declared(vertex)
        if vertex.source is not None:
            fatal += _split_mismatches(vertex, held)
        elif held.splits is not None:
            droppable.append(f"operator {vertex.name!r} holds the offsets of source splits "
                             f"{_names(held.splits)} but is no longer a source in this job")
        unused = held.keyed - declared.keyed
        if unused:
            droppable.append(_keyed_mismatch(vertex, unused, declared))
            dropped_keyed[vertex.name] = frozenset(unused)
        chain = {operator_state_key(i, op): d for i, (op, d) in
                 enumerate(zip(vertex.operator_names, _operator_declarations(vertex)))}
        for key in sorted(held.operator):
            names = held.operator[key]
            if key not in chain:
                droppable.append(
                    f"operator {vertex.name!r} has operator state {_names(names)} of chained operator "
                    f"{_chained(key)} which this job's chain does not have "
                    f"(it has: {', '.join(_chained(k) for k in chain) or 'none'})")
                dropped_operator.setdefault(vertex.name, {})[key] = frozenset(names)
            elif names - chain[key].operator:
                extra = names - chain[key].operator
                droppable.append(
                    f"chained operator {_chained(key)} of {vertex.name!r} has operator state {_names(extra)} "
                    f"in the checkpoint which it does not use (it uses {_names(chain[key].operator) or 'none'})")
                dropped_operator.setdefault(vertex.name, {})[key] = frozenset(extra)

    if fatal:
        raise StateMismatchError(shape.checkpoint_id, fatal + droppable, droppable=False)
    if droppable and not allow_non_restored_state:
        raise StateMismatchError(shape.checkpoint_id, droppable, droppable=True)
    return RestorePlan(shape.checkpoint_id, graph, frozenset(dropped_vertices), dropped_keyed,
                       dropped_operator, tuple(droppable))


def _with_checkpoint_splits(graph: JobGraph, shape: CheckpointShape) -> JobGraph:
    """`graph` with each defaulted split count set to the checkpoint's (see the module docstring)."""
    vertices, changed = [], False
    for vertex in graph.vertices:
        held = shape.vertices.get(vertex.name)
        source = vertex.source
        if vertex.default_splits and source is not None and held is not None and held.splits \
                and len(held.splits) != len(source.splits()):
            source = copy.copy(source)
            source.num_splits = len(held.splits)  # type: ignore[attr-defined]  # defaulted: a count source
            vertex = dataclasses.replace(vertex, source=source)
            changed = True
        vertices.append(vertex)
    return dataclasses.replace(graph, vertices=vertices) if changed else graph


def _fixed_mismatches(vertex: JobVertex, held: VertexShape) -> list[str]:
    """Mismatches no drop can fix: key groups (in-flight data at another parallelism is
    redistributed, or refused, by `runtime.jobmaster.restore.channel_rescale` when the restores are built)."""
    out = []
    if held.max_parallelism is not None and held.max_parallelism != vertex.max_parallelism:
        out.append(f"operator {vertex.name!r} has keyed state in {held.max_parallelism} key groups "
                   f"(max_parallelism) but this job has {vertex.max_parallelism}; max parallelism cannot "
                   "change across a restore")
    return out


def _split_mismatches(vertex: JobVertex, held: VertexShape) -> list[str]:
    assert vertex.source is not None
    splits = vertex.source.splits()
    offsets = held.splits or {}
    ours = [s.split_id for s in splits]
    if set(ours) != set(offsets):
        return [f"source {vertex.name!r} read splits {_names(sorted(offsets, key=_natural)) or 'none'} "
                f"({len(offsets)}) in the checkpoint but has splits {_names(ours)} ({len(ours)}) in this job"]
    out = []
    for split in splits:
        position = offsets[split.split_id]
        if split.end is not None and position > split.end - split.start:
            out.append(f"source {vertex.name!r} read split {split.split_id!r} up to record {position} in the "
                       f"checkpoint but the split has {split.end - split.start} records in this job (its "
                       "input changed)")
    return out


def _keyed_mismatch(vertex: JobVertex, unused: set[str], declared: DeclaredState) -> str:
    uses = _names(declared.keyed) or "none"
    text = (f"operator {vertex.name!r} has keyed state {_names(unused)} in the checkpoint which this job's "
            f"operator does not use (it uses {uses})")
    if declared.computed:
        text += (f"; it also names keyed state by computed values ({', '.join(declared.computed)}): if it uses "
                 f"{_names(unused)}, declare every name with `state_names = (...)` on the function")
    return text


def _operator_declarations(vertex: JobVertex) -> list[DeclaredState]:
    """`declared_state()` of each chained operator; an operator not built from a template (a bare
    factory) declares nothing it can be matched against."""
    out = []
    for index, factory in enumerate(vertex.operator_factories):
        template = getattr(factory, "template", None)
        if template is None:
            where = f"operator {vertex.operator_names[index]!r} (built by {factory!r}, not from a template)"
            out.append(DeclaredState(computed=(where,)))
        else:
            out.append(template.declared_state())
    return out


def _declared(vertex: JobVertex) -> DeclaredState:
    """The keyed state the vertex's chain uses (one keyed backend per task serves the chain)."""
    keyed: set[str] = set()
    computed: list[str] = []
    for declared in _operator_declarations(vertex):
        keyed |= declared.keyed
        computed += declared.computed
    return DeclaredState(keyed=frozenset(keyed), computed=tuple(computed))


def _describe(held: VertexShape) -> str:
    parts = []
    if held.splits is not None:
        parts.append(f"offsets of source splits {_names(sorted(held.splits, key=_natural))}")
    if held.keyed:
        parts.append(f"keyed state {_names(held.keyed)}")
    for key in sorted(held.operator):
        parts.append(f"operator state {_names(held.operator[key])} of {_chained(key)}")
    return "; ".join(parts) or "no state"


def _chained(key: str) -> str:
    index, _, name = key.partition(":")
    return f"{name!r} (chain position {index})" if name else repr(key)


def _natural(name: str) -> tuple[str, int]:
    """Sort "src-10" after "src-9"."""
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


def _names(names: Iterable[str]) -> str:
    """Quoted, in natural order (a list keeps its order), at most `_SHOWN` of them."""
    items = names if isinstance(names, list) else sorted(names, key=_natural)
    shown = ", ".join(repr(n) for n in items[:_SHOWN])
    return shown + (f", ... ({len(items)} in all)" if len(items) > _SHOWN else "")
