"""`SparkSink`: a two-phase-commit file sink whose output directory Spark reads.

Theory of operation
-------------------
The protocol is `CollectSink`'s (pre-commit: stage each checkpoint's records in the job's
committer and name the transaction in the operator state; commit when the checkpoint completes;
re-commit restored transactions on restore); only what a commit makes visible differs: besides the
committer's record, files under `path` (`runtime.jobmaster.committer.file_publisher.FilePublisher`, which
the executors register with the committer for this sink).

* one file per completed checkpoint: the global committer commits a checkpoint for every sink in
  one call and writes one file per sink holding all its subtasks' transactions of that checkpoint
  (`part-<digest of those transactions>.<ext>`), instead of one file per subtask per checkpoint;
* nothing is staged under `path`: staged records live in the committer (durable beside the
  checkpoints when the job has a checkpoint directory, `<dir>/<job>/committed/`), so an aborted
  transaction leaves no file in the output, and `barrierflow checkpoints gc` removes what no
  restore can commit;
* exactly once: a file is named after the transactions it holds, decided and recorded with the
  commit before the file is written (to a hidden temporary name, then renamed, so a reader sees
  all of it or nothing); writing it again — after a crash, or by another execution committing
  the same restored transactions — finds the name taken and writes nothing. Spark (like Hadoop
  and `pyarrow.dataset`) skips paths starting with `_` or `.`.

Records are written with pyarrow (no Spark session is needed to write). Without a `schema` the
Arrow types are inferred per file, which widens ints to 64 bits; pass the DataFrame's schema
(`SparkSink(path, schema=df.schema)`) to write the exact types — records that do not fit it fail
the sink's task at the pre-commit, naming the sink.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from operators.columns import as_records
from operators.sinks import CollectSink
from runtime.jobmaster.committer.file_publisher import FORMATS, FilePublisher

__all__ = ["SparkSink", "SparkSinkError"]


class SparkSinkError(RuntimeError):
    """Records do not fit the sink's schema (names the sink)."""


class SparkSink(CollectSink):
    """Writes committed records as files under `path`, exactly once per checkpoint.

    Args:
        path: the output directory (local path or `pyarrow.fs` URI) Spark will read.
        format: "parquet" (default), "orc" or "csv".
        schema: Arrow schema or Spark `StructType` of the records (default: inferred per file).
        name: the sink name (`result.output(name)` lists the committed records); default the last
            path component.

    Raises:
        ValueError: unknown `format`, empty `path`, or a bad `name`.
        SchemaError: `schema` has a column type the bridge cannot carry.
    """

    def __init__(self, path: str, format: str = "parquet", *, schema: Any = None, name: str | None = None) -> None:
        if not isinstance(path, str) or not path.strip("/"):
            raise ValueError(f"SparkSink: path must be a non-empty directory path, got {path!r}")
        if format not in FORMATS:
            raise ValueError(f"SparkSink: format must be one of {sorted(FORMATS)}, got {format!r}")
        if name is None:
            name = path.rstrip("/").rsplit("/", 1)[-1] or "spark-sink"
        super().__init__(name)
        self.path = path.rstrip("/")
        self.format = format
        if schema is not None:
            from spark_bridge.io.schema import to_arrow_schema

            schema = to_arrow_schema(schema)
        self.schema: pa.Schema | None = schema

    def publisher(self) -> FilePublisher:
        """What the committer writes this sink's committed records with."""
        return FilePublisher(self.path, self.format, self.schema, self.sink_name)

    def _take_open(self) -> list[Any] | Any:
        records = super()._take_open()
        if self.schema is not None:  # fail the pre-commit, in the task, not the commit
            try:
                self.publisher().table([records if isinstance(records, pa.RecordBatch) else as_records(records)])
            except ValueError as exc:
                raise SparkSinkError(str(exc)) from None
        return records

    def __repr__(self) -> str:
        return f"SparkSink({self.path!r}, format={self.format!r}, pending={self.pending_transactions})"
