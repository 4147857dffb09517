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
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from runtime.connectors.parquet import (
    ParquetFileInfo,
    ParquetSource,
    ParquetSplitReader,
    filesystem_of,
    read_footers,
)
from spark_bridge.io.schema import to_arrow_schema

if TYPE_CHECKING:
    from runtime.api.environment import DataStream, StreamEnvironment

__all__ = ["ParquetFileInfo", "ParquetSplitReader", "ParquetSplitSource", "from_spark", "write_splits"]


class ParquetSplitSource(ParquetSource):
    """Parquet part files dealt into `len(files)` splits named `<name>-<i>`; each split replays by
    row offset (`runtime.connectors.parquet`).

    Args:
        directory: where the part files are (local path or a `pyarrow.fs` URI).
        files: the files of each split, in read order (`len(files)` splits).
        schema: the Arrow schema of the files.
        name: the source name.
    """

    def __init__(self, directory: str, files: list[list[ParquetFileInfo]], schema: pa.Schema,
                 name: str = "spark") -> None:
        filesystem, _ = filesystem_of(directory)
        self._assign(filesystem, files, schema, [f"{name}-{i}" for i in range(len(files))], name=name,
                     vectorised=False, split_by="spark", columns_read=None)
        self.directory = directory
        self.num_splits = len(files)

    @classmethod
    def from_directory(cls, directory: str, num_splits: int, name: str = "spark") -> ParquetSplitSource:
        """Index the `part-*` Parquet files Spark wrote into `directory` (sorted by name), dealt
        round robin into `num_splits` splits."""
        fs, path = filesystem_of(directory)
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
        names = sorted(i.path for i in infos if i.is_file and i.base_name.startswith("part-")
                       and i.base_name.endswith(".parquet"))
        if not names:
            raise FileNotFoundError(f"from_spark: no part-*.parquet files in staging directory {directory!r}")
        schema, footers = read_footers(fs, names)
        return cls(directory, [footers[i::num_splits] for i in range(num_splits)], schema, name)

    def __repr__(self) -> str:
        return f"ParquetSplitSource({self.name!r}, splits={self.num_splits}, rows={self.expected_records()})"


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
