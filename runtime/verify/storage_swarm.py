"""A storage-tool swarm: random checkpoint directories put through runs, hostile files and gc.

    python -m runtime.verify.storage_swarm --seed N [--count K]      seeds N..N+K-1
    python -m runtime.verify.storage_swarm --minutes M [--seed N]    seeds from N for M minutes

Theory of operation
-------------------
One seed draws a job (parallelism, state backend, retained checkpoints, a `CollectSink` or a
`SparkSink`) and a history for its checkpoint directory: runs that fail for good part-way (a task
crash, no restarts; some before their first checkpoint began) and restore from the directory,
then one that finishes; between runs, what a careless operator or a crashed writer leaves there —
symbolic links out of the directory (a
`chk-<id>`, a `taskowned/` folder, a folder in `shared/` or `committed/`, a file) and one into
it, temporary files of interrupted writes, an incomplete checkpoint with torn metadata, the lease
of a process that died, the lease of a run that is still alive. During runs, at drawn
checkpoints, `checkpoints gc` (dry or real) and a second run on the same directory are attempted.

It checks, after every step:

* nothing outside the directory changes (files a link points to, files beside it), and no link is
  removed or followed;
* gc on a directory a live run holds is refused, names that run and touches nothing; so is a
  second run;
* gc on a quiescent directory removes exactly what its dry run listed, nothing a valid checkpoint
  needs (every checkpoint that verified before still verifies after, every committer folder of a
  run with a valid checkpoint still opens), and nothing more when run again;
* a run restores the newest valid checkpoint; where the job ran before and no checkpoint of it
  ever wrote its metadata, the restore starts from the beginning;
* the history ends exactly once: the last run restores the newest valid checkpoint and the sink's
  committed output (records, or files) equals that of a failure-free run.

Everything is drawn from the seed (`random.Random(seed)`; the simulator is seeded), so a failing
seed replays with `--seed N`. `tests/storage/test_storage_swarm.py` runs a CI-sized set of seeds.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.lease import CheckpointDirectoryInUseError, JobLease, this_process
from checkpoint.io.tools import (
    CheckpointToolError,
    JobRunningError,
    collect_garbage,
    list_checkpoints,
    load_checkpoint,
    open_checkpoints,
)
from checkpoint.lease import LEASE_FILE, Lease
from checkpoint.storage.committer_files import COMMITTED_DIR
from checkpoint.storage.layout import CheckpointStorage
from operators import CollectSink
from runtime.api.environment import StreamEnvironment
from runtime.jobmaster.committer.durable import DurableCollectCommitter
from runtime.jobmaster.result import JobFailedError
from runtime.workloads.seeded import CountPerKey
from vocabulary.fault_plan import FaultPlan, TaskCrash
from vocabulary.options import RestartStrategy

JOB = "job"
BACKENDS = {"full": {}, "incremental": {"state_backend": "incremental"},
            "merged": {"state_backend": "incremental", "file_merging": True, "max_file_size": 4096}}
HOSTILE = ("link-chk", "link-taskowned", "link-shared", "link-file", "link-committed", "link-in", "tmp-files",
           "torn-checkpoint", "dead-lease", "live-lease")


@dataclass(frozen=True)
class StorageConfig:
    """What one seed draws (see the module docstring)."""

    seed: int
    parallelism: int
    backend: str
    retained: int
    rows: int
    keys: int
    spark_sink: bool
    #: per run, the fraction of its records after which a task crashes for good (None: the last run)
    crashes: tuple[float | None, ...]
    #: per gap between runs, the hostile things planted there
    hostile: tuple[tuple[str, ...], ...]
    #: per run, the completed checkpoints (1st, 2nd...) at which gc is attempted, and whether dry
    gc_during: tuple[tuple[tuple[int, bool], ...], ...]
    #: per run, whether a second run on the same directory is attempted
    concurrent: tuple[bool, ...]
    #: per run, whether it fails before its first checkpoint begins (its interval outlasts it)
    early: tuple[bool, ...]


def draw(seed: int) -> StorageConfig:
    rng = random.Random(seed)
    runs = rng.randint(2, 4)
    crashes = tuple(round(rng.uniform(0.2, 0.8), 2) for _ in range(runs - 1)) + (None,)
    return StorageConfig(
        seed=seed, parallelism=rng.randint(1, 3), backend=rng.choice(sorted(BACKENDS)), retained=rng.randint(1, 3),
        rows=rng.choice([600, 1200, 2000]), keys=rng.choice([3, 17, 60]), spark_sink=rng.random() < 0.3,
        crashes=crashes,
        hostile=tuple(tuple(sorted(rng.sample(HOSTILE, rng.randint(1, 4)))) for _ in range(runs - 1)),
        gc_during=tuple(tuple((rng.randint(1, 4), rng.random() < 0.5) for _ in range(rng.randint(0, 2)))
                        for _ in range(runs)),
        concurrent=tuple(rng.random() < 0.4 for _ in range(runs)),
        early=tuple(rng.random() < 0.25 for _ in range(runs - 1)) + (False,),  # drawn last: older fields keep
    )


@dataclass(frozen=True)
class StorageVerdict:
    config: StorageConfig
    problem: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def replay(self) -> str:
        return f"python -m runtime.verify.storage_swarm --seed {self.config.seed}"

    def summary(self) -> str:
        return f"SEED={self.config.seed} {'ok' if self.ok else 'VIOLATION: ' + str(self.problem)} ({self.seconds:.1f} s)"


class Violation(AssertionError):
    """A storage guarantee broke (the message says which and where)."""


def check(condition: bool, message: str | Callable[[], str]) -> None:
    if not condition:
        raise Violation(message() if callable(message) else message)


# --------------------------------------------------------------------------- the job


#: the interval of a run drawn `early`: no checkpoint begins before it fails
EARLY_INTERVAL = 600.0


def _env(config: StorageConfig, ckpts: Path, out: Path, *, restore: bool, interval: float = 0.002) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=config.parallelism, buffer_size=16)
    env.enable_checkpointing(interval=interval, storage=str(ckpts), retained=config.retained,
                             **BACKENDS[config.backend])
    env.set_restart_strategy(RestartStrategy.no_restart())
    rows = [{"id": i, "key": f"k{i % config.keys}"} for i in range(config.rows)]
    sink: Any = CollectSink("out")
    if config.spark_sink:
        from spark_bridge.io.sink import SparkSink

        sink = SparkSink(str(out), name="out")
    env.from_collection(rows, splits=2).key_by("key").process(CountPerKey(), name="count").sink_to(sink)
    if restore:
        env.restore_from(str(ckpts), job_id=JOB)
    return env


def _reference(config: StorageConfig) -> Counter:
    counts: Counter = Counter()
    out: Counter = Counter()
    for i in range(config.rows):
        key = f"k{i % config.keys}"
        counts[key] += 1
        out[(key, counts[key])] += 1
    return out


# --------------------------------------------------------------------------- what must not change


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file and link under `folder` (links not followed): path -> content hash or link target."""
    found = {}
    for directory, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            path = Path(directory) / name
            key = str(path.relative_to(folder))
            if path.is_symlink():
                found[key] = "-> " + os.readlink(path)
            elif path.is_file():
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _links(folder: Path) -> dict[str, str]:
    return {k: v for k, v in fingerprint(folder).items() if v.startswith("-> ")}


def _valid(ckpts: Path) -> list[int]:
    if not (ckpts / JOB).exists():
        return []
    try:
        storage = open_checkpoints(str(ckpts))
        return [c.checkpoint_id for c in list_checkpoints(storage, JOB, verify_files=True) if c.valid]
    except CheckpointToolError:
        return []


def _committer_folders(ckpts: Path, valid: list[int]) -> list[str]:
    storage = open_checkpoints(str(ckpts))
    runs = set()
    for info in list_checkpoints(storage, JOB, verify_files=False):
        if info.checkpoint_id in valid and info.run_id is not None:
            runs.add(info.run_id)
    return sorted(r for r in runs if (ckpts / JOB / COMMITTED_DIR / r).is_dir())


# --------------------------------------------------------------------------- steps


class Run:
    """One seed's history (see the module docstring)."""

    def __init__(self, config: StorageConfig, tmp: Path) -> None:
        self.config = config
        self.rng = random.Random(config.seed * 7919 + 1)
        self.ckpts, self.outside, self.out = tmp / "ckpts", tmp / "outside", tmp / "out"
        self.outside.mkdir(parents=True)
        for name in ("a/_metadata", "a/taskowned/x", "b/chk-1-0.merged", "c/staged-0.txn", "file"):
            (self.outside / name).parent.mkdir(parents=True, exist_ok=True)
            (self.outside / name).write_bytes(f"{name} of seed {config.seed}".encode() * 20)
        self.outside_before = fingerprint(self.outside)
        self._live: JobLease | None = None

    def run(self) -> None:
        config = self.config
        for index, crash in enumerate(config.crashes):
            result = self._execute(index, crash)
            self._outside_unchanged(f"run {index + 1}")
            if index < len(config.hostile):
                for kind in config.hostile[index]:
                    self._plant(kind)
                self._gc_quiescent(f"after run {index + 1} ({', '.join(config.hostile[index])})")
        assert result is not None
        got = self._committed_output(result)
        want = _reference(config)
        check(got == want, lambda: f"the last run's committed output is not exactly once: "
              f"{sum((want - got).values())} missing, {sum((got - want).values())} extra")

    def _execute(self, index: int, crash: float | None) -> Any:
        config = self.config
        starts_over = index > 0 and self._no_metadata()
        restore = bool(_valid(self.ckpts)) or starts_over
        env = _env(config, self.ckpts, self.out, restore=restore,
                   interval=EARLY_INTERVAL if config.early[index] else 0.002)
        faults = FaultPlan()
        if crash is not None:
            per_subtask = max(1, int(crash * config.rows / config.parallelism))
            faults = FaultPlan.of(TaskCrash(task="count[0]", after_records=per_subtask))
        during = dict(config.gc_during[index])
        seen = [0]

        def listener(completed: Any, storage: Any) -> None:
            seen[0] += 1
            run_id = completed.properties.get("run_id")
            if config.concurrent[index] and seen[0] == 1:
                self._second_run_refused(run_id)
            if seen[0] in during:
                self._gc_refused(run_id, dry_run=during[seen[0]])

        try:
            result = env.execute(JOB, executor="sim", seed=config.seed + index, faults=faults,
                                 checkpoint_listeners=[listener])
        except JobFailedError as exc:
            check(crash is not None and "injected" in str(exc), f"run {index + 1} failed: {exc}")
            return None
        if starts_over:
            check(result.restored_from is not None and result.restored_from.checkpoint_id is None,
                  f"run {index + 1} restored a job none of whose checkpoints wrote metadata, yet it did not start "
                  f"from the beginning: {result.restored_from}")
        return result

    def _no_metadata(self) -> bool:
        """Whether no checkpoint in the directory has `_metadata` (as the storage lists it: not
        through a link). After a run of the job, a restore must then start from the beginning."""
        storage = open_checkpoints(str(self.ckpts))
        return not any(storage.blob_store.exists(storage.metadata_path(JOB, checkpoint_id))
                       for checkpoint_id in storage.list_checkpoint_ids(JOB))

    def _second_run_refused(self, run_id: str | None) -> None:
        try:
            _env(self.config, self.ckpts, self.out, restore=False).execute(JOB, executor="sim", seed=0)
        except CheckpointDirectoryInUseError as exc:
            check(f"run {run_id} (host" in str(exc), f"a second run was refused without naming run {run_id}: {exc}")
            return
        raise Violation(f"a second run on the directory live run {run_id} holds was not refused")

    def _gc_refused(self, run_id: str | None, *, dry_run: bool) -> None:
        before = fingerprint(self.ckpts)
        try:
            collect_garbage(open_checkpoints(str(self.ckpts)), JOB, dry_run=dry_run)
        except JobRunningError as exc:
            check(f"run {run_id} (host" in str(exc), f"gc refused a running job without naming run {run_id}: {exc}")
            check(fingerprint(self.ckpts) == before, "gc refused a running job but changed its directory")
            return
        raise Violation(f"gc{' --dry-run' if dry_run else ''} ran on a directory live run {run_id} writes")

    def _gc_quiescent(self, when: str) -> None:
        valid = _valid(self.ckpts)
        folders = _committer_folders(self.ckpts, valid) if valid else []
        links = _links(self.ckpts)
        storage = open_checkpoints(str(self.ckpts))
        if self._live is not None:  # a live run holds the directory: gc and runs stay out
            for dry_run in (True, False):
                self._gc_refused(self._live.run_id, dry_run=dry_run)
            self._second_run_refused(self._live.run_id)
            self._live.release()
            self._live = None
        dry = collect_garbage(storage, JOB, dry_run=True)
        self._outside_unchanged(f"{when}, gc --dry-run")
        real = collect_garbage(storage, JOB)
        self._outside_unchanged(f"{when}, gc")
        check(sorted(dry.removed) == sorted(real.removed),
              lambda: f"{when}: gc removed {sorted(set(real.removed) ^ set(dry.removed))[:4]} unlike its dry run")
        check(not real.failed, f"{when}: gc could not remove {real.failed[:3]}")
        check(_links(self.ckpts) == links, f"{when}: gc removed or changed a symbolic link")
        still = _valid(self.ckpts)
        check(set(valid) <= set(still), f"{when}: gc broke checkpoints {sorted(set(valid) - set(still))}")
        for run in folders:
            DurableCollectCommitter(FsBlobStore(str(self.ckpts)), f"{JOB}/{COMMITTED_DIR}/{run}")  # still opens
        again = collect_garbage(storage, JOB)
        check(not again.removed, f"{when}: a second gc still removed {again.removed[:3]}")
        if valid:
            check(load_checkpoint(str(self.ckpts), job_id=JOB)[0].checkpoint_id == max(still),
                  f"{when}: the newest valid checkpoint does not restore")

    def _outside_unchanged(self, when: str) -> None:
        now = fingerprint(self.outside)
        changed = sorted(k for k in set(now) | set(self.outside_before) if now.get(k) != self.outside_before.get(k))
        check(not changed, f"{when}: files outside changed: {changed[:4]}")

    # ------------------------------------------------------------------ hostile plants

    def _plant(self, kind: str) -> None:
        job = self.ckpts / JOB
        unused = 10_000 + self.rng.randint(0, 9_999)
        valid = _valid(self.ckpts)
        if kind == "link-chk":
            _link(job / f"chk-{unused}", self.outside / "a")
        elif kind == "link-taskowned":
            (job / f"chk-{unused}").mkdir(parents=True, exist_ok=True)
            _link(job / f"chk-{unused}" / "taskowned", self.outside / "a" / "taskowned")
        elif kind == "link-shared":
            (job / "shared").mkdir(parents=True, exist_ok=True)
            _link(job / "shared" / f"foreign-{unused}", self.outside / "b")  # a name the job never writes
        elif kind == "link-file":
            folder = job / (f"chk-{valid[-1]}" if valid else f"chk-{unused}") / "taskowned"
            folder.mkdir(parents=True, exist_ok=True)
            _link(folder / "stray", self.outside / "file")
        elif kind == "link-committed":
            (job / COMMITTED_DIR).mkdir(parents=True, exist_ok=True)
            _link(job / COMMITTED_DIR / f"20000101T000000-{self.rng.randrange(16**6):06x}", self.outside / "c")
        elif kind == "link-in":
            _link(self.outside / f"into-{unused}", job)
            self.outside_before = fingerprint(self.outside)
        elif kind == "tmp-files":
            for folder in (job / (f"chk-{valid[-1]}" if valid else f"chk-{unused}"), job / "shared", job / COMMITTED_DIR):
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f".x.tmp-{self.rng.randrange(16**8):08x}").write_bytes(b"half a file")
        elif kind == "torn-checkpoint":
            folder = job / f"chk-{unused}"
            (folder / "taskowned").mkdir(parents=True, exist_ok=True)
            (folder / "_metadata").write_bytes(b'{"format": "barrierflow-checkpoint-metadata", "vers')
            (folder / "taskowned" / "count[0].keyed").write_bytes(b"ARROW1\x00")
        elif kind == "dead-lease":
            dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True, check=True).stdout.strip()
            host, _, namespace = this_process()
            job.mkdir(parents=True, exist_ok=True)
            (job / LEASE_FILE).write_bytes(Lease("run gone", "gone", host, int(dead), namespace, time.time(),
                                                 time.time(), 30.0, "gone").to_bytes())
        elif kind == "live-lease" and self._live is None:
            self._live = JobLease(CheckpointStorage(FsBlobStore(str(self.ckpts))), JOB, holder="run alive",
                                  run_id="alive")
            self._live.acquire()

    def _committed_output(self, result: Any) -> Counter:
        if self.config.spark_sink:
            import pyarrow.dataset as ds

            table = ds.dataset(str(self.out), format="parquet").to_table()
            return Counter(zip(table.column("key").to_pylist(), table.column("count").to_pylist()))
        return Counter((r["key"], r["count"]) for r in result.output("out"))


def _link(link: Path, target: Path) -> None:
    if not link.exists() and not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=target.is_dir())


def run_seed(seed: int) -> StorageVerdict:
    """Draw seed `seed`'s history, run it in a temporary directory and judge it."""
    config = draw(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"storage-swarm-{seed}-") as tmp:
        try:
            Run(config, Path(tmp)).run()
            problem = None
        except Violation as exc:
            problem = str(exc)
        except Exception as exc:  # noqa: BLE001 - anything else escaping is a violation too
            problem = f"{type(exc).__name__}: {exc}"
    return StorageVerdict(config, problem, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.verify.storage_swarm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: a random one)")
    parser.add_argument("--count", type=int, default=1, help="seeds to run from --seed (default 1)")
    parser.add_argument("--minutes", type=float, default=None, help="run seeds from --seed for this long")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    deadline = time.monotonic() + args.minutes * 60 if args.minutes is not None else None
    ran = failed = 0
    while (deadline is None and ran < args.count) or (deadline is not None and time.monotonic() < deadline):
        verdict = run_seed(seed + ran)
        ran += 1
        print(f"{verdict.summary()}  {verdict.config}", flush=True)
        if not verdict.ok:
            failed += 1
            print(f"  replay: {verdict.replay}", flush=True)
    print(f"{ran} seed(s) from {seed}: {failed} violation(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
