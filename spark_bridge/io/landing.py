"""Landing checkpoints with Spark writers, and reading them back as DataFrames.

Theory of operation
-------------------
`land_checkpoint` reads a completed checkpoint from checkpoint storage, decodes it into the five
tables of `spark_bridge.io.tables` with pyarrow, stages each as one local Parquet file, and has Spark
read the staged file and write it to `<target>/<table>` partitioned by `checkpoint_id` and
`operator`, in *dynamic partition overwrite* mode: the partitions of the landed checkpoint are
replaced and nothing else is touched. So landing is idempotent — re-landing a checkpoint replaces
its partitions, never duplicates rows — and landing checkpoint 7 leaves checkpoint 6 alone.

A target holds the checkpoints of one job: `<target>/_barrierflow_job` (ignored by Spark, like
every `_` path) records the job id, and landing another job's checkpoint there is an error
(partitions are per checkpoint id, so a second job would overwrite the first one's).

`CheckpointLander` is the automatic mode (`env.land_checkpoints_to(spark, target)`): the executor
calls it when a checkpoint completes; it reads the checkpoint's state files at once (a retained
checkpoint may be discarded as soon as the next one completes) and leaves decoding and the Spark
write to a background thread, off the job's hot path. `close()` waits for the landings and raises
the first failure.

`read_checkpoint` reads the tables back (one checkpoint, the latest by default) with explicit
schemas, so partition columns keep their types whatever the operator names look like.

Keyed state in natural types: besides `keyed_state` (exact JSON text, what a restore reads), each
state of each operator lands in `<target>/state/<operator>/<state>/checkpoint_id=<n>` with its
keys and values in the Spark types they fit (`spark_bridge.io.state_tables`; the decision is per
state and checkpoint, see `spark_bridge.io.values`; one Parquet file per state, written with pyarrow
on the target's filesystem, as a Spark job per state would cost more than the landing itself).
`LandedCheckpoint.state(name)` reads one of
them: `WHERE key = 'app0'`, `sum(value)` work as written. Each checkpoint's partition is read on
its own, as a state's types may differ between checkpoints (a float that shows up later makes a
long column a double).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from checkpoint.completed import CompletedCheckpoint
from checkpoint.io.storage import storage_from_uri
from checkpoint.storage.layout import METADATA_FILE, CheckpointStorage, StorageError
from spark_bridge.io.state_tables import state_dir, state_tables
from spark_bridge.io.tables import SCHEMAS, TABLES, checkpoint_tables
from vocabulary.handles import StateHandle

__all__ = ["CheckpointLander", "LandedCheckpoint", "LandingError", "land_checkpoint", "read_checkpoint",
           "resolve_checkpoint"]

PARTITION_COLUMNS = ("checkpoint_id", "operator")
JOB_MARKER = "_barrierflow_job"
#: the folder of the per-state tables under a landing target
STATE_FOLDER = "state"


class LandingError(RuntimeError):
    """A checkpoint cannot be found, landed or read back (names the path or checkpoint)."""


# ------------------------------------------------------------------------------ finding checkpoints


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError):
        return pafs.LocalFileSystem(), os.path.abspath(uri)


def _children(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    try:
        return fs.get_file_info(pafs.FileSelector(path, recursive=False))
    except (FileNotFoundError, OSError):
        return []


def resolve_checkpoint(location: str | CheckpointStorage, checkpoint_id: int | None = None,
                       job_id: str | None = None) -> tuple[CompletedCheckpoint, CheckpointStorage]:
    """Find a completed checkpoint and the storage its files live in.

    Args:
        location: a `CheckpointStorage`, or a directory: the storage root (`<root>/<job>/chk-<n>`),
            a job directory (`<root>/<job>`) or a checkpoint directory (`.../chk-<n>`).
        checkpoint_id: which checkpoint; default the latest with metadata.
        job_id: which job, when the storage root holds several.

    Raises:
        LandingError: nothing matches, or the choice is ambiguous (the message says which).
    """
    if isinstance(location, CheckpointStorage):
        storage = location
    else:
        fs, path = _fs(location)
        path = path.rstrip("/")
        base = path.rsplit("/", 1)[-1]
        if base.startswith("chk-") and fs.get_file_info(f"{path}/{METADATA_FILE}").type == pafs.FileType.File:
            number = int(base[4:])
            if checkpoint_id is not None and checkpoint_id != number:
                raise LandingError(f"{location!r} is checkpoint {number}, not checkpoint {checkpoint_id}")
            checkpoint_id, job_dir = number, path.rsplit("/", 1)[0]
            job_id, root = job_dir.rsplit("/", 1)[1], job_dir.rsplit("/", 1)[0]
        elif any(c.base_name.startswith("chk-") for c in _children(fs, path)):
            job_id, root = base, path.rsplit("/", 1)[0]
        else:
            root = path
        try:  # reading: a missing directory is an error, never created
            storage = storage_from_uri(location if root == path else _uri_like(location, root), create=False)
        except StorageError as exc:
            raise LandingError(f"no checkpoint storage at {location!r}: {exc}") from exc
    if job_id is None:
        jobs = sorted({p.split("/", 1)[0] for p in storage.blob_store.list("") if "/chk-" in p})
        if len(jobs) != 1:
            raise LandingError(f"checkpoint storage {location!r} holds {len(jobs)} jobs {jobs}; pass job_id")
        job_id = jobs[0]
    ids = storage.list_checkpoint_ids(job_id)
    if checkpoint_id is None:
        with_metadata = [i for i in ids if storage.blob_store.exists(storage.metadata_path(job_id, i))]
        if not with_metadata:
            raise LandingError(f"no completed checkpoint of job {job_id!r} in {location!r}")
        checkpoint_id = with_metadata[-1]
    path = storage.metadata_path(job_id, checkpoint_id)
    if not storage.blob_store.exists(path):
        raise LandingError(f"checkpoint {checkpoint_id} of job {job_id!r} has no metadata at {path} in "
                           f"{location!r} (completed checkpoints there: {ids})")
    return storage.read_metadata(path), storage


def _uri_like(original: str, resolved: str) -> str:
    """`resolved` (a filesystem path) in the URI scheme of `original` (plain paths stay paths)."""
    if "://" in original:
        return f"{original.split('://', 1)[0]}://{resolved}"
    return resolved


# ------------------------------------------------------------------------------ writing


def _check_job(target: str, job_id: str) -> None:
    fs, path = _fs(target)
    marker = f"{path.rstrip('/')}/{JOB_MARKER}"
    if fs.get_file_info(marker).type == pafs.FileType.File:
        with fs.open_input_stream(marker) as handle:
            landed = handle.read().decode()
        if landed != job_id:
            raise LandingError(f"landing target {target!r} holds checkpoints of job {landed!r}; land job "
                               f"{job_id!r} into another directory")
        return
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(marker) as handle:
        handle.write(job_id.encode())


def write_tables(spark: Any, tables: dict[str, pa.Table], target: str) -> None:
    """Have Spark write `tables` under `target`, replacing only the partitions they contain."""
    staging = tempfile.mkdtemp(prefix="barrierflow-landing-")
    try:
        for name in TABLES:
            table = tables[name]
            if table.num_rows == 0:
                continue
            staged = os.path.join(staging, f"{name}.parquet")
            pq.write_table(table, staged)
            (spark.read.parquet(staged)
             .repartition(*PARTITION_COLUMNS)
             .write.partitionBy(*PARTITION_COLUMNS)
             .mode("overwrite")
             .option("partitionOverwriteMode", "dynamic")
             .parquet(f"{target.rstrip('/')}/{name}"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def state_path(target: str, operator: str, name: str) -> str:
    """Where the natural-type table of state `name` of `operator` lands under `target`."""
    return f"{target.rstrip('/')}/{STATE_FOLDER}/{state_dir(operator)}/{state_dir(name)}"


def write_state_tables(checkpoint_id: int, tables: dict[tuple[str, str], pa.Table], target: str) -> None:
    """Write each state's table as the Parquet file of its `checkpoint_id=<id>` partition,
    replacing what was there (landing again is idempotent). Written with pyarrow, on the target's
    filesystem: one small file per state, no Spark job each."""
    fs, root = _fs(target)
    for (operator, name), table in tables.items():
        partition = f"{state_path(root, operator, name)}/checkpoint_id={checkpoint_id}"
        if fs.get_file_info(partition).type == pafs.FileType.Directory:
            fs.delete_dir(partition)
        fs.create_dir(partition, recursive=True)
        pq.write_table(table, f"{partition}/part-00000.parquet", filesystem=fs)


def land_checkpoint(spark: Any, checkpoint_dir: str | CheckpointStorage, checkpoint_id: int | None,
                    target: str, *, job_id: str | None = None) -> int:
    """Land one completed checkpoint as Parquet tables under `target` (idempotent).

    Args:
        spark: the SparkSession that writes.
        checkpoint_dir: checkpoint storage root, job directory, checkpoint directory, or a
            `CheckpointStorage` (see `resolve_checkpoint`).
        checkpoint_id: which checkpoint (None: the latest completed one).
        target: directory (path or URI Spark can write) of the landed tables.
        job_id: the job, when the storage holds several.

    Returns:
        The landed checkpoint id.

    Raises:
        LandingError: the checkpoint cannot be found, or `target` holds another job.
        checkpoint.storage.layout.CorruptCheckpointError: a state file is missing or corrupt.
    """
    completed, storage = resolve_checkpoint(checkpoint_dir, checkpoint_id, job_id)
    _land(spark, completed, storage.read_task_file, target)
    return completed.checkpoint_id


def _land(spark: Any, completed: CompletedCheckpoint, read: Callable[[StateHandle], bytes], target: str) -> None:
    _check_job(target, completed.job_id)
    states = state_tables(completed, read)  # first: its error names the key of a value that cannot land
    write_tables(spark, checkpoint_tables(completed, read), target)
    write_state_tables(completed.checkpoint_id, states, target)


class CheckpointLander:
    """Lands every completed checkpoint of a run, off the hot path (see the module docstring).

    Args:
        spark: the SparkSession that writes.
        target: the landing directory.
    """

    def __init__(self, spark: Any, target: str) -> None:
        self.spark = spark
        self.target = target
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list[Future[int]] = []
        self.landed: list[int] = []

    def __call__(self, completed: CompletedCheckpoint, storage: CheckpointStorage) -> None:
        """Checkpoint `completed` completed: read its files now, land it in the background."""
        blobs = {(h.path, h.offset, h.length): storage.read_task_file(h) for h in completed.state_handles()}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="barrierflow-lander")

        def land() -> int:
            _land(self.spark, completed, lambda h: blobs[(h.path, h.offset, h.length)], self.target)
            self.landed.append(completed.checkpoint_id)
            return completed.checkpoint_id

        self._futures.append(self._pool.submit(land))

    def close(self) -> list[int]:
        """Wait for every landing; return the landed ids.

        Raises:
            LandingError: a landing failed (the first failure is the cause).
        """
        futures, self._futures = self._futures, []
        errors = []
        for future in futures:
            exc = future.exception()
            if exc is not None:
                errors.append(exc)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if errors:
            raise LandingError(f"{len(errors)} checkpoint landing(s) into {self.target!r} failed: {errors[0]}") \
                from errors[0]
        return list(self.landed)


# ------------------------------------------------------------------------------ reading


@dataclass
class LandedCheckpoint:
    """The landed tables of one checkpoint, as Spark DataFrames."""

    checkpoint_id: int
    keyed_state: Any
    source_offsets: Any
    operator_state: Any
    channel_state: Any
    checkpoint_stats: Any
    spark: Any = field(default=None, repr=False)
    target: str = ""

    @property
    def tables(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in TABLES}

    def state(self, name: str, operator: str | None = None) -> Any:
        """Keyed state `name` as a DataFrame in natural types: `checkpoint_id, subtask,
        key_group, key, [map_key,] value` (see the module docstring).

        Args:
            name: the state's name.
            operator: the operator holding it; needed only when several operators have a state
                of that name.

        Raises:
            LandingError: no operator (or several, and `operator` is None) holds state `name`
                in this checkpoint, or its table was not landed.
        """
        from pyspark.sql import functions as F

        if operator is None:
            holders = sorted(r[0] for r in self.keyed_state.where(F.col("state_name") == name)
                             .select("operator").distinct().collect())
            if len(holders) != 1:
                raise LandingError(f"checkpoint {self.checkpoint_id} in {self.target!r}: "
                                   + (f"state {name!r} is held by operators {holders}; pass operator="
                                      if holders else f"no operator holds a keyed state {name!r}; "
                                      f"{self._state_names()}"))
            operator = holders[0]
        path = f"{state_path(self.target, operator, name)}/checkpoint_id={self.checkpoint_id}"
        fs, local = _fs(path)
        if fs.get_file_info(local).type != pafs.FileType.Directory:
            raise LandingError(f"no landed state {name!r} of operator {operator!r} in checkpoint "
                               f"{self.checkpoint_id} at {path!r}; {self._state_names()}")
        frame = self.spark.read.parquet(path)
        return frame.select(F.lit(self.checkpoint_id).cast("long").alias("checkpoint_id"), *frame.columns)

    def _state_names(self) -> str:
        """The keyed states of this checkpoint, for an error message."""
        held = sorted((r[0], r[1]) for r in self.keyed_state.select("state_name", "operator").distinct().collect())
        if not held:
            return "it holds no keyed state"
        return "its keyed states: " + ", ".join(f"{state!r} (operator {op!r})" for state, op in held)

    def __getitem__(self, name: str) -> Any:
        if name not in TABLES:
            raise KeyError(f"no landed table {name!r}; tables: {', '.join(TABLES)}")
        return getattr(self, name)


def _spark_schema(name: str) -> Any:
    from pyspark.sql import types as T

    kinds = {pa.int64(): T.LongType(), pa.int32(): T.IntegerType(), pa.string(): T.StringType(),
             pa.float64(): T.DoubleType(), pa.bool_(): T.BooleanType(), pa.binary(): T.BinaryType()}
    return T.StructType([T.StructField(f.name, kinds[f.type], True) for f in SCHEMAS[name]])


def _table_df(spark: Any, target: str, name: str) -> Any:
    schema = _spark_schema(name)
    path = f"{target.rstrip('/')}/{name}"
    fs, local = _fs(path)
    if fs.get_file_info(local).type != pafs.FileType.Directory:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(path).select(*schema.names)


def read_checkpoint(spark: Any, target: str, checkpoint_id: int | None = None) -> LandedCheckpoint:
    """The landed tables of one checkpoint as DataFrames (the latest landed one by default).

    Raises:
        LandingError: nothing is landed at `target`, or not `checkpoint_id`.
    """
    ids = landed_checkpoint_ids(spark, target)
    if not ids:
        raise LandingError(f"no landed checkpoints in {target!r}")
    if checkpoint_id is None:
        checkpoint_id = ids[-1]
    elif checkpoint_id not in ids:
        raise LandingError(f"checkpoint {checkpoint_id} is not landed in {target!r} (landed: {ids})")
    frames = {name: _table_df(spark, target, name).where(f"checkpoint_id = {int(checkpoint_id)}")
              for name in TABLES}
    return LandedCheckpoint(checkpoint_id, **frames, spark=spark, target=target)


def landed_checkpoint_ids(spark: Any, target: str) -> list[int]:
    """Ids of the checkpoints landed at `target`, ascending."""
    stats = _table_df(spark, target, "checkpoint_stats")
    return sorted(r[0] for r in stats.select("checkpoint_id").distinct().collect())
