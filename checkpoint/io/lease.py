"""Holding a job directory's lease: reading, taking, renewing and releasing `<dir>/<job>/_lease`.

Theory of operation
-------------------
`checkpoint/lease.py` decides (purely) who may write a job's checkpoint directory; this module
does the I/O, through the job's `BlobStore`, so it works the same on a local directory and on a
remote file system. `JobLease.acquire` reads the lease file and asks `judge`: a lease HELD by
another live holder raises `CheckpointDirectoryInUseError` naming it; a FREE one is created only
if still absent (`put_if_absent`: atomic on a local file system), a LAPSED one is overwritten
(with a warning naming the holder it replaces); either way the file is read back, and a lease that
is not ours then (another writer won the race) raises too. Whether a holder's process is alive is
known only on its own host and pid namespace (`os.kill(pid, 0)`, and a zombie counts as gone); elsewhere a
lease lapses `timeout` seconds after its last renewal.

While a run lasts, `JobLease.keep_renewing` renews the lease from a daemon thread every third of
its timeout (the I/O layer of the executor holding it; the protocol never sees it). A renewal that
finds someone else's lease (a successor took it over after this process stalled past the
timeout, or someone deleted it and another run started) records that the lease is `lost`; the
executor then fails the job (`check`), leaving the new holder's lease alone. A renewal that cannot
reach the storage retries; once the timeout passed without one, the lease counts as lost too.
`release` deletes the lease only if it is still ours.

Only durable storage has a lease (`lease_for`): an in-memory store belongs to one run anyway.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator

from checkpoint.lease import LEASE_FILE, Lease, LeaseVerdict, judge
from checkpoint.storage.layout import (
    BlobNotFoundError,
    CheckpointStorage,
    MemoryBlobStore,
    StorageError,
    StorageFileError,
    put_if_absent,
)

__all__ = ["DEFAULT_LEASE_TIMEOUT", "LEASE_FILE", "CheckpointDirectoryInUseError", "JobLease", "LeaseLostError",
           "lease_for"]

log = logging.getLogger(__name__)

#: seconds a lease counts after its last renewal (renewed every third of it): a killed run's lease
#: on another host lapses this long after its last renewal
DEFAULT_LEASE_TIMEOUT = 30.0


class CheckpointDirectoryInUseError(StorageFileError):
    """Another live run (or `checkpoints gc`) holds the lease of the job's checkpoint directory.

    Attributes:
        holder: its `Lease`.
    """

    def __init__(self, message: str, path: str, holder: Lease | None = None) -> None:
        super().__init__(message, path)
        self.holder = holder

    def __reduce__(self):
        return (type(self), (self.args[0], self.path, self.holder))


class LeaseLostError(StorageFileError):
    """A run's lease was taken over (or could not be renewed): it must stop writing."""


def this_process() -> tuple[str, int, str]:
    """(host, pid, pid namespace) of this process; the namespace is '' where it cannot be read."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return socket.gethostname(), os.getpid(), namespace


def process_alive(lease: Lease) -> bool | None:
    """Whether `lease`'s process runs: known only from its own host and pid namespace (None otherwise)."""
    host, pid, namespace = this_process()
    if not lease.same_process_space(host, namespace):
        return None
    if lease.pid == pid:
        return True
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    try:  # a killed process nobody reaped yet is a zombie: gone
        with open(f"/proc/{lease.pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class JobLease:
    """The lease of one job's checkpoint directory, as held (or wanted) by this process.

    Args:
        storage: the job's checkpoint storage (its blob store is kept: wrappers installed later
            do not see the lease's writes).
        job_id: the job.
        holder: who, for people: ``run <run_id>`` or ``checkpoints gc``.
        run_id: the run (None: not a run).
        timeout: seconds the lease counts after each renewal (default `DEFAULT_LEASE_TIMEOUT`).
        clock: wall seconds (`time.time`).
    """

    def __init__(self, storage: CheckpointStorage, job_id: str, *, holder: str, run_id: str | None,
                 timeout: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.blob_store = storage.blob_store
        self.path = f"{storage.job_dir(job_id)}/{LEASE_FILE}"
        self.where = storage.describe(self.path)
        self.directory = storage.describe(storage.job_dir(job_id))
        self.job_id = job_id
        self.holder = holder
        self.run_id = run_id
        self.timeout = timeout if timeout is not None else DEFAULT_LEASE_TIMEOUT
        self.clock = clock
        self.token = secrets.token_hex(8)
        self.since: float | None = None
        #: why the lease was lost (None: held, or never taken)
        self.lost: str | None = None
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    # ------------------------------------------------------------------ reading

    def read(self) -> Lease | None:
        """The lease in storage (None: no lease file).

        Raises:
            checkpoint.storage.layout.StorageFileError: the lease file is not a lease (names it).
            StorageError: the storage could not be read.
        """
        try:
            data = self.blob_store.get(self.path)
        except BlobNotFoundError:
            return None
        try:
            return Lease.from_bytes(data, self.where)
        except ValueError as exc:
            raise StorageFileError(str(exc), self.where) from None

    def verdict(self) -> tuple[LeaseVerdict, Lease | None]:
        """What the lease in storage means for this holder now."""
        lease = self.read()
        alive = process_alive(lease) if lease is not None else None
        return judge(lease, token=self.token, now=self.clock(), alive=alive), lease

    def in_use(self, lease: Lease) -> CheckpointDirectoryInUseError:
        return CheckpointDirectoryInUseError(
            f"checkpoint directory {self.directory} of job {self.job_id!r} is in use by "
            f"{lease.describe(self.clock())}: one run writes a job's checkpoint directory at a time (its id "
            "counter, checkpoints and cleanup assume it). Wait for that run to end, or give this one another "
            f"checkpoint directory or job name. A killed run's lease lapses {lease.timeout:g} s after its last "
            f"renewal, at once on its own host ({self.where})", self.where, lease)

    # ------------------------------------------------------------------ holding

    def acquire(self) -> None:
        """Take the lease (see the module docstring).

        Raises:
            CheckpointDirectoryInUseError: another live holder has it (named).
            StorageError: the storage could not be read or written (or the lease file is not one).
        """
        verdict, found = self.verdict()
        if verdict is LeaseVerdict.HELD:
            assert found is not None
            raise self.in_use(found)
        if verdict is LeaseVerdict.LAPSED:
            assert found is not None
            log.warning("job %s: taking over the lapsed lease of %s (%s)", self.job_id, found.describe(self.clock()),
                        self.where)
        now = self.clock()
        self.since = now
        mine = self._lease(now).to_bytes()
        if verdict is LeaseVerdict.FREE and not put_if_absent(self.blob_store, self.path, mine):
            found = self.read()
            if found is not None:  # another holder took it between our look and our write
                raise self.in_use(found)
            self.blob_store.put(self.path, mine)
        elif verdict is not LeaseVerdict.FREE:
            self.blob_store.put(self.path, mine)
        found = self.read()
        if found is None or found.token != self.token:
            raise self.in_use(found) if found is not None else StorageError(
                f"the lease {self.where} vanished as it was taken: another process is deleting it")
        self.lost = None

    def renew(self) -> None:
        """Write a fresh renewal time.

        Raises:
            LeaseLostError: the lease is someone else's now (named), or was deleted.
            StorageError: the storage could not be reached (the keeper retries).
        """
        found = self.read()
        if found is None or found.token != self.token:
            who = found.describe(self.clock()) if found is not None else "nobody (the lease file was deleted)"
            raise LeaseLostError(f"run {self.run_id} lost the lease of checkpoint directory {self.directory} to "
                                 f"{who}: another writer may be using the directory, so this run stops writing "
                                 f"({self.where})", self.where)
        self.blob_store.put(self.path, self._lease(self.clock()).to_bytes())

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still ours (storage errors are logged: it
        then lapses by itself)."""
        self._stop.set()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            self._keeper.join(timeout=self.timeout)
        try:
            found = self.read()
            if found is not None and found.token == self.token:
                self.blob_store.delete(self.path)
        except StorageError as exc:
            log.warning("job %s: could not release the lease %s (it lapses in %g s): %s", self.job_id, self.where,
                        self.timeout, exc)

    def keep_renewing(self) -> None:
        """Renew from a daemon thread every third of the timeout until `release`."""
        if self._keeper is None:
            self._keeper = threading.Thread(target=self._renew_until_released, name=f"barrierflow-lease-{self.job_id}",
                                            daemon=True)
            self._keeper.start()

    def check(self) -> None:
        """Raises: LeaseLostError if a renewal found the lease lost."""
        if self.lost is not None:
            raise LeaseLostError(self.lost, self.where)

    def _renew_until_released(self) -> None:
        renewed = time.monotonic()
        while not self._stop.wait(self.timeout / 3):
            try:
                self.renew()
                renewed = time.monotonic()
            except LeaseLostError as exc:
                self.lost = str(exc)
                log.error("job %s: %s", self.job_id, exc)
                return
            except StorageError as exc:
                if time.monotonic() - renewed > self.timeout:
                    self.lost = (f"run {self.run_id} could not renew the lease of checkpoint directory "
                                 f"{self.directory} for {self.timeout:g} s ({exc}): it may have lapsed, so this run "
                                 f"stops writing ({self.where})")
                    log.error("job %s: %s", self.job_id, self.lost)
                    return
                log.warning("job %s: could not renew the lease %s, retrying: %s", self.job_id, self.where, exc)

    def _lease(self, now: float) -> Lease:
        host, pid, namespace = this_process()
        assert self.since is not None
        return Lease(self.holder, self.run_id, host, pid, namespace, self.since, now, self.timeout, self.token)

    def __repr__(self) -> str:
        return f"JobLease({self.where!r}, holder={self.holder!r}, lost={self.lost is not None})"


def lease_for(storage: CheckpointStorage, job_id: str, run_id: str) -> JobLease | None:
    """A run's lease of its job's checkpoint directory, taken and kept fresh (None: the storage is
    in memory, one run's alone), and the job recorded in the directory (`record_job`: a restore
    then knows the job ran here even if it failed before its first checkpoint). The caller
    `release`s it when the run ends.

    Raises:
        CheckpointDirectoryInUseError: another live run (or gc) holds it (named).
        StorageError: the storage could not be read or written.
    """
    if isinstance(storage.blob_store, MemoryBlobStore):
        return None
    lease = JobLease(storage, job_id, holder=f"run {run_id}", run_id=run_id)
    lease.acquire()
    try:
        storage.record_job(job_id, run_id)
    except BaseException:
        lease.release()
        raise
    lease.keep_renewing()
    return lease


@contextlib.contextmanager
def holding(lease: JobLease) -> Iterator[JobLease]:
    """Hold `lease` (acquired, not renewed: for short work such as gc) for the block."""
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()
