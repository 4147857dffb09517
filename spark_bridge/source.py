"""`from_spark`: a replayable barrierflow source seeded from a Spark DataFrame.

Theory of operation
-------------------
Spark writes the DataFrame with its own `DataFrameWriter` as Parquet, repartitioned into N
partitions, into a fresh staging directory that Spark and pyarrow both reach (a local directory
by default, any shared filesystem URI otherwise). The part files, sorted by name, are dealt round
robin into N splits (Spark skips empty partitions, so some splits may be empty). From then on the
data is immutable, which is what makes replay exact:

* a `ParquetSplitReader` reads its files with pyarrow as record batches, in file order;
* its offset (`position`) is the number of rows emitted, the split's checkpointed state;
* `seek(position)` finds the file and row group holding row `position` from the Parquet footers
  (row counts per row group) and starts reading there, dropping the rows of that row group before
  `position` — no re-reading of earlier row groups.

Types: `schema.to_arrow_schema` decides what crosses (unsupported columns are refused before
Spark writes anything). Timestamps are written as microsecond INT64 (not Spark's legacy INT96),
so pyarrow reads them back as UTC timestamps and `TimestampNTZ` as naive ones.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from operators.base import Clock, Record
from operators.sources import Source, SourceSplit, SplitReader
from spark_bridge.schema import to_arrow_schema

if TYPE_CHECKING:
    from runtime.api.environment import DataStream, StreamEnvironment

__all__ = ["ParquetSplitReader", "ParquetSplitSource", "from_spark", "write_splits"]

#: rows pyarrow decodes per batch when reading a split
READ_BATCH_ROWS = 8192


@dataclass(frozen=True, slots=True)
class ParquetFileInfo:
    """One Parquet file of a split: where it is and its row-group sizes (from its footer)."""

    path: str
    row_groups: tuple[int, ...]

    @property
    def num_rows(self) -> int:
        return sum(self.row_groups)


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError):
        return pafs.LocalFileSystem(), uri  # a plain local path


class ParquetSplitSource(Source):
    """Parquet part files dealt into `num_splits` splits; each split replays by row offset.

    Args:
        directory: where the part files are (local path or a `pyarrow.fs` URI).
        files: the files of each split, in read order (`len(files)` splits).
        schema: the Arrow schema of the files.
        name: the source name.
    """

    def __init__(self, directory: str, files: list[list[ParquetFileInfo]], schema: pa.Schema,
                 name: str = "spark") -> None:
        self.directory = directory
        self.files = files
        self.schema = schema
        self.num_splits = len(files)
        self.name = name

    @classmethod
    def from_directory(cls, directory: str, num_splits: int, name: str = "spark") -> ParquetSplitSource:
        """Index the `part-*` Parquet files Spark wrote into `directory` (sorted by name)."""
        fs, path = _filesystem(directory)
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
        names = sorted(i.path for i in infos if i.is_file and i.base_name.startswith("part-")
                       and i.base_name.endswith(".parquet"))
        if not names:
            raise FileNotFoundError(f"from_spark: no part-*.parquet files in staging directory {directory!r}")
        files: list[list[ParquetFileInfo]] = [[] for _ in range(num_splits)]
        schema = None
        for i, file_path in enumerate(names):
            with fs.open_input_file(file_path) as handle:
                meta = pq.ParquetFile(handle).metadata
                if schema is None:
                    schema = meta.schema.to_arrow_schema().remove_metadata()
            groups = tuple(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
            files[i % num_splits].append(ParquetFileInfo(file_path, groups))
        assert schema is not None
        return cls(directory, files, schema, name)

    def splits(self) -> list[SourceSplit]:
        return [SourceSplit(f"{self.name}-{i}", i, 0, sum(f.num_rows for f in files))
                for i, files in enumerate(self.files)]

    def reader(self, split: SourceSplit, clock: Clock) -> ParquetSplitReader:
        return ParquetSplitReader(self, split)

    def columns(self) -> list[str]:
        return list(self.schema.names)

    def expected_records(self) -> int:
        return sum(f.num_rows for files in self.files for f in files)

    def __repr__(self) -> str:
        return f"ParquetSplitSource({self.name!r}, splits={self.num_splits}, rows={self.expected_records()})"


class ParquetSplitReader(SplitReader):
    """Reads one split's files as Arrow record batches; `position` = rows emitted so far."""

    def __init__(self, source: ParquetSplitSource, split: SourceSplit) -> None:
        self.source = source
        self.split = split
        self.files = source.files[split.index]
        self.size = split.end or 0
        self.position = 0
        self._batches: Any = None  # iterator of RecordBatches starting at `position`
        self._leftover: pa.RecordBatch | None = None

    def seek(self, position: int) -> None:
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= self.size:
            raise ValueError(f"cannot seek split {self.split.split_id!r} to position {position!r} "
                             f"(the split has {self.size} rows)")
        self.position = position
        self._batches = None
        self._leftover = None

    def _iterate_from(self, position: int):
        fs, _ = _filesystem(self.source.directory)
        skip = position
        for info in self.files:
            if skip >= info.num_rows:
                skip -= info.num_rows
                continue
            first_group = 0
            while skip >= info.row_groups[first_group]:
                skip -= info.row_groups[first_group]
                first_group += 1
            with fs.open_input_file(info.path) as handle:
                parquet = pq.ParquetFile(handle)
                groups = list(range(first_group, len(info.row_groups)))
                for batch in parquet.iter_batches(READ_BATCH_ROWS, row_groups=groups, use_threads=False):
                    if skip:
                        if skip >= batch.num_rows:
                            skip -= batch.num_rows
                            continue
                        batch, skip = batch.slice(skip), 0
                    if batch.num_rows:
                        yield batch
            skip = 0

    def read_batch(self, max_records: int) -> pa.RecordBatch | None:
        """Up to `max_records` next rows as one record batch (None at the end of the split)."""
        if self.finished() or max_records <= 0:
            return None
        if self._batches is None:
            self._batches = self._iterate_from(self.position)
        parts: list[pa.RecordBatch] = []
        wanted = max_records
        while wanted > 0:
            batch = self._leftover
            self._leftover = None
            if batch is None:
                batch = next(self._batches, None)
                if batch is None:
                    break
            if batch.num_rows > wanted:
                batch, self._leftover = batch.slice(0, wanted), batch.slice(wanted)
            parts.append(batch)
            wanted -= batch.num_rows
        if not parts:
            raise RuntimeError(f"split {self.split.split_id!r}: its files ended at row {self.position} of "
                               f"{self.size}; the staging directory {self.source.directory!r} changed")
        out = parts[0] if len(parts) == 1 else pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
        self.position += out.num_rows
        if self.finished():
            self._batches = None
        return out

    def read(self, max_records: int) -> list[Record]:
        batch = self.read_batch(max_records)
        return [] if batch is None else batch.to_pylist()

    def finished(self) -> bool:
        return self.position >= self.size

    def __repr__(self) -> str:
        return f"ParquetSplitReader({self.split.split_id}, position={self.position}/{self.size})"


# ------------------------------------------------------------------------------ Spark side

_TEMP_DIRS: list[str] = []


def _remove_temp_dirs() -> None:
    for directory in _TEMP_DIRS:
        shutil.rmtree(directory, ignore_errors=True)


def write_splits(df: Any, splits: int, staging_dir: str | None = None) -> str:
    """Have Spark write `df` as `splits` Parquet partitions into a fresh directory; return it.

    Raises:
        SchemaError: a column type cannot cross the bridge (names the column).
    """
    to_arrow_schema(df.schema)  # refuse unsupported columns before Spark writes anything
    if staging_dir is None:
        staging_dir = tempfile.mkdtemp(prefix="barrierflow-spark-")
        if not _TEMP_DIRS:
            atexit.register(_remove_temp_dirs)
        _TEMP_DIRS.append(staging_dir)
    target = f"{staging_dir.rstrip('/')}/from_spark-{uuid.uuid4().hex[:12]}"
    conf = df.sparkSession.conf
    previous = conf.get("spark.sql.parquet.outputTimestampType", None)
    conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        df.repartition(splits).write.mode("errorifexists").parquet(target)
    finally:
        if previous is None:
            conf.unset("spark.sql.parquet.outputTimestampType")
        else:
            conf.set("spark.sql.parquet.outputTimestampType", previous)
    return target


def from_spark(env: StreamEnvironment, df: Any, splits: int | None = None, *, name: str = "spark",
               staging_dir: str | None = None) -> DataStream:
    """A stream of the rows of Spark DataFrame `df` (dicts), replayable by offset.

    Args:
        env: the environment the stream belongs to.
        df: a `pyspark.sql.DataFrame` (read once, when this is called).
        splits: number of splits (default: the environment's parallelism).
        name: the source name (`Source: <name>`).
        staging_dir: where Spark writes the split files (a path or URI Spark and pyarrow share);
            default a temporary local directory removed when the process exits.

    Raises:
        SchemaError: a column type cannot cross the bridge (names the column).
        TypeError / ValueError: bad `env`, `df` or `splits`.
    """
    from pyspark.sql import DataFrame

    from runtime.api.environment import StreamEnvironment

    if not isinstance(env, StreamEnvironment):
        raise TypeError(f"from_spark: env must be a StreamEnvironment, got {type(env).__name__}")
    if not isinstance(df, DataFrame):
        raise TypeError(f"from_spark: df must be a pyspark.sql.DataFrame, got {type(df).__name__}")
    if splits is None:
        splits = env.parallelism
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ValueError(f"from_spark: splits must be an integer >= 1, got {splits!r}")
    directory = write_splits(df, splits, staging_dir)
    source = ParquetSplitSource.from_directory(directory, splits, name=name)
    return env.from_source(source)
