"""The committed-output and checkpoint-file invariants of `InvariantChecker`.

Like the rest of the checker it watches from outside and changes nothing: it wraps, forwarding
every call unchanged, the sinks' committer (each commit) and the blob store of the checkpoint
storage (each delete), and hears of each completed checkpoint.

Invariants (the name is what a violation reports):

* ``committed-output-monotonic`` — a transaction a sink committed stays committed.
* ``committed-output-within-reference`` (needs `reference`; exactly-once or no checkpointing) —
  no record is ever committed more times than the failure-free run has it; checked at each
  commit. ``committed-output-complete``: at the end of a successful run the committed output
  equals the reference (at-least-once: contains it). The committed output is the committer's:
  an execution restoring an earlier one's checkpoint with its committer continues its output.
* ``retained-files-kept`` — no file a retained completed checkpoint uses (its metadata, every
  state file its handles name) is deleted from the checkpoint storage (memory or disk alike),
  and when a checkpoint completes every file it uses exists (none was deleted before).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from checkpoint.storage.layout import ForwardingBlobStore

if TYPE_CHECKING:
    from runtime.checker.invariants import InvariantChecker
    from runtime.sim.executor import SimExecutor

__all__ = ["OutputChecks", "record_key"]


def record_key(record: Mapping[str, Any]) -> tuple:
    """A record as a hashable multiset element (as `runtime.workloads.seeded.multiset` counts them)."""
    return tuple(sorted(record.items()))


class OutputChecks:
    """The committed-output and checkpoint-file part of an `InvariantChecker` (see the module
    docstring), bound to one simulated run.

    Args:
        checker: the checker it reports to.
        sim: the run (its committer and checkpoint storage are watched from now on).
        reference: the checker's `reference` (see `InvariantChecker`).

    Raises:
        ValueError: `reference` names a sink the job does not have, or is bare for a job with
            several sinks.
    """

    def __init__(self, checker: InvariantChecker, sim: SimExecutor, reference: Any) -> None:
        self._checker = checker
        self._sim = sim
        sinks = [name for v in sim.graph.vertices for name in v.sink_names]
        self._reference = _resolve_reference(reference, sinks)
        # what the committer holds already (an earlier execution's, when this one restores its
        # checkpoint with its committer) counts as committed output of the same job
        self._committed: dict[str, set[str]] = {s: set(sim.committer.transactions(s)) for s in sinks}
        self._counts: dict[str, Counter] = {s: Counter() for s in sinks}
        if self._reference is not None:
            for sink, known in self._committed.items():
                self._counts[sink] = Counter(record_key(r) for txn in known for r in sim.committer.records(sink, txn))
        self._retained_ids: tuple[int, ...] | None = None
        self._retained_files: dict[str, int] = {}
        #: path -> virtual time of its last delete (for the message when a completion misses it)
        self._deleted: dict[str, float] = {}
        sim.storage.blob_store = _WatchedBlobStore(sim.storage.blob_store, self)

    def committer(self, committer: Any) -> Any:
        """What the tasks get as their committer: `committer`, watched."""
        return _WatchedCommitter(committer, self)

    def on_commit(self, sink: str, transaction_id: str, committer: Any) -> None:
        known = self._committed.setdefault(sink, set())
        if transaction_id in known:
            return  # a repeated commit: idempotent
        known.add(transaction_id)
        reference = self._reference.get(sink) if self._reference is not None and self._checker._exactly_once else None
        if reference is None:
            return
        counts = self._counts.setdefault(sink, Counter())
        for record in committer.records(sink, transaction_id):
            key = record_key(record)
            counts[key] += 1
            self._checker.checks["committed-output-within-reference"] += 1
            if counts[key] > reference[key]:
                self._checker._violate("committed-output-within-reference", f"sink {sink!r}, transaction {transaction_id!r}",
                              f"record {record!r} is committed {counts[key]} time(s); the failure-free run has it "
                              f"{reference[key]} time(s)")
                return

    def check_committed_kept(self) -> None:
        committer = self._sim.committer
        for sink, known in self._committed.items():
            self._checker.checks["committed-output-monotonic"] += 1
            gone = known - set(committer.transactions(sink))
            if gone:
                self._checker._violate("committed-output-monotonic", f"sink {sink!r}",
                              f"committed transaction(s) {sorted(gone)} are no longer committed")

    def on_completed(self, completed: Any) -> None:
        """The coordinator made checkpoint `completed` durable (it is retained now)."""
        blobs = self._sim.storage.blob_store
        for path in (completed.metadata_path, *completed.referenced_paths()):
            self._checker.checks["retained-files-kept"] += 1
            if path is not None and not blobs.exists(path):
                when = self._deleted.get(path)
                self._checker._violate("retained-files-kept", f"checkpoint {completed.checkpoint_id}, file {path}",
                              "the checkpoint completed using a file that does not exist"
                              + (f" (deleted at t={when:.6f} s)" if when is not None else ""))
                return

    def on_delete(self, path: str) -> None:
        store = getattr(self._sim, "store", None)
        self._deleted[path] = self._sim.now
        if store is None:
            return
        retained = store.get_all_checkpoints()
        ids = tuple(c.checkpoint_id for c in retained)
        if ids != self._retained_ids:
            self._retained_ids = ids
            self._retained_files = {}
            for checkpoint in retained:
                for used in (checkpoint.metadata_path, *checkpoint.referenced_paths()):
                    if used is not None:
                        self._retained_files.setdefault(used, checkpoint.checkpoint_id)
        self._checker.checks["retained-files-kept"] += 1
        owner = self._retained_files.get(path)
        if owner is not None:
            self._checker._violate("retained-files-kept", f"file {path}",
                          f"deleted while retained checkpoint {owner} uses it (retained: {list(ids)})")

    def check_output_complete(self) -> None:
        if self._reference is None:
            return
        committer = self._sim.committer
        for sink, expected in self._reference.items():
            got = Counter(record_key(r) for txn in committer.transactions(sink) for r in committer.records(sink, txn))
            missing, extra = expected - got, got - expected
            self._checker.checks["committed-output-complete"] += 1
            if missing or (extra and self._checker._exactly_once):
                example = next(iter(missing or extra))
                self._checker._violate("committed-output-complete", f"sink {sink!r}",
                              f"at the end, {sum(missing.values())} record(s) of the failure-free run are missing "
                              f"and {sum(extra.values())} are extra (e.g. {dict(example)!r})")
                return


class _WatchedCommitter:
    """The sinks' committer, forwarding every call; tells the checks of each commit."""

    def __init__(self, inner: Any, checker: OutputChecks) -> None:
        self.inner, self.checker = inner, checker

    def stage(self, sink: str, transaction_id: str, records: Any) -> None:
        self.inner.stage(sink, transaction_id, records)

    def commit(self, sink: str, transaction_id: str, records: Any = None) -> None:
        self.inner.commit(sink, transaction_id, records)
        self.checker.on_commit(sink, transaction_id, self.inner)

    def commit_checkpoint(self, checkpoint_id: int) -> list[tuple[str, str]]:
        committed = self.inner.commit_checkpoint(checkpoint_id)
        for sink, transaction_id in committed:
            self.checker.on_commit(sink, transaction_id, self.inner)
        return committed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _WatchedBlobStore(ForwardingBlobStore):
    """The checkpoint storage's blob store, forwarding every call; tells the checks of deletes."""

    def __init__(self, inner: Any, checker: OutputChecks) -> None:
        super().__init__(inner)
        self.checker = checker

    def delete(self, path: str) -> None:
        self.checker.on_delete(path)
        self.inner.delete(path)


def _resolve_reference(reference: Any, sinks: list[str]) -> dict[str, Counter] | None:
    if reference is None:
        return None
    if hasattr(reference, "output") and hasattr(reference, "sink_names"):  # a JobResult
        return {s: _as_multiset(reference.output(s)) for s in reference.sink_names}
    if isinstance(reference, Mapping) and not isinstance(reference, Counter):
        unknown = sorted(set(reference) - set(sinks))
        if unknown:
            raise ValueError(f"InvariantChecker: reference names sink(s) {unknown} this job does not have "
                             f"(its sinks: {sinks})")
        return {s: _as_multiset(v) for s, v in reference.items()}
    if len(sinks) != 1:
        raise ValueError(f"InvariantChecker: a bare reference needs a job with exactly one sink; this job has "
                         f"{sinks}: pass reference={{sink name: records}}")
    return {sinks[0]: _as_multiset(reference)}


def _as_multiset(records: Any) -> Counter:
    if isinstance(records, Counter):
        return records
    return Counter(record_key(r) for r in records)
