"""Writing a sink's committed records as files readers see (`SparkSink`'s output): the committer's
side of a file sink.

Theory of operation
-------------------
A file sink stages its records in the job's committer like any `CollectSink` (durable beside the
checkpoints when the job has a checkpoint directory); the committer writes what it commits through
the sink's `FilePublisher` (`CollectCommitter.register_publisher`). `commit_checkpoint` — the
global committer, one call per completed checkpoint — writes one file per sink holding every
subtask's transactions of that checkpoint, instead of one file per subtask per checkpoint (Flink's
file sink compacts its small files the same way, before it commits them). Staged records never
touch the output directory, so an aborted transaction leaves nothing there.

Exactly once: a file is named after the transactions it holds (`file_name`), decided when the
committer records the commit (the durable committer writes it into the commit file), then
written: to a hidden temporary name, renamed into place, so readers (Spark, `pyarrow.dataset`:
paths starting with `_` or `.` are skipped) see all of it or nothing. Writing a name that exists
is a no-op, so a publication written again — after a crash, by the next commit or recovery or by a
process that opens the durable committer later; or by another execution that restores the same
checkpoint and commits its transactions again, its committer never having heard of an execution
that did so and failed before a checkpoint of its own — lands once.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from checkpoint.storage.layout import StorageFileError
from runtime.records.messages import Buffer

__all__ = ["FORMATS", "FilePublisher", "register_publishers"]

#: format -> file extension
FORMATS = {"parquet": "parquet", "orc": "orc", "csv": "csv"}


def _filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    try:
        return pafs.FileSystem.from_uri(path)
    except (pa.ArrowInvalid, ValueError):
        return pafs.LocalFileSystem(), path


@dataclass(frozen=True)
class FilePublisher:
    """Writes committed records under `path` as `format` files.

    Args:
        path: the output directory (local path or `pyarrow.fs` URI).
        format: "parquet", "orc" or "csv".
        schema: the files' Arrow schema (None: inferred per file, ints as 64 bits).
        sink: the sink's name, for error messages.
    """

    path: str
    format: str = "parquet"
    schema: pa.Schema | None = None
    sink: str = ""

    def file_name(self, sink: str, transactions: Sequence[str]) -> str:
        """`part-<digest>.<ext>`: named after the transactions it holds, so a commit of the same
        transactions by another execution (one restoring the same checkpoint with a committer that
        never heard of the first commit) names the same file."""
        digest = hashlib.sha256(json.dumps([sink, sorted(transactions)]).encode()).hexdigest()[:24]
        return f"part-{digest}.{FORMATS[self.format]}"

    def table(self, pieces: Sequence[Any]) -> pa.Table:
        """The records of `pieces` (record lists or Arrow batches) as one table of the schema.

        Raises:
            ValueError: they do not fit the schema (or, without one, one Arrow schema).
        """
        try:
            if self.schema is None:  # each piece as the data path makes it Arrow; fields unified across them
                tables = [pa.Table.from_batches([p if isinstance(p, pa.RecordBatch) else
                                                 Buffer.from_records(p, checked=True).batch]) for p in pieces]
                return pa.concat_tables(tables, promote_options="permissive")
            rows = [r for p in pieces for r in (p.to_pylist() if isinstance(p, pa.RecordBatch) else p)]
            return pa.Table.from_pylist(rows, schema=self.schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ValueError(f"sink {self.sink!r}: records do not fit "
                             f"{'the given schema' if self.schema is not None else 'one Arrow schema'}: {exc}") from exc

    def publish(self, name: str, pieces: Sequence[Any]) -> None:
        """Write `pieces` as the file `name` under `path`, unless it exists (then it was written).

        Raises:
            checkpoint.storage.layout.StorageFileError: the file could not be written (names it).
        """
        fs, full = _filesystem(f"{self.path.rstrip('/')}/{name}")
        directory, _, base = full.rpartition("/")
        tmp = f"{directory}/.{base}.tmp"  # one fixed name: a retry overwrites what a crash left
        try:
            if fs.get_file_info(full).type == pafs.FileType.File:
                return
            table = self.table(pieces)
            fs.create_dir(directory, recursive=True)
            with fs.open_output_stream(tmp) as out:
                if self.format == "parquet":
                    import pyarrow.parquet as pq

                    pq.write_table(table, out)
                elif self.format == "orc":
                    import pyarrow.orc as orc

                    orc.write_table(table, out)
                else:
                    import pyarrow.csv as csv

                    csv.write_csv(table, out)
            fs.move(tmp, full)
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise StorageFileError(f"sink {self.sink!r}: cannot write its committed records to {full}: {exc}",
                                   full) from exc

    def to_json(self) -> dict[str, Any]:
        """What the durable committer records, to write a decided file again in a new process."""
        schema = None if self.schema is None else base64.b64encode(self.schema.serialize().to_pybytes()).decode()
        return {"path": self.path, "format": self.format, "schema": schema, "sink": self.sink}

    @classmethod
    def from_json(cls, spec: Any) -> FilePublisher:
        """Raises: ValueError when `spec` is not what `to_json` wrote."""
        try:
            schema = spec["schema"]
            return cls(spec["path"], spec["format"], None if schema is None else pa.ipc.read_schema(
                pa.py_buffer(base64.b64decode(schema))), spec["sink"])
        except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
            raise ValueError(f"not a file publisher: {exc}") from None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {sorted(FORMATS)}, got {self.format!r}")


def register_publishers(committer: Any, graph: Any) -> Any:
    """Register with `committer` the publisher of every sink of `graph` that has one (a sink
    operator's `publisher()`); returns `committer`."""
    for vertex in graph.vertices:
        for factory in vertex.operator_factories:
            operator = getattr(factory, "template", None)
            publisher = getattr(operator, "publisher", None)
            if publisher is not None:
                committer.register_publisher(operator.sink_name, publisher())
    return committer
