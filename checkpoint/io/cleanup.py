"""Orphan files of a job: what no retained checkpoint needs (no file is left
unreferenced after cleanup). One rule for `barrierflow checkpoints gc` (offline, every file of the
job directory) and for the executors' cleanup of a failed attempt (online, only what this run
wrote).

Theory of operation
-------------------
A file is an *orphan* when it is not in `keep` — the files the retained checkpoints reference
(metadata and every handle's path; the standalone store adds the shared files its registry still
counts live) — and, online, when it belongs to a checkpoint of this run that is neither retained
nor pending. Which checkpoint wrote a file is read off its path: its `chk-<id>/` directory, or a
shared file named `chk-<id>-...` (`checkpoint/io/state_files.py`, `state/merging.py`). An online cleanup
only looks at ids from `since` on (the id counter's value when the run started), so the
checkpoints of an earlier run in the same directory — one a later `restore_from` may want — are
never touched, and at no id of a pending checkpoint (its uploads are still arriving).

Files an interrupted write left under a temporary name (`FsBlobStore.put` writes `.<name>.tmp-<uuid>`
then moves it into place; a process killed in between leaves it) are never part of a checkpoint:
orphans, unless they belong to a pending checkpoint (its write may still be moved into place).

When to run the online cleanup: once a failed attempt is over and before the next one starts
(nothing of the failed attempt writes any more on the simulator; on Ray a cancelled task may still
finish an upload, which the cleanup at the end of the job catches), and when the job finished.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from checkpoint.storage.layout import SHARED_DIR, CheckpointStorage, StorageError

if TYPE_CHECKING:
    from checkpoint.storage.store import CompletedCheckpointStore

log = logging.getLogger(__name__)

#: `chk-<id>` as a directory of the job, or as the start of a (possibly temporary: `.`) file name
_CHECKPOINT_OF = re.compile(r"^(?:chk-(\d+)(?:/|$)|(?:.*/)?\.?chk-(\d+)-[^/]*$)")


def checkpoint_id_of(relative: str) -> int | None:
    """The id of the checkpoint that wrote a file, from its path relative to the job directory
    (`chk-5/taskowned/x`, `shared/task/chk-5-0.merged`); None for a file of no checkpoint (the
    id counter)."""
    match = _CHECKPOINT_OF.match(relative)
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def unreferenced_files(storage: CheckpointStorage, job_id: str, keep: Iterable[str], *,
                       since: int | None = None, retained: Iterable[int] = (),
                       pending: Iterable[int] = ()) -> list[str]:
    """The job's files not in `keep`, interrupted writes included, sorted.

    Args:
        keep: files that must stay (see the module docstring).
        since: None (offline `gc`): every such file under the job's `chk-<id>/` and `shared/`
            (never a file directly in the job directory: the id counter that keeps runs from
            reusing ids). Else only files of checkpoints with an id >= `since` that are not in
            `retained` or `pending`.
        retained, pending: checkpoint ids whose files stay whatever `keep` says (online).

    Raises:
        StorageError: the job directory could not be listed.
    """
    keep_set = set(keep)
    pending_set = set(pending)
    spare = set(retained) | pending_set
    prefix = storage.job_dir(job_id) + "/"
    out = []
    for path in storage.list_job_files(job_id):
        if path in keep_set:
            continue
        relative = path[len(prefix):]
        checkpoint_id = checkpoint_id_of(relative)
        if since is None:
            top, _, rest = relative.partition("/")
            if rest and (checkpoint_id is not None or top == SHARED_DIR):
                out.append(path)
        elif checkpoint_id is not None and checkpoint_id >= since and checkpoint_id not in spare:
            out.append(path)
    for path in storage.list_job_files(job_id, temporary=True):  # never part of a checkpoint
        if checkpoint_id_of(path[len(prefix):]) not in pending_set:  # (a pending one's may still land)
            out.append(path)
    return sorted(out)


def discard_orphans(storage: CheckpointStorage, job_id: str, store: CompletedCheckpointStore, *, since: int,
                    pending: Iterable[int] = (), finished: bool = False) -> list[str]:
    """Delete what failed attempts and aborted checkpoints of this run left: the
    `unreferenced_files` of checkpoints from `since` on that `store` does not retain (its
    `referenced_files()` stay) and are not `pending`. Failures are logged, not raised (the next
    cleanup, or `barrierflow checkpoints gc`, gets the rest). `finished`: the job ended, so
    shared state only a task's possible reuse kept alive goes too (`store.job_finished()`).

    Returns:
        The deleted paths.
    """
    if finished:
        store.job_finished()
    store.flush()  # deletes still running would be listed (and raced)
    retained = [c.checkpoint_id for c in store.get_all_checkpoints()]
    try:
        orphans = unreferenced_files(storage, job_id, store.referenced_files(), since=since, retained=retained,
                                     pending=pending)
    except StorageError as exc:
        log.warning("job %s: could not list orphan checkpoint files: %s", job_id, exc)
        return []
    deleted = []
    for path in orphans:
        try:
            storage.delete_file(path)
        except StorageError as exc:
            log.warning("job %s: could not delete orphan checkpoint file %s: %s", job_id, path, exc)
            continue
        deleted.append(path)
    if deleted:
        log.info("job %s: deleted %d orphan checkpoint file(s) of checkpoints %s", job_id, len(deleted),
                 sorted({checkpoint_id_of(p[len(storage.job_dir(job_id)) + 1:]) for p in deleted} - {None}))
    return deleted
