"""Inspecting and cleaning a checkpoint directory: `barrierflow checkpoints ls | show | gc`.

Theory of operation
-------------------
A checkpoint directory is self-describing: each `chk-<id>/_metadata` lists the handles of every
file its checkpoint needs (its own `taskowned/` files and the `shared/` files it reuses). A
checkpoint is *valid* when its metadata and every file it references verify (SHA-256); `ls
--metadata-only` checks the metadata alone and says so. Each checkpoint names the *run* that took it
(`properties["run_id"]`: one `execute()`, restarts and coordinator failovers included); runs of a
job share its directory and its id counter (`_checkpoint_counter`, never reused ids). Anything in
`chk-<id>/` or `shared/` that no valid checkpoint (of any run) references is an *orphan*: uploads
of checkpoints that never completed, files of a task that crashed before it could report them,
shared files a crashed coordinator never released. `gc` removes orphans and
reports them; it never touches the id counter or other files of the job directory. Run it on a
job that is not running: a running job's in-flight uploads are not referenced by any metadata yet
and would look like orphans.

`load_checkpoint` is what `StreamEnvironment.restore_from(dir)` uses: the newest run's newest
checkpoint that fully verifies (or the run or checkpoint asked for), skipping corrupt ones with a
warning naming the file. Nothing is ever created: a missing directory is an error naming it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from checkpoint.completed import CompletedCheckpoint
from checkpoint.io.cleanup import unreferenced_files
from checkpoint.io.lease import CheckpointDirectoryInUseError, JobLease, holding
from checkpoint.io.storage import storage_from_uri
from checkpoint.lease import LeaseVerdict
from checkpoint.storage.committer_files import unneeded_files
from checkpoint.storage.errors import CheckpointToolError, NoCompletedCheckpointError
from checkpoint.storage.keyed_files import read_keyed_snapshots
from checkpoint.storage.layout import (
    JOB_FILE,
    METADATA_FILE,
    SHARED_DIR,
    BlobNotFoundError,
    CheckpointStorage,
    CorruptCheckpointError,
    MissingMetadataError,
    StorageError,
    list_links,
)
from checkpoint.storage.store import run_of
from state.serialization import KeyedStateSnapshot, keyed_snapshot_from_bytes
from state.timer_queue import TIMER_STATE_PREFIX

log = logging.getLogger(__name__)

_JOB_ENTRY = re.compile(rf"^(chk-\d+|{SHARED_DIR})$")


def _in_a_job(below: list[str]) -> bool:
    """Whether a file at path `below` (split on "/") inside a job's folder shows a job there: a
    file in `chk-<id>/` or `shared/`, or the job's record `_job`."""
    return (len(below) >= 2 and _JOB_ENTRY.match(below[0]) is not None) or below == [JOB_FILE]


class JobRunningError(CheckpointToolError):
    """`gc` refuses a job whose directory a live run holds (its lease names the run)."""


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint of a job, as `ls`/`show` report it."""

    checkpoint_id: int
    valid: bool
    problem: str | None = None
    #: the run that took it (None: unknown, or written before runs were recorded)
    run_id: str | None = None
    #: whether `valid` covers every file it references (False: its metadata only)
    files_verified: bool = False
    num_tasks: int = 0
    num_files: int = 0
    file_bytes: int = 0
    num_shared_files: int = 0
    shared_bytes: int = 0
    state_bytes: int = 0
    persisted_bytes: int = 0
    completion_time: float | None = None
    duration: float | None = None
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class GcReport:
    """What `gc` found: the orphans (removed unless a dry run) and what it kept."""

    job_id: str
    removed: list[tuple[str, int]]
    kept_files: int
    valid_checkpoints: list[int]
    dry_run: bool = False
    #: symbolic links found in the job's folder: reported, never followed nor deleted
    links: list[str] = field(default_factory=list)
    #: orphans whose delete failed, and why
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def removed_bytes(self) -> int:
        return sum(size for _, size in self.removed)


def open_checkpoints(location: str) -> CheckpointStorage:
    """The checkpoint storage at a local path or `pyarrow.fs` URI.

    Raises:
        CheckpointToolError: it cannot be opened.
    """
    if not isinstance(location, str) or not location.strip():
        raise CheckpointToolError(f"checkpoint directory must be a path or URI, got {location!r}")
    try:
        return storage_from_uri(location, create=False)
    except BlobNotFoundError as exc:
        raise CheckpointToolError(f"no checkpoint directory at {location}: {exc}") from exc
    except StorageError as exc:
        raise CheckpointToolError(f"cannot open checkpoint directory {location}: {exc}") from exc


def list_jobs(storage: CheckpointStorage) -> list[str]:
    """Job ids with checkpoint data in the storage, or a record that a run of theirs started
    there (`_job`: it may have failed before its first checkpoint), sorted."""
    jobs = set()
    for key in storage.blob_store.list(storage.root + "/" if storage.root else ""):
        parts = key[len(storage.root) + 1 if storage.root else 0:].split("/")
        if _in_a_job(parts[1:]):
            jobs.add(parts[0])
    return sorted(jobs)


def resolve_job(storage: CheckpointStorage, job_id: str | None) -> str:
    """`job_id`, or the only job in the storage.

    Raises:
        CheckpointToolError: no job, several jobs and none chosen, or an unknown job.
    """
    jobs = list_jobs(storage)
    if job_id is not None:
        if job_id not in jobs:
            raise CheckpointToolError(f"no checkpoints of job {job_id!r} in {storage!r}; jobs: {jobs or 'none'}")
        return job_id
    if len(jobs) != 1:
        raise CheckpointToolError(
            f"{'no jobs' if not jobs else 'several jobs: ' + ', '.join(jobs)} in {storage!r}; name one with job_id")
    return jobs[0]


def read_checkpoint(storage: CheckpointStorage, job_id: str, checkpoint_id: int, *,
                    verify_files: bool = True) -> CompletedCheckpoint:
    """Read (and verify) one checkpoint.

    Raises:
        CorruptCheckpointError: its metadata, or (`verify_files`) a file it references, is missing
            or fails its checksum; names the file.
    """
    path = storage.metadata_path(job_id, checkpoint_id)
    completed = storage.read_metadata(path)
    if completed.job_id != job_id:
        raise CorruptCheckpointError(f"checkpoint metadata {path} belongs to job {completed.job_id!r}", path)
    if verify_files:
        seen: set[tuple[str, int, int | None]] = set()
        for handle in completed.state_handles():
            if (handle.path, handle.offset, handle.length) not in seen:
                storage.read_task_file(handle)
                seen.add((handle.path, handle.offset, handle.length))
    return completed


def load_checkpoint(location: str, job_id: str | None = None, checkpoint_id: int | None = None,
                    run_id: str | None = None) -> tuple[CompletedCheckpoint, CheckpointStorage]:
    """A checkpoint to start a job from (`env.restore_from`).

    Args:
        location: the checkpoint directory (a job's `storage`); it must exist.
        job_id: which job, when the directory holds several.
        checkpoint_id: this checkpoint (it must verify).
        run_id: the newest valid checkpoint of this run; default: of the newest run (the run of the
            newest checkpoint whose metadata can be read).

    Returns:
        `(completed, storage)`, what the executors take as `restore_from`.

    Raises:
        CheckpointToolError: no such directory, job, run or checkpoint, the checkpoint asked for is
            corrupt, or no checkpoint of the run verifies (the message names every bad file).
    """
    storage = open_checkpoints(location)
    job = resolve_job(storage, job_id)
    ids = storage.list_checkpoint_ids(job)
    if not ids and checkpoint_id is None and run_id is None:
        raise NoCompletedCheckpointError(
            f"no checkpoint of job {job!r} in {location} was taken (a run of it started there: "
            f"{storage.describe(storage.job_file(job))})", storage, job)
    if checkpoint_id is not None:
        if checkpoint_id not in ids:
            raise CheckpointToolError(f"job {job!r} has no checkpoint {checkpoint_id} in {location}; it has {ids}")
        ids = [checkpoint_id]
    problems = []
    missing: list[CorruptCheckpointError] = []  # what kept each checkpoint's metadata from being read
    runs: dict[str | None, int] = {}  # run -> its newest checkpoint with readable metadata
    wanted, decided = run_id, run_id is not None
    for cid in reversed(ids):
        try:
            metadata = read_checkpoint(storage, job, cid, verify_files=False)
        except CorruptCheckpointError as exc:
            log.warning("skipping checkpoint %d of job %s: %s (file %s)", cid, job, exc, exc.path)
            problems.append(f"checkpoint {cid}: {exc}")
            missing.append(exc)
            continue
        run = run_of(metadata)
        runs.setdefault(run, cid)
        if not decided:  # the newest run: the run of the newest checkpoint whose metadata reads
            wanted, decided = run, True
        if run != wanted:
            if checkpoint_id is not None:
                raise CheckpointToolError(f"checkpoint {cid} of job {job!r} in {location} was taken by run "
                                          f"{run!r}, not run {run_id!r}")
            continue
        try:
            return read_checkpoint(storage, job, cid), storage
        except CorruptCheckpointError as exc:
            log.warning("skipping checkpoint %d of job %s: %s (file %s)", cid, job, exc, exc.path)
            problems.append(f"checkpoint {cid}: {exc}")
    if run_id is not None and run_id not in runs and checkpoint_id is None:
        known = ", ".join(f"{r} (newest checkpoint {c})" for r, c in runs.items() if r is not None) or "none"
        raise CheckpointToolError(f"no checkpoint of run {run_id!r} of job {job!r} in {location}; runs: {known}")
    if not runs and run_id is None and checkpoint_id is None and all(
            isinstance(p, MissingMetadataError) for p in missing):
        raise NoCompletedCheckpointError(
            f"no checkpoint of job {job!r} in {location} completed (checkpoint{'s' if len(ids) > 1 else ''} "
            f"{', '.join(map(str, ids))} never wrote {METADATA_FILE})", storage, job)
    which = f"run {wanted!r} of job {job!r}" if wanted is not None else f"job {job!r}"
    raise CheckpointToolError(f"no valid checkpoint of {which} in {location}: "
                              + ("; ".join(problems) if problems else "none were taken")
                              + ("; older runs may have one: name one with run_id" if len(runs) > 1 else ""))


def describe(storage: CheckpointStorage, job_id: str, checkpoint_id: int, *,
             verify_files: bool = False) -> CheckpointInfo:
    """Sizes, file counts and stats of one checkpoint (never raises for a corrupt one)."""
    try:
        completed = read_checkpoint(storage, job_id, checkpoint_id, verify_files=False)
    except CorruptCheckpointError as exc:
        return CheckpointInfo(checkpoint_id, valid=False, problem=str(exc))
    if verify_files:
        try:
            read_checkpoint(storage, job_id, checkpoint_id, verify_files=True)
        except CorruptCheckpointError as exc:
            return CheckpointInfo(checkpoint_id, valid=False, problem=str(exc), run_id=run_of(completed),
                                  files_verified=True)
    shared = storage.shared_dir(job_id) + "/"
    files: dict[str, int] = {}
    for handle in completed.state_handles():
        files[handle.path] = handle.size
    tasks = {}
    for task, ack in completed.acks.items():
        tasks[str(task)] = {
            "state_bytes": ack.state_bytes, "persisted_bytes": ack.persisted_bytes,
            "files": len({h.path for hs in ack.handles.values() for h in hs}),
            "alignment_time": ack.alignment_time, "unaligned": ack.unaligned,
        }
    return CheckpointInfo(
        checkpoint_id, valid=True, run_id=run_of(completed), files_verified=verify_files,
        num_tasks=len(completed.acks), num_files=len(files),
        file_bytes=sum(files.values()),
        num_shared_files=sum(1 for p in files if p.startswith(shared)),
        shared_bytes=sum(s for p, s in files.items() if p.startswith(shared)),
        state_bytes=completed.state_bytes, persisted_bytes=completed.persisted_bytes,
        completion_time=completed.completion_time, duration=completed.duration, tasks=tasks,
    )


def pending_timers(storage: CheckpointStorage, job_id: str, checkpoint_id: int) -> dict[str, dict[str, int]]:
    """Task -> timer state (`_timer_state/<domain>_<service>`) -> timers pending in the checkpoint,
    for the tasks that hold any (timers are keyed state: `state.timer_queue`).

    Raises:
        CorruptCheckpointError: a file of the checkpoint cannot be read.
    """
    completed = read_checkpoint(storage, job_id, checkpoint_id, verify_files=False)
    out: dict[str, dict[str, int]] = {}
    for task, ack in sorted(completed.acks.items()):
        counts: dict[str, int] = {}
        for snapshot in read_keyed_snapshots(storage, ack.handles.get("keyed", ())):
            if not isinstance(snapshot, KeyedStateSnapshot):
                snapshot = keyed_snapshot_from_bytes(snapshot)
            for name, groups in snapshot.groups.items():
                if name.startswith(TIMER_STATE_PREFIX):
                    counts[name] = counts.get(name, 0) + sum(len(t) for g in groups.values() for t in g.values())
        if any(counts.values()):
            out[str(task)] = counts
    return out


def list_checkpoints(storage: CheckpointStorage, job_id: str, *, verify_files: bool = True) -> list[CheckpointInfo]:
    """Every checkpoint directory of the job, oldest first: valid when its metadata and (unless
    not `verify_files`) every file it references verify."""
    return [describe(storage, job_id, cid, verify_files=verify_files) for cid in storage.list_checkpoint_ids(job_id)]


def collect_garbage(storage: CheckpointStorage, job_id: str, *, dry_run: bool = False) -> GcReport:
    """Remove the files under the job's `chk-<id>/` and `shared/` that no valid checkpoint (of any
    run) references.

    A valid checkpoint keeps its `_metadata` and every file its handles name; everything else
    under `chk-<id>/` and `shared/` (incomplete `chk-<id>/` directories and what interrupted
    writes left included) is an orphan (`checkpoint.io.cleanup.unreferenced_files`). Files directly
    in the job directory (the id counter that keeps runs from reusing ids, the lease, the job's
    record `_job`) are never touched, nor is anything behind a symbolic link (`GcReport.links`).

    A running job's upload in progress would look like orphans: `gc` holds the job's lease while
    it works (a run starting meanwhile is refused, naming gc), and refuses a job whose lease a live
    run holds (a dry run only looks: it takes no lease).

    Raises:
        JobRunningError: a live run holds the job's lease (named).
    """
    lease = JobLease(storage, job_id, holder="checkpoints gc", run_id=None)
    try:
        if dry_run:
            verdict, holder = lease.verdict()
            if verdict is LeaseVerdict.HELD:
                assert holder is not None
                raise lease.in_use(holder)
            return _collect(storage, job_id, dry_run=True)
        with holding(lease):
            return _collect(storage, job_id, dry_run=False)
    except CheckpointDirectoryInUseError as exc:
        holder = exc.holder.describe(lease.clock()) if exc.holder is not None else "another process"
        raise JobRunningError(
            f"job {job_id} is running: {holder} holds {lease.where}; gc touches no file of a running job "
            "(its checkpoint in progress would look like orphans). Run gc when it ended; a killed run's lease "
            f"lapses {exc.holder.timeout if exc.holder else lease.timeout:g} s after its last renewal, at once on "
            "its own host") from None


def _collect(storage: CheckpointStorage, job_id: str, *, dry_run: bool) -> GcReport:
    keep: set[str] = set()
    valid: list[int] = []
    newest_of_run: dict[str, int] = {}  # run -> its newest valid checkpoint (its committer stays)
    for cid in storage.list_checkpoint_ids(job_id):
        try:
            completed = read_checkpoint(storage, job_id, cid, verify_files=False)
        except CorruptCheckpointError:
            continue
        valid.append(cid)
        keep.add(storage.metadata_path(job_id, cid))
        keep.update(completed.referenced_paths())
        run = run_of(completed)
        if run is not None:
            newest_of_run[run] = cid
    removed: list[tuple[str, int]] = []
    failed: list[tuple[str, str]] = []
    files = storage.list_job_files(job_id)
    garbage = sorted(set(unreferenced_files(storage, job_id, keep)) | set(unneeded_files(storage, job_id, newest_of_run)))
    for path in garbage:
        try:
            size = len(storage.blob_store.get(path))
        except StorageError:
            size = 0
        if not dry_run:
            try:
                storage.delete_file(path)
            except StorageError as exc:
                failed.append((path, str(exc)))
                continue
        removed.append((path, size))
    links = list_links(storage.blob_store, storage.job_dir(job_id) + "/")
    return GcReport(job_id, removed, len(set(files) - {path for path, _ in removed}), valid, dry_run, links, failed)


# --------------------------------------------------------------------------- CLI


#: `--job` of every `checkpoints` command
JOB_HELP = "the job (its job id: the name `execute` or `barrierflow run` gave it) when DIR holds several (default: every job in DIR; `show`: the only one)"


def add_cli(subparsers: Any) -> None:
    """Register `checkpoints ls DIR`, `checkpoints show DIR ID`, `checkpoints gc DIR`."""
    parser = subparsers.add_parser("checkpoints", help="inspect and clean a checkpoint directory")
    sub = parser.add_subparsers(dest="checkpoints_command", required=True)
    ls = sub.add_parser("ls", help="list checkpoints with sizes, file counts, stats and the run that took "
                                   "each (verifies every file)")
    ls.add_argument("dir", help="a checkpoint directory (a job's storage), or one job's folder in it")
    ls.add_argument("--job", help=JOB_HELP)
    ls.add_argument("--metadata-only", action="store_true",
                    help="check each checkpoint's metadata only, not its files (faster)")
    ls.set_defaults(func=cmd_ls)
    show = sub.add_parser("show", help="one checkpoint in detail (verifies every file)")
    show.add_argument("dir", help="a checkpoint directory (a job's storage), or one job's folder in it")
    show.add_argument("id", type=int, help="the checkpoint's id (chk-<id>)")
    show.add_argument("--job", help=JOB_HELP)
    show.set_defaults(func=cmd_show)
    gc = sub.add_parser("gc", help="remove files no valid checkpoint references (job must be stopped)")
    gc.add_argument("dir", help="a checkpoint directory (a job's storage), or one job's folder in it")
    gc.add_argument("--job", help=JOB_HELP)
    gc.add_argument("--dry-run", action="store_true", help="only list the orphan files, remove nothing")
    gc.set_defaults(func=cmd_gc)


def _jobs(args: Any) -> tuple[CheckpointStorage, list[str]]:
    """The storage and jobs `args.dir` names: a storage root, or one job's folder in it."""
    storage = open_checkpoints(args.dir)
    if not args.job and not list_jobs(storage) and _is_job_folder(storage):
        parent, _, job = args.dir.rstrip("/").rpartition("/")
        storage, args.job = open_checkpoints(parent or "."), job
    jobs = [resolve_job(storage, args.job)] if args.job else list_jobs(storage)
    if not jobs:
        raise CheckpointToolError(f"no checkpoints in {args.dir}")
    return storage, jobs


def _is_job_folder(storage: CheckpointStorage) -> bool:
    """Whether the storage's top level holds `chk-<id>/`, `shared/` or `_job` (a job's own folder)."""
    prefix = storage.root + "/" if storage.root else ""
    return any(_in_a_job(key[len(prefix):].split("/")) for key in storage.blob_store.list(prefix))


def milliseconds(seconds: float | None) -> str:
    """Seconds for people, in ms to three significant digits (`4.96 ms`, `12.3 ms`, `1,234 ms`)."""
    ms = (seconds or 0.0) * 1e3
    if ms == 0:
        return "0 ms"
    decimals = max(0, 2 - math.floor(math.log10(abs(ms))))
    return f"{ms:,.{decimals}f} ms"


def _human(name: str, value: Any) -> str:
    """A per-task stat for people: times in ms, byte counts with separators."""
    if isinstance(value, float) and ("time" in name or "duration" in name or "delay" in name):
        return milliseconds(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _run(fn: Any, args: Any) -> int:
    try:
        return fn(args)
    except CheckpointToolError as exc:
        print(f"barrierflow: error: checkpoints {args.checkpoints_command}: {' '.join(str(exc).split())}",
              file=sys.stderr)
        return 1 if isinstance(exc, JobRunningError) else 2


def cmd_ls(args: Any) -> int:
    def body(args: Any) -> int:
        storage, jobs = _jobs(args)
        verify = not getattr(args, "metadata_only", False)
        for job in jobs:
            print(f"job {job}{_running(storage, job)}")
            infos = list_checkpoints(storage, job, verify_files=verify)
            if not infos:
                print("  no checkpoint: a run of the job started here, and none of its checkpoints began")
                continue
            print(f"{'id':>6} {'valid':>5} {'tasks':>5} {'files':>6} {'bytes':>12} {'shared':>6} "
                  f"{'shared bytes':>12} {'state bytes':>12} {'duration':>10}  run")
            for info in infos:
                if not info.valid:
                    print(f"{info.checkpoint_id:>6} {'no':>5}  {info.problem}")
                    continue
                print(f"{info.checkpoint_id:>6} {'yes':>5} {info.num_tasks:>5} {info.num_files:>6} "
                      f"{info.file_bytes:>12,} {info.num_shared_files:>6} {info.shared_bytes:>12,} "
                      f"{info.state_bytes:>12,} {milliseconds(info.duration):>10}  {info.run_id or '-'}")
            print("valid: metadata and every file it references read and checksummed (SHA-256)" if verify else
                  "valid: metadata only (its own SHA-256); files NOT read: run without --metadata-only to verify")
        return 0
    return _run(body, args)


def cmd_show(args: Any) -> int:
    def body(args: Any) -> int:
        storage, jobs = _jobs(args)
        if len(jobs) != 1:
            raise CheckpointToolError(f"several jobs in {args.dir}: {', '.join(jobs)}; pick one with --job")
        known = storage.list_checkpoint_ids(jobs[0])
        if args.id not in known:
            raise CheckpointToolError(f"job {jobs[0]} has no checkpoint {args.id} "
                                      f"(its checkpoints: {', '.join(map(str, known)) or 'none'})")
        info = describe(storage, jobs[0], args.id, verify_files=True)
        run = f" (run {info.run_id})" if info.run_id else ""
        print(f"job {jobs[0]} checkpoint {info.checkpoint_id}{run}: {'valid' if info.valid else 'INVALID'}")
        if not info.valid:
            print(f"  {info.problem}")
            return 1
        print(f"  files {info.num_files} ({info.file_bytes:,} bytes), shared {info.num_shared_files} "
              f"({info.shared_bytes:,} bytes), state {info.state_bytes:,} bytes, channel state "
              f"{info.persisted_bytes:,} bytes, duration {milliseconds(info.duration)}")
        timers = pending_timers(storage, jobs[0], args.id)
        for task, stats in info.tasks.items():
            print(f"  {task}: " + ", ".join(f"{k}={_human(k, v)}" for k, v in stats.items()))
            if task in timers:
                print("    timers pending: " + ", ".join(f"{name.removeprefix(TIMER_STATE_PREFIX)}={n}"
                                                      for name, n in sorted(timers[task].items())))
        return 0
    return _run(body, args)


def cmd_gc(args: Any) -> int:
    def body(args: Any) -> int:
        storage, jobs = _jobs(args)
        failures = 0
        for job in jobs:
            report = collect_garbage(storage, job, dry_run=args.dry_run)
            verb = "would remove" if report.dry_run else "removed"
            print(f"job {job}: {verb} {len(report.removed)} orphan file(s), {report.removed_bytes:,} bytes; "
                  f"kept {report.kept_files} file(s) of checkpoints {report.valid_checkpoints}")
            for path, size in report.removed:
                print(f"  {path} ({size:,} bytes)")
            for path, why in report.failed:
                print(f"  could not remove {path}: {why}")
            if report.links:
                print(f"job {job}: {len(report.links)} symbolic link(s) not followed (nothing behind them is "
                      "touched; barrierflow never creates one):")
                for link in report.links:
                    print(f"  {link} -> {_link_target(storage, link)}")
            failures += len(report.failed)
        return 1 if failures else 0
    return _run(body, args)


def _running(storage: CheckpointStorage, job_id: str) -> str:
    """`: running, <holder>` while a live run holds the job's lease (else '')."""
    lease = JobLease(storage, job_id, holder="checkpoints ls", run_id=None)
    try:
        verdict, holder = lease.verdict()
    except StorageError as exc:
        return f" (its lease is unreadable: {exc})"
    return f": running, {holder.describe(lease.clock())}" if verdict is LeaseVerdict.HELD and holder else ""


def _link_target(storage: CheckpointStorage, link: str) -> str:
    try:
        return os.readlink(storage.describe(link))
    except OSError as exc:
        return f"? ({exc.strerror})"


__all__ = ["CheckpointInfo", "CheckpointToolError", "GcReport", "JobRunningError", "NoCompletedCheckpointError",
           "collect_garbage", "describe", "list_checkpoints", "list_jobs", "load_checkpoint", "milliseconds",
           "open_checkpoints", "read_checkpoint"]
