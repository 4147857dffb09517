"""State storage benchmark: full vs incremental, merging off/on, compaction off/on.

Drives the real pieces directly — heap `KeyedStateBackend`s, the `SnapshotWriter` both executors
use, the `StandaloneCompletedCheckpointStore` with its `SharedStateRegistry`, a local directory
through `FsBlobStore` — without a job around them, so only state storage is measured:

    keys (default 1M) spread over `parallelism` subtasks by key group; then `checkpoints` times:
    update `update_fraction` of the keys (uniformly at random), snapshot every subtask, write,
    acknowledge, complete (store + registry, retained=1), notify the writers.

Per configuration it reports files created and bytes written per checkpoint (state files; the
`_metadata` separately), files on disk at the end, space amplification (state bytes on disk /
bytes of the segments the retained checkpoint uses; mean over the last half of the run and at
the end) and the time to restore the last checkpoint into `parallelism` fresh backends.

    python -m benchmarks.state_storage [--keys 1000000] [--checkpoints 50] [--update-fraction 0.01]
                                       [--parallelism 4] [--configs full,full+merge,...]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from typing import Any

from benchmarks.report import add_output_arguments, add_sized_argument, markdown_table, output_of, parse_args
from checkpoint.completed import CompletedCheckpoint
from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.snapshot_writer import SnapshotWriter
from checkpoint.storage.layout import CheckpointStorage
from checkpoint.storage.store import StandaloneCompletedCheckpointStore
from runtime.core.barriers.handler import AlignmentStats
from runtime.core.subtask_checkpoint import TaskSnapshot
from state.incremental import Manifest, restore_keyed_snapshot
from state.key_groups import key_group_for, key_group_range_for_subtask
from state.keyed import KeyedStateBackend
from state.registry import reuse_floor_of
from state.serialization import keyed_snapshot_from_bytes
from vocabulary.handles import TaskAcknowledgement, TaskId
from vocabulary.options import CheckpointConfig

CONFIGS: dict[str, dict[str, Any]] = {
    "full": {"state_backend": "memory", "file_merging": False},
    "full+merge": {"state_backend": "memory", "file_merging": True},
    "incremental": {"state_backend": "incremental", "file_merging": False},
    "incremental+merge": {"state_backend": "incremental", "file_merging": True, "compaction_threshold": None},
    "incremental+merge+compaction": {"state_backend": "incremental", "file_merging": True,
                                     "compaction_threshold": 2.0},
    # Flink's default threshold (2.0) never fires in 50 checkpoints at 1% churn; a tighter one
    # shows what compaction buys for steady-state space amplification
    "incremental+merge+compaction@1.2": {"state_backend": "incremental", "file_merging": True,
                                         "compaction_threshold": 1.2},
}
OPERATOR = "count"
MAX_PARALLELISM = 128
JOB = "bench"


def _backends(num_keys: int, parallelism: int) -> tuple[list[KeyedStateBackend], list[str]]:
    backends = [KeyedStateBackend(OPERATOR, key_group_range_for_subtask(MAX_PARALLELISM, parallelism, i),
                                  MAX_PARALLELISM) for i in range(parallelism)]
    owner = {}
    for i, backend in enumerate(backends):
        for kg in backend.key_group_range:
            owner[kg] = i
    keys = [f"user-{i:07d}" for i in range(num_keys)]
    for key in keys:
        backend = backends[owner[key_group_for(key, MAX_PARALLELISM)]]
        backend.set_current_key(key)
        backend.value_state("count", default=0).update(1)
    return backends, keys


def _disk(root: str) -> tuple[int, int]:
    files = size = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name != "_metadata":
                files += 1
                size += os.path.getsize(os.path.join(dirpath, name))
    return files, size


def _live_bytes(storage: CheckpointStorage, completed: CompletedCheckpoint) -> int:
    """Bytes of the segments the checkpoint actually uses (manifest links for shared files)."""
    live = 0
    for ack in completed.acks.values():
        for kind, handles in ack.handles.items():
            for handle in handles:
                if handle.key is not None and reuse_floor_of(handle.key) is not None:
                    manifest = Manifest.from_bytes(storage.read_task_file(handle))
                    live += handle.length or handle.size
                    live += sum(link.length for chain in manifest.chains.values() for link in chain)
                elif kind == "keyed" and handle.key is not None:
                    continue  # a shared file: counted through the manifest's links
                else:
                    live += handle.length if handle.length is not None else handle.size
    return live


def _restore(storage: CheckpointStorage, completed: CompletedCheckpoint, parallelism: int) -> float:
    start = time.perf_counter()
    snapshots = []
    for ack in completed.acks.values():
        handles = ack.handles.get("keyed", ())
        manifest = next((h for h in handles if h.key and reuse_floor_of(h.key) is not None), None)
        if manifest is None:
            snapshots += [keyed_snapshot_from_bytes(storage.read_task_file(h)) for h in handles]
        else:
            by_path = {h.path: h for h in handles}
            snapshots.append(restore_keyed_snapshot(Manifest.from_bytes(storage.read_task_file(manifest)),
                                                    lambda p, by_path=by_path: storage.read_task_file(by_path[p])))
    restored = [KeyedStateBackend.restore(OPERATOR, key_group_range_for_subtask(MAX_PARALLELISM, parallelism, i),
                                          MAX_PARALLELISM, snapshots) for i in range(parallelism)]
    elapsed = time.perf_counter() - start
    assert sum(b.num_keys for b in restored) == sum(s.num_entries for s in snapshots)
    return elapsed


def run_config(name: str, options: dict[str, Any], *, num_keys: int, checkpoints: int,
               update_fraction: float, parallelism: int, seed: int, workdir: str) -> dict[str, Any]:
    root = os.path.join(workdir, name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    storage = CheckpointStorage(FsBlobStore(root))
    config = CheckpointConfig(interval=1.0, storage=root, **options)
    writer = SnapshotWriter(storage, JOB, config)
    store = StandaloneCompletedCheckpointStore(storage, JOB, retained=1)
    backends, keys = _backends(num_keys, parallelism)
    rng = random.Random(seed)
    tasks = [TaskId(OPERATOR, i) for i in range(parallelism)]
    owner = {kg: i for i, b in enumerate(backends) for kg in b.key_group_range}
    per_checkpoint: list[dict[str, Any]] = []
    amplification: list[float] = []
    started = time.perf_counter()
    for checkpoint_id in range(1, checkpoints + 1):
        if checkpoint_id > 1:
            for key in rng.sample(keys, int(len(keys) * update_fraction)):
                backend = backends[owner[key_group_for(key, MAX_PARALLELISM)]]
                backend.set_current_key(key)
                state = backend.value_state("count", default=0)
                state.update(state.value() + 1)
        acks = {}
        files = written = 0
        for task, backend in zip(tasks, backends):
            snapshot = TaskSnapshot(task, checkpoint_id, 0.0, AlignmentStats(checkpoint_id),
                                    keyed=backend.snapshot(checkpoint_id))
            prepared = writer.prepare(snapshot)
            handles = writer.write(snapshot, prepared)
            files += len(prepared)
            written += sum(len(d) for d in prepared.values())
            state_bytes = sum(h.length or h.size for hs in handles.values() for h in hs)
            acks[task] = TaskAcknowledgement(task, checkpoint_id, handles, state_bytes=state_bytes)
        completed = CompletedCheckpoint(JOB, checkpoint_id, 0.0, 0.0, acks)
        store.add_checkpoint(completed)
        for task in tasks:
            writer.notify_checkpoint_complete(task, checkpoint_id)
        metadata = os.path.getsize(os.path.join(root, JOB, f"chk-{checkpoint_id}", "_metadata"))
        disk_files, disk_bytes = _disk(root)
        live = _live_bytes(storage, completed)
        amplification.append(disk_bytes / live)
        per_checkpoint.append({"checkpoint": checkpoint_id, "files": files, "bytes": written,
                               "metadata_bytes": metadata, "disk_files": disk_files, "disk_bytes": disk_bytes,
                               "live_bytes": live})
    run_time = time.perf_counter() - started
    restore_time = _restore(storage, store.get_latest_checkpoint(), parallelism)
    later = per_checkpoint[1:] or per_checkpoint  # checkpoint 1 is a full one in every mode
    half = amplification[len(amplification) // 2:]
    return {
        "config": name,
        "files/ckpt": sum(c["files"] for c in later) / len(later),
        "bytes/ckpt": sum(c["bytes"] for c in later) / len(later),
        "metadata bytes/ckpt": sum(c["metadata_bytes"] for c in later) / len(later),
        "first ckpt bytes": per_checkpoint[0]["bytes"],
        "files on disk": per_checkpoint[-1]["disk_files"],
        "bytes on disk": per_checkpoint[-1]["disk_bytes"],
        "space amp (2nd half mean)": sum(half) / len(half),
        "space amp (max 2nd half)": max(half),
        "space amp (end)": amplification[-1],
        "restore s": restore_time,
        "run s": run_time,
        "per_checkpoint": per_checkpoint,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser, "state_storage")
    add_sized_argument(parser, "--keys", full=1_000_000, quick=50_000, help="keys of state")
    add_sized_argument(parser, "--checkpoints", full=50, quick=10, help="checkpoints per config")
    parser.add_argument("--update-fraction", type=float, default=0.01,
                        help="fraction of keys updated between checkpoints (default 0.01)")
    parser.add_argument("--parallelism", type=int, default=4, help="subtasks (default 4)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"configs to run (default {','.join(CONFIGS)})")
    args = parse_args(parser, argv)
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")
    rows = []
    workdir = tempfile.mkdtemp(prefix="barrierflow-state-bench-")
    try:
        for name in names:
            row = run_config(name, CONFIGS[name], num_keys=args.keys, checkpoints=args.checkpoints,
                             update_fraction=args.update_fraction, parallelism=args.parallelism,
                             seed=args.seed, workdir=workdir)
            rows.append(row)
            print(f"{name}: done in {row['run s']:.1f} s", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    full = next((r for r in rows if r["config"] == "full"), None)
    for row in rows:
        row["bytes vs full"] = row["bytes/ckpt"] / full["bytes/ckpt"] if full else None
    columns = ["config", "files/ckpt", "bytes/ckpt", "bytes vs full", "metadata bytes/ckpt", "files on disk",
               "bytes on disk", "space amp (2nd half mean)", "space amp (max 2nd half)", "restore s"]
    print(f"\nkeys={args.keys:,} checkpoints={args.checkpoints} update_fraction={args.update_fraction} "
          f"parallelism={args.parallelism} (bytes/ckpt and files/ckpt exclude checkpoint 1)\n")
    table = markdown_table(rows, columns)
    print(table)
    files = output_of(args, "state_storage").write({"params": vars(args), "results": rows}, table)
    print(f"\nwrote {', '.join(files)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
