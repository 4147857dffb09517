"""`SharedStateRegistry`: reference counts of state shared across checkpoints (Flink's `SharedStateRegistry`).

Theory of operation
-------------------
Incremental checkpoints reference pieces of state ("segments") written by earlier checkpoints;
file merging packs many segments into one physical file. A segment is named by a *logical key*
(`StateHandle.key`); a physical file is named by its path. The registry lives with the
completed-checkpoint store on the coordinator side and decides, and only decides, which physical
files may be deleted — the store does the I/O.

* `register_checkpoint(id, handles, reuse_floors)` when a checkpoint completes: every handle with
  a key gets one reference from the checkpoint. A key registered before with a *different*
  physical copy (the seed's case: chk-2 and chk-3, both based on chk-1, each uploaded `4.sst`)
  resolves to the first copy; the new copy becomes a dead segment of its file. The returned map
  tells the store which handles to rewrite before the metadata is written.
* `release_checkpoint(id)` when the store drops a checkpoint (subsumed, or discarded).
* `collect()` after either: returns the physical files none of whose segments is alive.

Two rules keep a live segment from ever being deleted:

1. **Deletion is decided only after a whole checkpoint was registered or released**, never while
   registering one handle. In the seed's case chk-3's copy of `4.sst` has no reference the
   moment chk-3 registers it, but `5.sst` in the same physical file is registered just after;
   deleting at "reference count reached 0" would destroy `5.sst`.
2. **A key without references stays alive while a task may still reuse it.** A task reuses the
   segments of the last completed checkpoint it has been *told* about, which can be older than
   the store's latest (notifications travel). Every task reports a *reuse floor* with each
   snapshot (`manifest_key`): no later snapshot of that task reuses a segment of a checkpoint
   older than it. The horizon is the lowest floor in the latest registered checkpoint; a key
   last used by a checkpoint at or above the horizon is kept (a "zombie") until the horizon
   passes it.

After a coordinator restart the registry is rebuilt from the retained checkpoints (`rebuild`);
files it never learned of (uploads of checkpoints that never completed) are orphans, deleted by
the executors once recovery completed (`checkpoint.io.cleanup`) or by `barrierflow checkpoints gc`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vocabulary.handles import StateHandle

_MANIFEST_MARK = "/manifest/"


def manifest_key(task: str, checkpoint_id: int, reuse_floor: int) -> str:
    """The logical key of a task's snapshot manifest; it carries the task's reuse floor."""
    return f"{task}{_MANIFEST_MARK}{checkpoint_id}@{reuse_floor}"


def reuse_floor_of(key: str) -> int | None:
    """The reuse floor a manifest key carries (None: not a manifest key)."""
    if _MANIFEST_MARK not in key:
        return None
    _, _, tail = key.rpartition("@")
    try:
        return int(tail)
    except ValueError:
        return None


class RegistryError(ValueError):
    """A registration the registry cannot accept (names the checkpoint and key)."""


@dataclass
class _Entry:
    handle: StateHandle
    #: ids of registered (retained) checkpoints referencing the key: the reference count
    refs: set[int] = field(default_factory=set)
    last_used: int = 0


@dataclass
class _File:
    size: int
    #: segment id (key, or "dup:<key>@<checkpoint>" for a duplicate copy) -> length
    segments: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RegistryStats:
    """A snapshot of the registry for reports and benchmarks."""

    num_keys: int
    num_referenced_keys: int
    num_files: int
    physical_bytes: int
    live_bytes: int

    @property
    def space_amplification(self) -> float:
        """Physical bytes of the registered files / bytes of segments retained checkpoints use."""
        return self.physical_bytes / self.live_bytes if self.live_bytes else 1.0


class SharedStateRegistry:
    """Reference counts of logical segments and their physical files. Pure: no I/O, no clock.

    Not thread-safe; the store that owns it serialises calls.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._files: dict[str, _File] = {}
        self._by_checkpoint: dict[int, list[str]] = {}
        self._latest = 0
        self._horizon = 0

    # ------------------------------------------------------------------ registration

    def register_checkpoint(self, checkpoint_id: int, handles: Iterable[StateHandle],
                            reuse_floors: Iterable[int] = ()) -> dict[StateHandle, StateHandle]:
        """Count one reference from `checkpoint_id` to every keyed handle in `handles`.

        Args:
            checkpoint_id: the completing checkpoint (not registered before).
            handles: its state handles; those without a key are not shared and are ignored;
                manifest handles (`manifest_key`) only contribute their task's reuse floor.
            reuse_floors: more reuse floors (see the module header); with none at all, the floor
                is `checkpoint_id` (nothing older may be reused).

        Returns:
            Handles to replace before the checkpoint's metadata is written: a copy of a key that
            is already registered -> the registered copy.

        Raises:
            RegistryError: `checkpoint_id` is already registered.
        """
        if checkpoint_id in self._by_checkpoint:
            raise RegistryError(f"checkpoint {checkpoint_id} is already registered")
        replaced: dict[StateHandle, StateHandle] = {}
        keys: list[str] = []
        seen: set[str] = set()
        floors = list(reuse_floors)
        for handle in handles:
            key = handle.key
            if key is None or key in seen:
                continue
            floor = reuse_floor_of(key)
            if floor is not None:
                floors.append(floor)
                continue
            seen.add(key)
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(handle)
                self._file(handle).segments[key] = _length(handle)
            elif _same_bytes(entry.handle, handle):
                pass
            else:
                # the seed's 4.sst: reuse the registered copy; this copy's bytes are now dead
                # space in its file, which is deleted (by `collect`) once nothing in it lives
                replaced[handle] = entry.handle
                self._file(handle).segments.setdefault(f"dup:{key}@{checkpoint_id}", _length(handle))
            entry.refs.add(checkpoint_id)
            entry.last_used = max(entry.last_used, checkpoint_id)
            keys.append(key)
        self._by_checkpoint[checkpoint_id] = keys
        if checkpoint_id > self._latest:
            self._latest = checkpoint_id
            self._horizon = min(floors) if floors else checkpoint_id
        return replaced

    def release_checkpoint(self, checkpoint_id: int) -> None:
        """Drop the references of a checkpoint the store no longer retains (no-op if unknown)."""
        for key in self._by_checkpoint.pop(checkpoint_id, ()):
            entry = self._entries.get(key)
            if entry is not None:
                entry.refs.discard(checkpoint_id)

    def collect(self, *, ignore_horizon: bool = False) -> list[str]:
        """Forget dead keys and return the physical files that no live segment needs (sorted).

        A key is dead when no retained checkpoint references it and it was last used below the
        horizon (`ignore_horizon`: the job is gone, no task will reuse anything). The caller
        deletes the returned files.
        """
        horizon = float("inf") if ignore_horizon else self._horizon
        for key in [k for k, e in self._entries.items() if not e.refs and e.last_used < horizon]:
            entry = self._entries.pop(key)
            file = self._files.get(entry.handle.path)
            if file is not None:
                file.segments.pop(key, None)
        dead = []
        for path, file in self._files.items():
            if not any(seg in self._entries and self._entries[seg].handle.path == path
                       for seg in file.segments):
                dead.append(path)
        for path in dead:
            del self._files[path]
        return sorted(dead)

    def rebuild(self, checkpoints: Iterable[tuple[int, Iterable[StateHandle], Iterable[int]]]) -> None:
        """Forget everything, then register `(id, handles, reuse_floors)` oldest first (what a
        restarted coordinator does with the checkpoints it recovered)."""
        self.__init__()  # type: ignore[misc]
        for checkpoint_id, handles, floors in sorted(checkpoints, key=lambda c: c[0]):
            self.register_checkpoint(checkpoint_id, handles, floors)

    # ------------------------------------------------------------------ inspection

    def reference_count(self, key: str) -> int:
        entry = self._entries.get(key)
        return len(entry.refs) if entry else 0

    def handle_of(self, key: str) -> StateHandle | None:
        entry = self._entries.get(key)
        return entry.handle if entry else None

    @property
    def horizon(self) -> int:
        return self._horizon

    @property
    def registered_checkpoints(self) -> list[int]:
        return sorted(self._by_checkpoint)

    def keys_of(self, checkpoint_id: int) -> list[str]:
        return list(self._by_checkpoint.get(checkpoint_id, ()))

    def live_files(self) -> list[str]:
        """Physical files the registry keeps (some segment alive), sorted."""
        return sorted(self._files)

    def reference_counts(self) -> Mapping[str, int]:
        return {k: len(e.refs) for k, e in sorted(self._entries.items())}

    def stats(self) -> RegistryStats:
        live = sum(_length(e.handle) for e in self._entries.values() if e.refs)
        return RegistryStats(
            num_keys=len(self._entries),
            num_referenced_keys=sum(1 for e in self._entries.values() if e.refs),
            num_files=len(self._files),
            physical_bytes=sum(f.size for f in self._files.values()),
            live_bytes=live,
        )

    def _file(self, handle: StateHandle) -> _File:
        file = self._files.get(handle.path)
        if file is None:
            file = self._files[handle.path] = _File(handle.size)
        return file

    def __repr__(self) -> str:
        return (f"SharedStateRegistry(checkpoints={self.registered_checkpoints}, keys={len(self._entries)}, "
                f"files={len(self._files)}, horizon={self._horizon})")


def _length(handle: StateHandle) -> int:
    return handle.length if handle.length is not None else handle.size


def _same_bytes(a: StateHandle, b: StateHandle) -> bool:
    return (a.path, a.offset, a.length) == (b.path, b.offset, b.length)
