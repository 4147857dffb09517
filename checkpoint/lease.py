"""The lease on a job's checkpoint directory: who may write it (one run at a time), decided purely.

Theory of operation
-------------------
A job's checkpoint directory has one writer at a time (Flink's rule: one job per checkpoint
directory). Two runs writing one directory take the same checkpoint ids from the shared counter
and discard each other's checkpoints; `barrierflow checkpoints gc` on a directory a job is writing
deletes the checkpoint in progress. So whoever writes a job's directory — a run, or `gc` — first
holds its lease, `<dir>/<job>/_lease`, and keeps it fresh; everyone else reads it and stays out.

A `Lease` says who holds it (a run or gc, its host, process id and pid namespace), since when,
when it was last renewed and for how long a renewal counts (`timeout`). `judge` decides, from
the lease found, the reader's own token, the time and whether the holder's process is known to
be alive (the I/O side can tell only on the holder's own host): the lease is FREE (no file), OURS,
HELD by another live holder, or LAPSED — its holder's process is gone, or it was not renewed
within its timeout (a killed run's lease on another host lapses that way). Times are wall
seconds of whoever wrote or reads the lease: hosts' clocks must agree to well within the timeout.

Pure: no clock, no I/O (`checkpoint/io/lease.py` reads, writes and renews it).
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

#: the lease file, in the job's directory
LEASE_FILE = "_lease"
_FORMAT = "barrierflow-lease 1"


class LeaseVerdict(enum.Enum):
    """What the lease found means for someone who wants to write the directory."""

    FREE = "free"
    OURS = "ours"
    HELD = "held"
    LAPSED = "lapsed"


@dataclass(frozen=True)
class Lease:
    """Who holds a job directory's lease (the contents of its lease file).

    Attributes:
        holder: who, for people: ``run <run_id>`` or ``checkpoints gc``.
        run_id: the run holding it (None: not a run).
        host, pid, pid_namespace: where its process runs (the pid namespace tells containers apart).
        since, renewed: wall seconds it was taken and last renewed.
        timeout: seconds after `renewed` it lapses unless renewed again.
        token: unique per acquisition: tells the holder its own lease from a successor's.
    """

    holder: str
    run_id: str | None
    host: str
    pid: int
    pid_namespace: str
    since: float
    renewed: float
    timeout: float
    token: str

    def describe(self, now: float) -> str:
        """`run R (host H, pid P, since T, renewed N s ago)`."""
        since = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"{self.holder} (host {self.host}, pid {self.pid}, since {since}, renewed {max(0.0, now - self.renewed):.0f} s ago)"

    def same_process_space(self, host: str, pid_namespace: str) -> bool:
        """Whether a process on `host` in `pid_namespace` can see the holder's process id."""
        return self.host == host and self.pid_namespace == pid_namespace

    def to_bytes(self) -> bytes:
        return json.dumps({"format": _FORMAT, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Lease:
        """Raises: ValueError naming `where` when `data` is not a lease."""
        try:
            document = json.loads(data.decode("utf-8"))
            if not isinstance(document, dict) or document.pop("format", None) != _FORMAT:
                raise ValueError("not a barrierflow lease")
            lease = cls(**document)
            kinds = {"holder": str, "host": str, "pid": int, "pid_namespace": str, "since": (int, float),
                     "renewed": (int, float), "timeout": (int, float), "token": str}
            bad = [name for name, kind in kinds.items() if not isinstance(getattr(lease, name), kind)]
            if bad or not (lease.run_id is None or isinstance(lease.run_id, str)):
                raise ValueError(f"bad fields {bad or ['run_id']}")
        except (UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
            raise ValueError(f"lease file {where} is unreadable ({exc}): if no run uses the directory, "
                             "delete it") from None
        return lease


def judge(lease: Lease | None, *, token: str | None, now: float, alive: bool | None) -> LeaseVerdict:
    """What `lease` (None: no lease file) means to the holder of `token` at `now`.

    Args:
        alive: whether the lease's process runs (None: cannot tell, e.g. another host).
    """
    if lease is None:
        return LeaseVerdict.FREE
    if token is not None and lease.token == token:
        return LeaseVerdict.OURS
    if alive is False or now - lease.renewed > lease.timeout:
        return LeaseVerdict.LAPSED
    return LeaseVerdict.HELD
