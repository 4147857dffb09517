"""`SparkSink`: a two-phase-commit file sink whose output directory Spark reads.

Theory of operation
-------------------
The protocol is `CollectSink`'s (stage per checkpoint in operator state, commit on
`notify_checkpoint_complete`, re-commit restored transactions on restore); only the external
system differs. A transaction is one file:

* pre-commit (`snapshot_state(k)`): the records staged since the last checkpoint are written to
  `<path>/_staging/<txn>.<ext>` (via a `.tmp` file and a rename, so a staged file is whole) and
  the operator state of checkpoint k lists the staged file instead of the records;
* commit (checkpoint k completed, or restored as pending): rename
  `_staging/<txn>.<ext>` → `<path>/part-<txn>.<ext>`. A rename is atomic, so a reader sees the
  whole file or nothing. Spark (like Hadoop) ignores paths starting with `_` or `.`, so staged and
  temporary files are invisible to `spark.read.parquet(path)`;
* idempotent: if the staged file is gone and the part file exists, the transaction was committed
  already (a restore re-commits pending transactions, possibly from several subtasks at once);
  both missing is an error — committed data would be lost.

`<txn>` is `<sink>-<subtask>-<checkpoint>-<random>`: the random part keeps runs that reuse an
output directory from colliding. A transaction staged for a checkpoint that never completes is
never renamed: it stays an orphan under `_staging/`, invisible to readers.

Records are written with pyarrow (the sink runs inside tasks, where no Spark session exists).
Without a `schema` the Arrow types are inferred per file, which widens ints to 64 bits; pass the
DataFrame's schema (`SparkSink(path, schema=df.schema)`) to write the exact types.
"""

from __future__ import annotations

import secrets
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from operators.base import Record
from operators.columns import as_records
from operators.sinks import CollectSink

__all__ = ["SparkSink", "SparkSinkError"]

FORMATS = {"parquet": "parquet", "orc": "orc", "csv": "csv"}
STAGING_DIR = "_staging"


class SparkSinkError(RuntimeError):
    """A transaction could not be staged or committed (names the sink and the file)."""


def _fs(path: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(path)
    except (pa.ArrowInvalid, ValueError):
        return pafs.LocalFileSystem(), path


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

    #: its transactions are files it renames itself (`_commit_all`), not the committer's stages
    staged_in_committer = False

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
            from spark_bridge.schema import to_arrow_schema

            schema = to_arrow_schema(schema)
        self.schema: pa.Schema | None = schema
        #: records of transactions staged by this instance, kept to report them when committed
        self._staged_records: dict[str, list[Record]] = {}

    # ------------------------------------------------------------------ files

    @property
    def _ext(self) -> str:
        return FORMATS[self.format]

    def _staged_path(self, txn: str) -> str:
        return f"{self.path}/{STAGING_DIR}/{txn}.{self._ext}"

    def _final_path(self, txn: str) -> str:
        return f"{self.path}/part-{txn}.{self._ext}"

    def _table(self, records: list[Record]) -> pa.Table:
        try:
            return pa.Table.from_pylist(records, schema=self.schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise SparkSinkError(f"sink {self.sink_name!r}: records do not fit "
                                 f"{'the given schema' if self.schema else 'one Arrow schema'}: {exc}") from exc

    def _write(self, path: str, records: list[Record]) -> None:
        fs, full = _fs(path)
        directory = full.rsplit("/", 1)[0]
        fs.create_dir(directory, recursive=True)
        table = self._table(records)
        tmp = f"{directory}/.{full.rsplit('/', 1)[1]}.tmp"
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

    def _commit_file(self, txn: str) -> None:
        import pyarrow.fs as pafs

        fs, staged = _fs(self._staged_path(txn))
        _, final = _fs(self._final_path(txn))
        try:
            fs.move(staged, final)
        except (FileNotFoundError, OSError) as exc:
            if fs.get_file_info(final).type != pafs.FileType.File:
                raise SparkSinkError(
                    f"sink {self.sink_name!r}: cannot commit transaction {txn}: staged file {staged} "
                    f"is missing and {final} does not exist ({exc})") from exc

    def _read_back(self, txn: str) -> list[Record]:
        fs, final = _fs(self._final_path(txn))
        with fs.open_input_file(final) as handle:
            if self.format == "parquet":
                import pyarrow.parquet as pq

                return pq.read_table(handle).to_pylist()
            if self.format == "orc":
                import pyarrow.orc as orc

                return orc.read_table(handle).to_pylist()
            import pyarrow.csv as csv

            return csv.read_csv(handle).to_pylist()

    # ------------------------------------------------------------------ two-phase commit

    def snapshot_state(self, checkpoint_id: int) -> dict[str, list[Any]]:
        if self._open_rows:
            records = as_records(self._take_open())
            txn = f"{self.sink_name}-{self.ctx.subtask}-{checkpoint_id}-{secrets.token_hex(4)}"
            self._write(self._staged_path(txn), records)
            self._staged_records[txn] = records
            self._pending.append({"txn": txn, "checkpoint": checkpoint_id, "rows": len(records)})
        return {"pending": list(self._pending)} if self._pending else {}

    def _commit_all(self, transactions: list[dict[str, Any]]) -> None:
        for txn in transactions:
            name = txn["txn"]
            self._commit_file(name)
            records = self._staged_records.pop(name, None)
            if records is None:  # restored: the records are in the committed file
                records = self._read_back(name)
            self.ctx.committer.commit(self.sink_name, name, records)

    def end_input(self) -> list[Record]:
        """All input arrived: commit what was staged after the last completed checkpoint (see
        `CollectSink.end_input`; with unaligned checkpoints that is the final checkpoint's
        in-flight data). The transaction name is deterministic, so the attempt that replays the
        same records after a failure finds it committed and writes nothing twice."""
        if self.ctx.checkpointing:
            # every pending transaction belongs to a checkpoint <= the final one, which completed
            # (see `CollectSink.end_input`)
            pending, self._pending = self._pending, []
            self._commit_all(pending)
        if not self._open_rows:
            return []
        records = as_records(self._take_open())
        last = f"end-after-{self._last_checkpoint}" if self.ctx.checkpointing else "final"
        txn = f"{self.sink_name}-{self.ctx.subtask}-{last}"
        fs, final = _fs(self._final_path(txn))
        if fs.get_file_info(final).type == pafs.FileType.NotFound:
            self._write(self._staged_path(txn), records)
            self._staged_records[txn] = records
        self._commit_all([{"txn": txn}])
        return []

    def __repr__(self) -> str:
        return f"SparkSink({self.path!r}, format={self.format!r}, pending={self.pending_transactions})"
