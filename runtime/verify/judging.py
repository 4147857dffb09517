"""What the simulator's swarm (`runtime.verify.swarm`) and the Ray swarm (`runtime.verify.ray_swarm`)
share: the failure-free reference of a stamped job, judging a run's observations against it,
classifying the exception that ended a run, and the limitations both accept.

A swarm runs a job one or more times (phases) and collects what it saw in an `Observed`; a run
that ended before there was output to compare raises `RunFailed` with its verdict kind. `judge`
then compares the committed output, the staged transactions, the final keyed state, the order of
each (origin, key) and the checkpoint directory with the reference: the first that differs is the
violation kind (`VIOLATIONS`), else "ok". A config is duck-typed: `judge` and `classify` read
`faults`, `stages`, `retained`, `exactly_once` and `order_kept`.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from checkpoint.io.tools import collect_garbage, open_checkpoints, read_checkpoint
from checkpoint.storage.layout import CorruptCheckpointError
from runtime.checker.invariants import InvariantViolation
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.result import JobFailedError
from runtime.ray.service_deaths import MEMORY_COMMITTER_DIED, MEMORY_STORAGE_DIED
from runtime.workloads.seeded import (
    SINK,
    build_stamped_job,
    draw_rows,
    multiset,
    normalize_state,
    order_holds_after,
    order_violations,
)

#: violation kinds a verdict can carry (`"ok"`, `"expected"` and `"excluded"` are not violations)
VIOLATIONS = {
    "lost": "committed output misses records of the reference",
    "duplicated": "committed output has records the reference has not (or more of them)",
    "lost+duplicated": "committed output misses some records and repeats others",
    "state": "final keyed state differs from the reference (list order per origin included)",
    "order": "records of one key from one origin arrived or were committed out of order",
    "staged": "transactions left staged (never committed, never aborted) at the end",
    "failed": "the job failed for good although its restart attempts covered every fault",
    "liveness": "the job did not finish (simulator time or event bound, Ray's max_duration, or stalled)",
    "storage": "checkpoint storage at the end (on disk, no torn writes): a file no retained checkpoint "
               "references, more checkpoints than retained, or a retained one that does not verify",
    "invariant:<name>": "the per-event invariant checker found invariant <name> broken (runtime.checker.invariants)",
    "error": "an exception other than a JobFailedError escaped execute()",
    "restore": "a restore from the finished job's checkpoint directory did not finish with the reference output",
}


def fault_repr(fault: Any) -> str:
    """`TaskCrash(at_fraction=0.5)`: only the fields that differ from their defaults."""
    args = [f"{f.name}={getattr(fault, f.name)!r}" for f in fields(fault)
            if getattr(fault, f.name) != f.default]
    return f"{type(fault).__name__}({', '.join(args)})"


def config_repr(config: Any) -> str:
    """`SwarmConfig(seed=3, rows=80, faults=(TaskCrash(at_fraction=0.5),))`: a swarm config's
    seed, the fields that differ from their defaults and its faults, as `parse_config` reads it."""
    parts = [f"seed={config.seed}"]
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name in ("seed", "faults") or value == f.default:
            continue
        parts.append(f"{f.name}={value!r}")
    if config.faults:
        inner = ", ".join(fault_repr(fault) for fault in config.faults)
        parts.append(f"faults=({inner},)")
    return f"{type(config).__name__}({', '.join(parts)})"


@dataclass(frozen=True)
class ExpectedError:
    """A known limitation: an exception of class `name` whose message contains `fragment`, in a
    config for which `applies` holds, is an "expected" verdict (never a pass)."""

    name: str
    fragment: str
    why: str
    applies: Callable[[Any], bool]


def corrupts(config: Any) -> bool:
    """Whether `config` tears state writes (a corrupt checkpoint may legitimately stay behind)."""
    return any(type(f).__name__ == "TornWrite" for f in config.faults)


def _kills_in_memory(process: str) -> Callable[[Any], bool]:
    """Whether `config` SIGKILLs `process` (a Ray `ProcessKill`) of a job that keeps its sinks'
    output and its checkpoints in memory (storage "memory")."""
    def applies(config: Any) -> bool:
        return getattr(config, "storage", None) == "memory" and any(
            getattr(f, "process", None) == process for f in config.faults)
    return applies


#: known limitations and failures by design; delete an entry when a fix makes it pass
EXPECTED_ERRORS: tuple[ExpectedError, ...] = (
    ExpectedError("CommittedOutputAheadError", "falling back past committed output",
                  "a torn write corrupted a checkpoint whose transactions the sinks had already committed; "
                  "restoring an older one would commit that output a second time, so the job fails naming both "
                  "checkpoints instead of breaking exactly-once",
                  corrupts),
    ExpectedError("NoValidCheckpointError", "no retained checkpoint can be restored",
                  "torn writes corrupted every retained checkpoint, so there is none to restore; the job fails "
                  "naming the bad files rather than start over and commit its output again",
                  corrupts),
    # a torn write reports success (the storage acknowledged it), so no check at write time sees it:
    # restore finds it by its checksum, and with every retained checkpoint torn a finished job's
    # directory cannot be restored, as a failover within the job could not (the entry above)
    ExpectedError("CheckpointToolError", "no valid checkpoint of",
                  "torn writes corrupted every retained checkpoint of the finished job, so restoring its "
                  "directory fails naming the bad files",
                  corrupts),
    ExpectedError("JobFailedError", MEMORY_COMMITTER_DIED,
                  "the sinks' committer service, killed, held their committed output in memory (no checkpoint "
                  "directory): the external system itself is gone, so the job fails saying so",
                  _kills_in_memory("committer")),
    ExpectedError("JobFailedError", MEMORY_STORAGE_DIED,
                  "the in-memory checkpoint storage, killed, took every checkpoint with it: nothing is left to "
                  "restore, so the job fails saying so rather than start over",
                  _kills_in_memory("blob_store")),
)


@dataclass
class Observed:
    """The faulty run's observations, over one or more executions."""

    committer: CollectCommitter
    final_state: dict[str, Any]
    failures: list[str]
    completed: int = 0
    aborted: int = 0
    restarts: int = 0
    phases: int = 1
    #: what is wrong with the final execution's checkpoint directory ("" when nothing, or unchecked)
    storage_problem: str = ""

    def add(self, result: Any) -> None:
        self.completed += len(result.completed_checkpoints)
        self.aborted += len(result.aborted_checkpoints)
        self.restarts += result.restarts
        self.failures.extend(result.failures)


class RunFailed(Exception):
    """A run ended in a verdict before comparing outputs."""

    def __init__(self, kind: str, detail: str, run: Observed | None = None) -> None:
        super().__init__(detail)
        self.kind, self.detail, self.run = kind, detail, run


def judge(config: Any, run: Observed, want_output: Counter, want_state: Any) -> tuple[str, str]:
    """The verdict kind and detail of a finished run against the reference (output, state)."""
    output = run.committer.output(SINK)
    got = multiset(output)
    missing, extra = want_output - got, got - want_output
    if missing and (extra or config.exactly_once):
        kind = "lost+duplicated" if extra else "lost"
        return kind, f"{sum(missing.values())} missing, {sum(extra.values())} extra (e.g. {_example(missing or extra)})"
    if extra and config.exactly_once:
        return "duplicated", f"{sum(extra.values())} extra (e.g. {_example(extra)})"
    staged = run.committer.staged_transactions(SINK)
    if staged:
        return "staged", f"staged transactions left: {staged[:5]}"
    if not config.exactly_once:
        return ("storage", run.storage_problem) if run.storage_problem else ("ok", "")
    if normalize_state(run.final_state) != want_state:
        return "state", _state_difference(normalize_state(run.final_state), want_state)
    if order_holds_after(config.stages) and config.order_kept:
        problems = order_violations(output)
        if problems:
            return "order", "; ".join(problems)
    if run.storage_problem:
        return "storage", run.storage_problem
    return "ok", ""


def _example(records: Counter) -> str:
    record, n = next(iter(records.items()))
    return f"{dict(record)} x{n}"


def _state_difference(got: dict, want: dict) -> str:
    for vertex in sorted(set(got) | set(want)):
        for name in sorted(set(got.get(vertex, {})) | set(want.get(vertex, {}))):
            g, w = got.get(vertex, {}).get(name, {}), want.get(vertex, {}).get(name, {})
            for key in sorted(set(g) | set(w), key=repr):
                if g.get(key) != w.get(key):
                    return f"{vertex}.{name}[{key!r}]: got {g.get(key)!r}, want {w.get(key)!r}"
    return "states differ"


@lru_cache(maxsize=256)
def reference(seed: int, rows: int, keys: int, skew: float, splits: int,
              stages: tuple[str, ...], source_watermarks: bool = False) -> tuple[Counter, Any]:
    """The failure-free run without checkpointing, on the simulator: committed multiset and
    normalized state (the same on every executor)."""
    from runtime.api.environment import StreamEnvironment

    env = StreamEnvironment(parallelism=2, buffer_size=16)
    build_stamped_job(env, draw_rows(seed, rows, keys, skew), splits, stages, strict_order=True,
                      source_watermarks=source_watermarks)
    result = env.execute("job", executor="sim", seed=0, max_time=60.0, max_events=3_000_000)
    output = result.output(SINK)
    problems = order_violations(output) if order_holds_after(stages) else []
    if problems:  # the workload itself is wrong, not the runtime
        raise AssertionError(f"reference run of {stages} is out of order: {problems}")
    return multiset(output), normalize_state(result.final_state)


def storage_problem(config: Any, directory: Path) -> str:
    """What is wrong with a finished job's checkpoint `directory` (the cleanup guarantee: no file
    left unreferenced, only the retained checkpoints kept, each whole); "" when
    nothing, or when torn writes may legitimately have left a corrupt checkpoint behind."""
    if corrupts(config) or not directory.exists():
        return ""
    storage = open_checkpoints(str(directory))
    report = collect_garbage(storage, "job", dry_run=True)
    if report.removed:
        paths = [path for path, _ in report.removed]
        return f"{len(paths)} orphan file(s) left in {directory.name}: {paths[:4]}"
    if len(report.valid_checkpoints) > config.retained:
        return f"{len(report.valid_checkpoints)} checkpoints kept ({report.valid_checkpoints}), retained={config.retained}"
    for checkpoint_id in report.valid_checkpoints:
        try:
            read_checkpoint(storage, "job", checkpoint_id, verify_files=True)
        except CorruptCheckpointError as exc:
            return f"retained checkpoint {checkpoint_id} does not verify: {exc}"
    return ""


#: invariants whose violation is one of the verdict's own kinds (the rest: "invariant:<name>")
_INVARIANT_KINDS = {"committed-output-complete": "lost", "committed-output-within-reference": "duplicated"}

#: how a failure caused by an injected fault reads (the first phase of a rescale must end so)
FAULT_FAILURES = ("injected fault", "coordinator crash", "exceeded checkpoint tolerable failure threshold")

#: how a job that did not finish reads: the simulator's bounds, Ray's `max_duration` and watchdog
_UNFINISHED = ("did not finish within", "job stalled", "made no progress for")


def classify(config: Any, exc: BaseException) -> tuple[str, str]:
    """The verdict kind of an exception that ended a run, and its detail (for "error": where it
    was raised, too)."""
    chain = [exc]
    while chain[-1].__cause__ is not None or getattr(chain[-1], "cause", None) is not None:
        nxt = chain[-1].__cause__ or chain[-1].cause  # type: ignore[attr-defined]
        if nxt in chain:
            break
        chain.append(nxt)
    names = {cls.__name__ for e in chain for cls in type(e).__mro__}
    message = " <- ".join(f"{type(e).__name__}: {e}" for e in chain)
    for expected in EXPECTED_ERRORS:
        if expected.applies(config) and any(
                expected.name in {c.__name__ for c in type(e).__mro__} and expected.fragment in str(e) for e in chain):
            return "expected", f"{expected.why}: {message}"
    violation = next((e for e in chain if isinstance(e, InvariantViolation)), None)
    if violation is not None:
        return _INVARIANT_KINDS.get(violation.invariant, f"invariant:{violation.invariant}"), message
    if "OrderViolation" in names or "order violation" in message:
        return "order", message
    if isinstance(exc, JobFailedError):
        if any(fragment in str(exc) for fragment in _UNFINISHED):
            return "liveness", message
        return "failed", message
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "-packages" not in f.filename]  # the innermost frame outside Ray & co.
    frame = (ours or frames or [None])[-1]
    where = f" (raised at {frame.filename}:{frame.lineno} in {frame.name})" if frame is not None else ""
    return "error", message + where
