"""Incremental keyed-state snapshots: write what changed, reference the rest.

Theory of operation
-------------------
The heap `KeyedStateBackend` stays as it is; what changes is how its snapshots reach storage.
A task's keyed state is kept as one *chain* per key group, like RocksDB's sst files:

    chain(kg) = base(kg) , delta(kg) , delta(kg) , ...

A *base* piece holds the key group's whole state; a *delta* piece holds the keys upserted and
the keys removed (tombstones) since the chain's previous piece. Pieces are Arrow blobs
(`state.serialization` keyed blobs of one key group; tombstones are value states named
``"\\x00deleted:" + state``), never pickled, and immutable once written.

`IncrementalSnapshotStrategy` (one per task, pure) turns each `KeyedStateSnapshot` into a plan:

* The *base* of a task is the last checkpoint it was told completed (`notify_complete`); only the
  pieces of that checkpoint are reused, so nothing a pending or aborted checkpoint wrote is ever
  referenced by another checkpoint (chk-2 and chk-3 both based on chk-1, as in the seed).
* Per key group: unchanged since the base (the frozen group objects are identical, since the
  backend shares unchanged groups between snapshots) -> reuse the chain; changed -> a delta
  against the base's state; new, or the chain's deltas outgrew `rebase_ratio` times its base
  (spread per key group so rebases do not all fall on one checkpoint), or the chain reached
  `max_chain` -> a fresh base, which kills the old chain once older checkpoints are dropped.
* Compaction (`state.compaction`): chain pieces lying in a shared file whose amplification, as
  seen from the base, exceeds the threshold are copied into this checkpoint's file.

A *manifest* (Arrow IPC, one per task per checkpoint) lists the chains as (file, offset, length)
links and carries the task's *reuse floor*, the oldest checkpoint whose pieces the task may still
reuse later (see `state.registry`). `restore_keyed_snapshot` rebuilds a `KeyedStateSnapshot` from
a manifest and the shared files it names, so rescaling works exactly as with full snapshots.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from state.backends import MemoryStateBackend, register_state_backend
from state.compaction import files_to_compact
from state.errors import StateFormatError
from state.key_groups import KeyGroupRange
from state.serialization import KeyedStateSnapshot, StateKind, keyed_snapshot_from_bytes, write_stream

BASE = 0
DELTA = 1
_TOMBSTONE = "\x00deleted:"
_MANIFEST_FORMAT = "barrierflow.manifest/1"
_ABSENT: Any = object()

DEFAULT_REBASE_RATIO = 1.0
DEFAULT_MAX_CHAIN = 64


@register_state_backend
class IncrementalStateBackend(MemoryStateBackend):
    """Heap state whose checkpoints are incremental (select with ``state_backend="incremental"``).

    The state itself lives on the heap exactly as with the memory backend; the snapshot writer
    sees this name and writes changed key groups only (`IncrementalSnapshotStrategy`).
    """

    name = "incremental"


# --------------------------------------------------------------------------- pieces


def encode_piece(snapshot: KeyedStateSnapshot, key_group: int, upserts: Mapping[str, Mapping[Any, Any]],
                 deletes: Mapping[str, Iterable[Any]] = MappingProxyType({})) -> bytes:
    """One key group's piece: `upserts[state] = {key: value}` plus tombstones `deletes[state]`.

    Raises:
        StateSerializationError: a key or value does not fit Arrow (names operator and state).
    """
    kinds: dict[str, StateKind] = {}
    groups: dict[str, Mapping[int, Mapping[Any, Any]]] = {}
    for name, entries in upserts.items():
        if entries:
            kinds[name] = snapshot.kinds[name]
            groups[name] = {key_group: entries}
    for name, keys in deletes.items():
        gone = dict.fromkeys(keys, True)
        if gone:
            kinds[_TOMBSTONE + name] = StateKind.VALUE
            groups[_TOMBSTONE + name] = {key_group: gone}
    piece = KeyedStateSnapshot(snapshot.operator_name, snapshot.checkpoint_id, snapshot.max_parallelism,
                               KeyGroupRange(key_group, key_group + 1), kinds, groups)
    return piece.to_bytes()


def apply_piece(state: dict[str, dict[Any, Any]], kinds: dict[str, StateKind], blob: bytes,
                key_group: int) -> None:
    """Apply one piece (base or delta) of `key_group` to `state[name] = {key: value}` in place.

    Raises:
        StateFormatError: the blob is not a piece of `key_group`.
    """
    piece = keyed_snapshot_from_bytes(blob)
    if piece.key_group_range != KeyGroupRange(key_group, key_group + 1):
        raise StateFormatError(f"piece of key groups {piece.key_group_range} found where key group "
                               f"{key_group} was expected")
    for name, kind in piece.kinds.items():
        entries = piece.groups[name].get(key_group, {})
        if name.startswith(_TOMBSTONE):
            target = state.get(name[len(_TOMBSTONE):])
            if target is not None:
                for key in entries:
                    target.pop(key, None)
        else:
            kinds[name] = kind
            state.setdefault(name, {}).update(entries)


# --------------------------------------------------------------------------- manifest


@dataclass(frozen=True, slots=True)
class Link:
    """One piece of a chain: what it is and where it lives."""

    kind: int  # BASE or DELTA
    checkpoint_id: int  # the checkpoint that wrote the piece first
    path: str
    offset: int
    length: int


@dataclass(frozen=True)
class Manifest:
    """A task's keyed state at one checkpoint, as chains of links."""

    operator_name: str
    task: str
    checkpoint_id: int
    reuse_floor: int
    max_parallelism: int
    key_group_range: KeyGroupRange
    kinds: Mapping[str, StateKind]
    chains: Mapping[int, tuple[Link, ...]]

    def to_bytes(self) -> bytes:
        paths = sorted({link.path for chain in self.chains.values() for link in chain})
        index = {p: i for i, p in enumerate(paths)}
        rows: dict[str, list[int]] = {"key_group": [], "kind": [], "checkpoint_id": [], "file": [],
                                      "offset": [], "length": []}
        for kg in sorted(self.chains):
            for link in self.chains[kg]:
                rows["key_group"].append(kg)
                rows["kind"].append(link.kind)
                rows["checkpoint_id"].append(link.checkpoint_id)
                rows["file"].append(index[link.path])
                rows["offset"].append(link.offset)
                rows["length"].append(link.length)
        meta = {"format": _MANIFEST_FORMAT, "operator": self.operator_name, "task": self.task,
                "checkpoint_id": self.checkpoint_id, "reuse_floor": self.reuse_floor,
                "max_parallelism": self.max_parallelism,
                "key_groups": [self.key_group_range.start, self.key_group_range.end],
                "kinds": {n: k.value for n, k in self.kinds.items()}, "files": paths}
        types = {"key_group": pa.int32(), "kind": pa.int8(), "checkpoint_id": pa.int64(), "file": pa.int32(),
                 "offset": pa.int64(), "length": pa.int64()}
        table = pa.table({n: pa.array(v, types[n]) for n, v in rows.items()},
                         metadata={"barrierflow.manifest": json.dumps(meta, sort_keys=True)})
        return write_stream(table)

    @classmethod
    def from_bytes(cls, blob: bytes) -> Manifest:
        """Raises: StateFormatError naming what is wrong."""
        try:
            table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
            meta = json.loads((table.schema.metadata or {})[b"barrierflow.manifest"])
            if meta.get("format") != _MANIFEST_FORMAT:
                raise ValueError(f"unknown format {meta.get('format')!r}")
            paths = meta["files"]
            cols = {n: table.column(n).to_pylist() for n in
                    ("key_group", "kind", "checkpoint_id", "file", "offset", "length")}
            chains: dict[int, list[Link]] = {}
            for kg, kind, cid, f, off, length in zip(*cols.values()):
                chains.setdefault(kg, []).append(Link(kind, cid, paths[f], off, length))
            start, end = meta["key_groups"]
            return cls(meta["operator"], meta["task"], int(meta["checkpoint_id"]), int(meta["reuse_floor"]),
                       int(meta["max_parallelism"]), KeyGroupRange(start, end),
                       {n: StateKind(k) for n, k in meta["kinds"].items()},
                       {kg: tuple(c) for kg, c in chains.items()})
        except (pa.ArrowException, OSError, KeyError, ValueError, TypeError, IndexError, RecursionError) as exc:
            raise StateFormatError(f"cannot read incremental snapshot manifest: {exc!r}") from None

    def files(self) -> list[str]:
        return sorted({link.path for chain in self.chains.values() for link in chain})


def restore_keyed_snapshot(manifest: Manifest, read_file: Callable[[str], bytes]) -> KeyedStateSnapshot:
    """Rebuild the task's keyed state at the manifest's checkpoint.

    Args:
        manifest: the task's manifest.
        read_file: path -> the verified bytes of that shared file (called once per file).

    Raises:
        StateFormatError: a piece is corrupt or does not belong where the manifest says.
    """
    files: dict[str, bytes] = {}
    kinds: dict[str, StateKind] = dict(manifest.kinds)
    groups: dict[str, dict[int, dict[Any, Any]]] = {name: {} for name in kinds}
    for kg in sorted(manifest.chains):
        state: dict[str, dict[Any, Any]] = {}
        for link in manifest.chains[kg]:
            data = files.get(link.path)
            if data is None:
                data = files[link.path] = read_file(link.path)
            piece = data[link.offset:link.offset + link.length]
            if len(piece) != link.length:
                raise StateFormatError(f"shared state file {link.path} is too short for the piece of key "
                                       f"group {kg} at offset {link.offset}")
            apply_piece(state, kinds, piece, kg)
        for name, entries in state.items():
            if entries:
                groups.setdefault(name, {})[kg] = entries
    return KeyedStateSnapshot(manifest.operator_name, manifest.checkpoint_id, manifest.max_parallelism,
                              manifest.key_group_range, kinds, groups)


# --------------------------------------------------------------------------- strategy


@dataclass(frozen=True)
class Piece:
    """A piece the plan needs written: its name in the plan, key group, kind and bytes."""

    name: str
    key_group: int
    kind: int
    data: bytes


@dataclass
class IncrementalPlan:
    """What one snapshot needs: new pieces, copies (compaction) and the chains referring to both.

    A chain entry is a `Link` (reused from the base) or the name of a piece / copy of this plan.
    """

    checkpoint_id: int
    reuse_floor: int
    pieces: list[Piece] = field(default_factory=list)
    #: name -> the link whose bytes are copied into this checkpoint's file (compaction)
    copies: dict[str, Link] = field(default_factory=dict)
    chains: dict[int, list[Link | str]] = field(default_factory=dict)
    num_reused: int = 0


@dataclass
class _Pending:
    snapshot: KeyedStateSnapshot
    chains: dict[int, tuple[Link, ...]] | None = None  # set once written


class IncrementalSnapshotStrategy:
    """Plans the incremental snapshots of one task (see the module header). Pure; not thread-safe.

    Args:
        task: the task's name (in manifests and piece names).
        rebase_ratio: write a new base once a chain's deltas exceed this times its base (spread
            between 0.5x and 1.5x over the key groups).
        max_chain: longest chain (base + deltas) before a new base.
        compaction_threshold: compact shared files above this amplification; None: never.
    """

    def __init__(self, task: str, *, rebase_ratio: float = DEFAULT_REBASE_RATIO,
                 max_chain: int = DEFAULT_MAX_CHAIN, compaction_threshold: float | None = None) -> None:
        if not rebase_ratio > 0:
            raise ValueError(f"rebase_ratio must be > 0, got {rebase_ratio!r}")
        if not isinstance(max_chain, int) or max_chain < 1:
            raise ValueError(f"max_chain must be an integer >= 1, got {max_chain!r}")
        self.task = task
        self.rebase_ratio = rebase_ratio
        self.max_chain = max_chain
        self.compaction_threshold = compaction_threshold
        self.base_id: int | None = None
        self._base_snapshot: KeyedStateSnapshot | None = None
        self._base_chains: dict[int, tuple[Link, ...]] = {}
        self._pending: dict[int, _Pending] = {}
        #: physical sizes of the shared files this task wrote
        self.file_sizes: dict[str, int] = {}

    # -- planning ------------------------------------------------------------------------------

    def reuse_floor(self, checkpoint_id: int) -> int:
        """No snapshot after `checkpoint_id` reuses pieces of a checkpoint older than this."""
        candidates = list(self._pending)
        if self.base_id is not None:
            candidates.append(self.base_id)
        return min(candidates) if candidates else checkpoint_id

    def plan(self, snapshot: KeyedStateSnapshot) -> IncrementalPlan:
        """Decide, per key group, reuse / delta / base (and compaction copies)."""
        checkpoint_id = snapshot.checkpoint_id
        if checkpoint_id in self._pending or (self.base_id is not None and checkpoint_id <= self.base_id):
            raise ValueError(f"task {self.task}: checkpoint {checkpoint_id} planned twice or out of order")
        plan = IncrementalPlan(checkpoint_id, self.reuse_floor(checkpoint_id))
        base = self._base_snapshot
        compact = files_to_compact(self.live_files(), self.compaction_threshold)
        names = list(snapshot.kinds)
        for kg in self._key_groups_to_plan(snapshot, names):
            new = {n: snapshot.groups[n].get(kg) for n in names}
            chain = self._base_chains.get(kg)
            if chain is None or base is None:
                if any(new.values()):
                    self._add_base(plan, snapshot, kg, new)
                continue
            old = {n: base.groups[n].get(kg) if n in base.groups else None for n in names}
            if all(new[n] is old[n] for n in names):
                plan.chains[kg] = self._relocate(plan, kg, chain, compact)
                plan.num_reused += len(chain)
                continue
            if not any(new.values()):
                continue  # the key group was emptied: no chain
            upserts, deletes = _diff(old, new)
            delta = encode_piece(snapshot, kg, upserts, deletes)
            deltas = sum(link.length for link in chain[1:]) + len(delta)
            if len(chain) + 1 > self.max_chain or deltas > self._rebase_limit(kg) * chain[0].length:
                self._add_base(plan, snapshot, kg, new)
                continue
            name = f"kg{kg}-d{checkpoint_id}"
            plan.pieces.append(Piece(name, kg, DELTA, delta))
            plan.chains[kg] = [*self._relocate(plan, kg, chain, compact), name]
            plan.num_reused += len(chain)
        self._pending[checkpoint_id] = _Pending(snapshot)
        return plan

    def _key_groups_to_plan(self, snapshot: KeyedStateSnapshot, names: list[str]) -> list[int]:
        """The key groups of the snapshot's range, ascending, that hold state now or have a
        chain: any other has nothing to plan (most of a range, for a job with few keys)."""
        key_groups = snapshot.key_group_range
        if not len(key_groups):
            return []
        candidates = set(self._base_chains)
        for name in names:
            candidates.update(snapshot.groups[name])
        return sorted(kg for kg in candidates if kg in key_groups)

    def _rebase_limit(self, kg: int) -> float:
        spread = ((kg * 2654435761) % 1009) / 1009  # deterministic, in [0, 1)
        return self.rebase_ratio * (0.5 + spread)

    def _add_base(self, plan: IncrementalPlan, snapshot: KeyedStateSnapshot, kg: int,
                  new: Mapping[str, Mapping[Any, Any] | None]) -> None:
        name = f"kg{kg}-b{plan.checkpoint_id}"
        plan.pieces.append(Piece(name, kg, BASE, encode_piece(snapshot, kg, {n: g for n, g in new.items() if g})))
        plan.chains[kg] = [name]

    @staticmethod
    def _relocate(plan: IncrementalPlan, kg: int, chain: tuple[Link, ...], compact: set[str]) -> list[Link | str]:
        out: list[Link | str] = []
        for i, link in enumerate(chain):
            if link.path in compact:
                name = f"kg{kg}-c{plan.checkpoint_id}-{i}"
                plan.copies[name] = link
                out.append(name)
            else:
                out.append(link)
        return out

    def record(self, plan: IncrementalPlan, locations: Mapping[str, tuple[str, int, int]],
               file_sizes: Mapping[str, int]) -> dict[int, tuple[Link, ...]]:
        """The plan's pieces were laid out (name -> (path, offset, length)): final chains.

        Raises:
            KeyError: a piece of the plan has no location.
        """
        kinds = {p.name: (p.kind, plan.checkpoint_id) for p in plan.pieces}
        kinds.update({n: (link.kind, link.checkpoint_id) for n, link in plan.copies.items()})
        chains: dict[int, tuple[Link, ...]] = {}
        for kg, entries in plan.chains.items():
            links = []
            for entry in entries:
                if isinstance(entry, Link):
                    links.append(entry)
                else:
                    kind, cid = kinds[entry]
                    path, offset, length = locations[entry]
                    links.append(Link(kind, cid, path, offset, length))
            chains[kg] = tuple(links)
        self.file_sizes.update(file_sizes)
        pending = self._pending.get(plan.checkpoint_id)
        if pending is not None:
            pending.chains = chains
        return chains

    def manifest(self, plan: IncrementalPlan, snapshot: KeyedStateSnapshot,
                 chains: Mapping[int, tuple[Link, ...]]) -> Manifest:
        return Manifest(snapshot.operator_name, self.task, plan.checkpoint_id, plan.reuse_floor,
                        snapshot.max_parallelism, snapshot.key_group_range, dict(snapshot.kinds), dict(chains))

    # -- notifications -------------------------------------------------------------------------

    def notify_complete(self, checkpoint_id: int) -> None:
        """`checkpoint_id` completed: it becomes the base if this task wrote it; older pending
        snapshots are subsumed."""
        pending = self._pending.get(checkpoint_id)
        if pending is not None and pending.chains is not None and \
                (self.base_id is None or checkpoint_id > self.base_id):
            self.base_id = checkpoint_id
            self._base_snapshot = pending.snapshot
            self._base_chains = pending.chains
        for cid in [c for c in self._pending if c <= checkpoint_id]:
            del self._pending[cid]
        keep = {link.path for chains in [self._base_chains, *(p.chains for p in self._pending.values() if p.chains)]
                for chain in chains.values() for link in chain}
        self.file_sizes = {p: s for p, s in self.file_sizes.items() if p in keep}

    def notify_aborted(self, checkpoint_id: int) -> None:
        self._pending.pop(checkpoint_id, None)

    # -- inspection ----------------------------------------------------------------------------

    def live_files(self) -> dict[str, tuple[int, int]]:
        """Shared files the base uses: path -> (physical bytes, bytes the base uses)."""
        live: dict[str, int] = {}
        for chain in self._base_chains.values():
            for link in chain:
                live[link.path] = live.get(link.path, 0) + link.length
        return {p: (self.file_sizes.get(p, b), b) for p, b in live.items()}

    @property
    def pending_ids(self) -> list[int]:
        return sorted(self._pending)

    def __repr__(self) -> str:
        return (f"IncrementalSnapshotStrategy({self.task!r}, base={self.base_id}, "
                f"pending={self.pending_ids}, chains={len(self._base_chains)})")


def _diff(old: Mapping[str, Mapping[Any, Any] | None],
          new: Mapping[str, Mapping[Any, Any] | None]) -> tuple[dict[str, dict[Any, Any]], dict[str, list[Any]]]:
    upserts: dict[str, dict[Any, Any]] = {}
    deletes: dict[str, list[Any]] = {}
    for name, group in new.items():
        before = old.get(name)
        if group is before:
            continue
        before = before or {}
        group = group or {}
        changed = {}
        for key, value in group.items():
            prior = before.get(key, _ABSENT)
            if prior is not value and (prior is _ABSENT or type(prior) is not type(value) or prior != value):
                changed[key] = value
        if changed:
            upserts[name] = changed
        gone = [key for key in before if key not in group]
        if gone:
            deletes[name] = gone
    return upserts, deletes
