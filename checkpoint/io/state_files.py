"""Writing task snapshots as incremental and/or merged files (behind `SnapshotWriter`).

Theory of operation
-------------------
`StateFileWriter` is the I/O side of `state.incremental` and `state.merging`. For each snapshot:

1. `prepare` (the task's asynchronous part starts): plan the keyed state (`full`: one blob;
   `incremental`: per key group reuse / delta / base, plus compaction copies, whose bytes are read
   back here), lay the pieces out and build every physical file and every handle. Nothing is
   written yet, so the caller knows the exact bytes to upload (the simulator charges time for
   them).
2. `write`: upload the files, checking before each one that the checkpoint was not aborted
   meanwhile (an aborted checkpoint's upload stops, and what it wrote is removed).
3. `notify_complete` / `notify_aborted` (the executor forwards the task's notifications): the
   completed snapshot becomes the task's base; an aborted one's new files are deleted — nothing
   else can reference them, because tasks only reuse pieces of completed checkpoints and the
   registry resolves duplicates to the copy registered first.

Layout: pieces shared across checkpoints (key-group bases and deltas) go to
`<job>/shared/<task>/chk-<id>-<n>.merged` (merged) or `.../chk-<id>-<piece>` (one file each);
they carry `StateHandle.key` = their path, so the `SharedStateRegistry` counts references to them
and the store never deletes them. Pieces owned by one checkpoint (manifest, operator and channel
state, full keyed blobs) go to `chk-<id>/taskowned/<task>.merged` (merged) or one file per kind,
deleted with their checkpoint by the store.

Handles of a task, kind "keyed" (incremental): the manifest segment first (its key carries the
task's reuse floor, see `state.registry`), then every shared file the chains use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from checkpoint.storage.layout import StorageError
from state.compaction import DEFAULT_COMPACTION_THRESHOLD
from state.incremental import DEFAULT_REBASE_RATIO, IncrementalPlan, IncrementalSnapshotStrategy, Piece
from state.merging import DEFAULT_MAX_FILE_SIZE, checksum, pack_segments
from state.registry import manifest_key
from vocabulary.handles import StateHandle, TaskId

if TYPE_CHECKING:
    from checkpoint.storage.layout import CheckpointStorage


class TaskSnapshot(Protocol):
    """What is written of a task's snapshot: the task's `runtime.core.subtask_checkpoint.TaskSnapshot`
    (a dataclass) is one; described here so the file code needs nothing from the runtime above it."""

    task_id: TaskId
    checkpoint_id: int
    #: keyed state (`state.keyed` snapshot) or None
    keyed: Any

    def to_files(self) -> dict[str, bytes]: ...


class SnapshotCancelledError(StorageError):
    """The checkpoint was aborted while its snapshot was being uploaded; the upload stopped."""


@dataclass(frozen=True)
class StateFileOptions:
    """How snapshots are written (from `CheckpointConfig`)."""

    incremental: bool = False
    merging: bool = False
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    compaction_threshold: float | None = DEFAULT_COMPACTION_THRESHOLD
    rebase_ratio: float = DEFAULT_REBASE_RATIO

    @property
    def legacy(self) -> bool:
        """Full snapshots, one file per kind: what `SnapshotWriter` always did."""
        return not self.incremental and not self.merging

    @classmethod
    def from_config(cls, config: object | None) -> StateFileOptions:
        if config is None:
            return cls()
        return cls(
            incremental=getattr(config, "state_backend", "memory") == "incremental",
            merging=bool(getattr(config, "file_merging", False)),
            max_file_size=getattr(config, "max_file_size", DEFAULT_MAX_FILE_SIZE),
            compaction_threshold=getattr(config, "compaction_threshold", DEFAULT_COMPACTION_THRESHOLD),
        )


@dataclass(frozen=True)
class WriteRecord:
    """What one task wrote for one checkpoint (for stats and benchmarks)."""

    task: str
    checkpoint_id: int
    files: int
    bytes: int
    reused_pieces: int = 0


@dataclass
class _Prepared:
    files: dict[str, bytes]
    handles: dict[str, tuple[StateHandle, ...]]
    plan: IncrementalPlan | None = None
    reused: int = 0


@dataclass
class _TaskFiles:
    strategy: IncrementalSnapshotStrategy | None
    prepared: dict[int, _Prepared] = field(default_factory=dict)
    #: checkpoint -> files written for it that no completed checkpoint references yet
    new_paths: dict[int, list[str]] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)
    #: the newest checkpoint completed for the task: an upload for one up to it is obsolete
    completed: int = 0


class StateFileWriter:
    """Incremental and merged snapshot files of one job. Thread-safe (one lock)."""

    def __init__(self, storage: CheckpointStorage, job_id: str, options: StateFileOptions) -> None:
        self.storage = storage
        self.job_id = job_id
        self.options = options
        self._tasks: dict[TaskId, _TaskFiles] = {}
        self._lock = threading.RLock()
        self.history: list[WriteRecord] = []
        #: task -> path -> handle of the shared files its chains may reuse
        self._known_handles: dict[str, dict[str, StateHandle]] = {}

    def _task(self, task_id: TaskId) -> _TaskFiles:
        entry = self._tasks.get(task_id)
        if entry is None:
            strategy = None
            if self.options.incremental:
                strategy = IncrementalSnapshotStrategy(
                    str(task_id), rebase_ratio=self.options.rebase_ratio,
                    compaction_threshold=self.options.compaction_threshold if self.options.merging else None)
            entry = self._tasks[task_id] = _TaskFiles(strategy)
        return entry

    def strategy(self, task_id: TaskId) -> IncrementalSnapshotStrategy | None:
        return self._task(task_id).strategy

    # ------------------------------------------------------------------ prepare

    def prepare(self, snapshot: TaskSnapshot) -> dict[str, bytes]:
        """Plan and serialise; return path -> bytes of every file `write` will upload.

        Raises:
            StorageError: a file to compact could not be read back.
            StateSerializationError: state that Arrow cannot carry.
        """
        task_id, checkpoint_id = snapshot.task_id, snapshot.checkpoint_id
        with self._lock:
            entry = self._task(task_id)
            if checkpoint_id in entry.prepared:
                return entry.prepared[checkpoint_id].files
            private = dataclasses.replace(snapshot, keyed=None).to_files() if entry.strategy else snapshot.to_files()
            files: dict[str, bytes] = {}
            handles: dict[str, list[StateHandle]] = {}
            plan = None
            shared_handles: list[StateHandle] = []
            if entry.strategy is not None and snapshot.keyed is not None:
                plan = entry.strategy.plan(snapshot.keyed)
                pieces = list(plan.pieces) + self._copies(plan)
                locations, sizes = self._lay_out_shared(task_id, checkpoint_id, pieces, files, shared_handles)
                chains = entry.strategy.record(plan, locations, sizes)
                manifest = entry.strategy.manifest(plan, snapshot.keyed, chains)
                private = {"keyed": manifest.to_bytes(), **private}
                used = set(manifest.files())
                shared_handles = [h for h in shared_handles if h.path in used]
                shared_handles += self._reused_handles(entry.strategy, used, {h.path for h in shared_handles})
            self._lay_out_private(task_id, checkpoint_id, private, files, handles,
                                  plan.reuse_floor if plan else None)
            if plan is not None:
                handles["keyed"] = handles.get("keyed", []) + sorted(shared_handles, key=lambda h: h.path)
            prepared = _Prepared(files, {k: tuple(v) for k, v in handles.items()}, plan,
                                 plan.num_reused if plan else 0)
            entry.prepared[checkpoint_id] = prepared
            return files

    def _copies(self, plan: IncrementalPlan) -> list[Piece]:
        """Compaction: read the live pieces of the files being compacted."""
        pieces, cache = [], {}
        for name, link in sorted(plan.copies.items()):
            data = cache.get(link.path)
            if data is None:
                data = cache[link.path] = self.storage.blob_store.get(link.path)
            pieces.append(Piece(name, -1, link.kind, data[link.offset:link.offset + link.length]))
        return pieces

    def _lay_out_shared(self, task_id: TaskId, checkpoint_id: int, pieces: list[Piece],
                        files: dict[str, bytes], handles: list[StateHandle]
                        ) -> tuple[dict[str, tuple[str, int, int]], dict[str, int]]:
        shared = self.storage.shared_dir(self.job_id)
        locations: dict[str, tuple[str, int, int]] = {}
        sizes: dict[str, int] = {}
        task = _file_safe(str(task_id))
        if self.options.merging:
            packed = pack_segments(task, checkpoint_id, [(p.name, p.data) for p in pieces],
                                   self.options.max_file_size)
            for physical in packed:
                path = f"{shared}/{physical.name}"
                for seg in physical.segments:
                    locations[seg.name] = (path, seg.offset, seg.length)
                self._add_shared(path, physical.data, files, handles, sizes)
        else:
            for piece in pieces:
                path = f"{shared}/{task}/chk-{checkpoint_id}-{piece.name}"
                locations[piece.name] = (path, 0, len(piece.data))
                self._add_shared(path, piece.data, files, handles, sizes)
        return locations, sizes

    @staticmethod
    def _add_shared(path: str, data: bytes, files: dict[str, bytes], handles: list[StateHandle],
                    sizes: dict[str, int]) -> None:
        files[path] = data
        sizes[path] = len(data)
        handles.append(StateHandle(path, len(data), checksum(data), 0, None, key=path))

    def _reused_handles(self, strategy: IncrementalSnapshotStrategy, used: set[str],
                        new: set[str]) -> list[StateHandle]:
        known = self._known_handles.get(strategy.task, {})
        out = []
        for path in sorted(used - new):
            handle = known.get(path)
            if handle is None:
                raise StorageError(f"task {strategy.task}: no handle known for reused shared file {path}")
            out.append(handle)
        return out

    def _lay_out_private(self, task_id: TaskId, checkpoint_id: int, private: dict[str, bytes],
                         files: dict[str, bytes], handles: dict[str, list[StateHandle]],
                         reuse_floor: int | None) -> None:
        owned = self.storage.task_owned_dir(self.job_id, checkpoint_id)
        kinds = sorted(private, key=lambda k: (k != "keyed", k))

        def key_of(kind: str) -> str | None:
            if kind == "keyed" and reuse_floor is not None:
                return manifest_key(str(task_id), checkpoint_id, reuse_floor)
            return None

        if not kinds:
            return
        if self.options.merging:
            packed = pack_segments(_file_safe(str(task_id)), checkpoint_id,
                                   [(k, private[k]) for k in kinds], max_file_size=1 << 62)
            (physical,) = packed
            path = f"{owned}/{_file_safe(str(task_id))}.merged"
            files[path] = physical.data
            for seg in physical.segments:
                handles.setdefault(seg.name, []).append(StateHandle(
                    path, len(physical.data), seg.checksum, seg.offset, seg.length, key=key_of(seg.name)))
        else:
            for kind in kinds:
                path = f"{owned}/{task_id}.{kind}"
                data = private[kind]
                files[path] = data
                handles.setdefault(kind, []).append(StateHandle(path, len(data), checksum(data), key=key_of(kind)))

    # ------------------------------------------------------------------ write

    def write(self, snapshot: TaskSnapshot) -> dict[str, tuple[StateHandle, ...]]:
        """Upload what `prepare` planned; return the handles per kind.

        Raises:
            SnapshotCancelledError: the checkpoint was aborted meanwhile, or a newer one completed
                (a slow upload finishing late: it can only be discarded; written files removed).
            StorageError: a write failed (files written so far are removed).
        """
        task_id, checkpoint_id = snapshot.task_id, snapshot.checkpoint_id
        with self._lock:
            entry = self._task(task_id)
            self._check_live(entry, task_id, checkpoint_id)
            if checkpoint_id not in entry.prepared:
                self.prepare(snapshot)
            prepared = entry.prepared[checkpoint_id]
        written: list[str] = []
        try:
            for path, data in prepared.files.items():
                with self._lock:
                    self._check_live(entry, task_id, checkpoint_id)
                self.storage.write_file(path, data)
                written.append(path)
        except Exception:
            self._delete(written)
            with self._lock:
                entry.prepared.pop(checkpoint_id, None)
                if entry.strategy is not None:
                    entry.strategy.notify_aborted(checkpoint_id)
            raise
        with self._lock:
            entry.new_paths[checkpoint_id] = written
            known = self._known_handles.setdefault(str(task_id), {})
            for group in prepared.handles.values():
                for handle in group:
                    if handle.key == handle.path:
                        known[handle.path] = handle
            self.history.append(WriteRecord(str(task_id), checkpoint_id, len(written),
                                            sum(len(prepared.files[p]) for p in written), prepared.reused))
        return prepared.handles

    @staticmethod
    def _check_live(entry: _TaskFiles, task_id: TaskId, checkpoint_id: int) -> None:
        if checkpoint_id in entry.aborted:
            raise SnapshotCancelledError(f"checkpoint {checkpoint_id} was aborted while {task_id} uploaded its snapshot")
        if checkpoint_id <= entry.completed:
            raise SnapshotCancelledError(f"checkpoint {checkpoint_id} was subsumed by completed checkpoint "
                                         f"{entry.completed} while {task_id} uploaded its snapshot")

    # ------------------------------------------------------------------ lifecycle

    def discard(self, handles: dict[str, tuple[StateHandle, ...]]) -> None:
        """Delete the files this writer created for a snapshot that will not be acknowledged;
        pieces the handles reuse from earlier checkpoints are left alone."""
        paths = {h.path for group in handles.values() for h in group}
        doomed: list[str] = []
        with self._lock:
            for entry in self._tasks.values():
                for checkpoint_id, written in list(entry.new_paths.items()):
                    if paths & set(written):
                        doomed += written
                        del entry.new_paths[checkpoint_id]
                        entry.prepared.pop(checkpoint_id, None)
                        if entry.strategy is not None:
                            entry.strategy.notify_aborted(checkpoint_id)
        self._delete(doomed)

    def notify_complete(self, task_id: TaskId, checkpoint_id: int) -> None:
        with self._lock:
            entry = self._task(task_id)
            entry.completed = max(entry.completed, checkpoint_id)
            if entry.strategy is not None:
                entry.strategy.notify_complete(checkpoint_id)
                known = self._known_handles.get(str(task_id), {})
                live = set(entry.strategy.file_sizes)
                for path in [p for p in known if p not in live]:
                    del known[path]
            for cid in [c for c in entry.new_paths if c <= checkpoint_id]:
                del entry.new_paths[cid]  # completed (the registry owns them) or subsumed
            for cid in [c for c in entry.prepared if c <= checkpoint_id]:
                del entry.prepared[cid]
            entry.aborted = {c for c in entry.aborted if c > checkpoint_id}

    def notify_aborted(self, task_id: TaskId, checkpoint_id: int) -> None:
        """Stop an in-flight upload of `checkpoint_id` and delete what it wrote."""
        with self._lock:
            entry = self._task(task_id)
            entry.aborted.add(checkpoint_id)
            entry.prepared.pop(checkpoint_id, None)
            if entry.strategy is not None:
                entry.strategy.notify_aborted(checkpoint_id)
            doomed = entry.new_paths.pop(checkpoint_id, [])
        self._delete(doomed)

    def reset(self, task_ids: Iterable[TaskId] | None = None) -> None:
        """Forget tasks (a new execution attempt): their next snapshots start from scratch.

        Files of their unfinished snapshots are not deleted here — whether those checkpoints
        completed may not be known yet; the executors' orphan cleanup (`checkpoint.io.cleanup`)
        removes them once recovery completed.
        """
        with self._lock:
            for task_id in list(self._tasks) if task_ids is None else list(task_ids):
                self._tasks.pop(task_id, None)
                self._known_handles.pop(str(task_id), None)

    def _delete(self, paths: Iterable[str]) -> None:
        for path in paths:
            with contextlib.suppress(StorageError):  # else left for the orphan cleaner
                self.storage.delete_file(path)

    def __repr__(self) -> str:
        return f"StateFileWriter(job={self.job_id!r}, {self.options})"


def _file_safe(name: str) -> str:
    return name.replace("/", "_").replace(" ", "_").replace(":", "_")
