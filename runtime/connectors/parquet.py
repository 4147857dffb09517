"""`ParquetSource`: Parquet files as a replayable source, split by file or by row group.

Theory of operation
-------------------
Discovery (`pyarrow.dataset`, once, where the job is built): the files under a path, sorted by
path (names starting with `.` or `_` are skipped, as Spark's `_SUCCESS` and `.crc` files are by
pyarrow and Spark), each file's footer read for its schema and row-group sizes. Every file must
have the first file's schema; a missing path, a file that is not Parquet and a schema that differs
are errors naming the file. A split is a list of *pieces* (a file and some of its row groups):

* `split_by="row_group"` (default): one split per non-empty row group, named
  `<name>:<file relative to the path>#<row group>`;
* `split_by="file"`: one split per file, named `<name>:<file>`.

Splits do not depend on the parallelism (subtask i reads splits `index % parallelism == i`), so a
job restored with another parallelism finds every split's offset by name. The files must not
change while the job runs (or between a checkpoint and its restore): a split that ends early is an
error naming it.

A reader's offset (`position`) is the number of rows the split emitted: the split's checkpointed
state. `seek(position)` skips whole pieces and row groups by their row counts from the footers
and drops only the rows before `position` in the row group it lands in. Records are
`RecordBatch.to_pylist()` dicts (every column, None where null); `vectorised=True` hands out the
Arrow batches themselves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from operators.base import Clock, Record
from operators.sources import Source, SourceSplit, SplitReader

__all__ = ["ParquetFileInfo", "ParquetSource", "ParquetSourceError", "ParquetSplitReader", "filesystem_of", "read_footers"]

#: rows pyarrow decodes per batch when reading a split
READ_BATCH_ROWS = 8192
SPLIT_BY = ("row_group", "file")


class ParquetSourceError(ValueError):
    """The files of a Parquet source cannot be read as one table (names the file)."""


@dataclass(frozen=True, slots=True)
class ParquetFileInfo:
    """A piece of a split: a Parquet file and which of its row groups (all when `groups` is None).

    Attributes:
        path: the file, as the filesystem names it.
        row_groups: the row counts of the row groups read, in order.
        groups: the indices of those row groups in the file; None = 0 .. len(row_groups)-1.
    """

    path: str
    row_groups: tuple[int, ...]
    groups: tuple[int, ...] | None = None

    @property
    def num_rows(self) -> int:
        return sum(self.row_groups)

    @property
    def group_indices(self) -> tuple[int, ...]:
        return tuple(range(len(self.row_groups))) if self.groups is None else self.groups


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    """The `pyarrow.fs` filesystem of `uri` and the path in it (a plain path: the local one)."""
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError):
        return pafs.LocalFileSystem(), os.path.abspath(uri)


class ParquetSource(Source):
    """Parquet files read as splits (see the module docstring).

    Args:
        path: a Parquet file, a directory of them (searched recursively), a list of files, or a
            `pyarrow.fs` URI of any of these.
        split_by: "row_group" (one split per row group) or "file" (one split per file).
        vectorised: hand out Arrow record batches instead of dicts.
        columns: read only these columns (default: all).
        name: the source name; split ids start with it.

    Raises:
        FileNotFoundError: `path` (or a listed file) does not exist, or holds no Parquet file.
        ParquetSourceError: a file is not Parquet, or its schema differs from the first file's
            (both named), or `columns` names a column the files lack.
        ValueError: a bad `split_by`.
    """

    def __init__(self, path: str | Sequence[str], *, split_by: str = "row_group", vectorised: bool = False,
                 columns: Sequence[str] | None = None, name: str = "parquet") -> None:
        if split_by not in SPLIT_BY:
            raise ValueError(f"from_parquet: split_by must be one of {', '.join(SPLIT_BY)}, got {split_by!r}")
        paths = [path] if isinstance(path, str) else list(path)
        if not paths or not all(isinstance(p, str) for p in paths):
            raise ValueError(f"from_parquet: path must be a path or URI, or a list of them, got {path!r}")
        filesystem, root = filesystem_of(paths[0])
        files = _discover(filesystem, [filesystem_of(p)[1] for p in paths])
        schema, infos = read_footers(filesystem, files)
        columns_read = None if columns is None else list(columns)
        if columns_read is not None:
            missing = [c for c in columns_read if c not in schema.names]
            if missing:
                raise ParquetSourceError(f"from_parquet: the files have no column(s) {', '.join(map(repr, missing))} "
                                         f"(they have {', '.join(schema.names)})")
            schema = pa.schema([schema.field(c) for c in columns_read])
        if len(paths) == 1 and filesystem.get_file_info(root).type == pafs.FileType.Directory:
            base = root
        else:
            base = os.path.commonpath([os.path.dirname(info.path) for info in infos])
        pieces: list[list[ParquetFileInfo]] = []
        names: list[str] = []
        for info in infos:
            relative = os.path.relpath(info.path, base) if base else info.path
            if split_by == "file":
                pieces.append([info])
                names.append(f"{name}:{relative}")
                continue
            for group, rows in enumerate(info.row_groups):
                if rows:
                    pieces.append([ParquetFileInfo(info.path, (rows,), (group,))])
                    names.append(f"{name}:{relative}#{group}")
        self._assign(filesystem, pieces, schema, names, name=name, vectorised=vectorised, split_by=split_by,
                     columns_read=columns_read)

    def _assign(self, filesystem: pafs.FileSystem, pieces: list[list[ParquetFileInfo]], schema: pa.Schema,
                split_names: list[str], *, name: str, vectorised: bool, split_by: str,
                columns_read: list[str] | None) -> None:
        """Set the splits: `pieces[i]` (files and row groups, read in order) is split `split_names[i]`."""
        assert len(pieces) == len(split_names), (len(pieces), len(split_names))
        self.filesystem, self.pieces, self.schema, self.split_names = filesystem, pieces, schema, split_names
        self.name, self.vectorised, self.split_by, self.columns_read = name, vectorised, split_by, columns_read

    def splits(self) -> list[SourceSplit]:
        return [SourceSplit(split_id, index, 0, sum(p.num_rows for p in pieces))
                for index, (split_id, pieces) in enumerate(zip(self.split_names, self.pieces))]

    def reader(self, split: SourceSplit, clock: Clock) -> ParquetSplitReader:
        return ParquetSplitReader(self, split)

    def columns(self) -> list[str]:
        return list(self.schema.names)

    def expected_records(self) -> int:
        return sum(p.num_rows for pieces in self.pieces for p in pieces)

    def __repr__(self) -> str:
        return (f"ParquetSource({self.name!r}, splits={len(self.pieces)}, rows={self.expected_records()}, "
                f"vectorised={self.vectorised})")


def _discover(fs: pafs.FileSystem, paths: list[str]) -> list[str]:
    """The Parquet files under `paths`, sorted (each path: a file or a directory)."""
    files: list[str] = []
    for path in paths:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"from_parquet: no such file or directory: {path!r}")
        if info.type == pafs.FileType.File:
            files.append(path)
            continue
        # an empty schema: list the files, read no footer (each is read and checked below)
        found = ds.dataset(path, filesystem=fs, format="parquet", schema=pa.schema([])).files
        if not found:
            raise FileNotFoundError(f"from_parquet: no Parquet files in directory {path!r}")
        files.extend(found)
    return sorted(set(files))


def read_footers(fs: pafs.FileSystem, files: list[str]) -> tuple[pa.Schema, list[ParquetFileInfo]]:
    """The schema every file has and each file's row groups, from the footers.

    Raises:
        ParquetSourceError: a file is not Parquet, or its schema differs from the first's (named).
    """
    schema: pa.Schema | None = None
    infos = []
    for path in files:
        try:
            with fs.open_input_file(path) as handle:
                meta = pq.ParquetFile(handle).metadata
                file_schema = meta.schema.to_arrow_schema().remove_metadata()
        except (pa.ArrowInvalid, OSError) as exc:
            raise ParquetSourceError(f"from_parquet: {path!r} is not a readable Parquet file: {exc}") from exc
        if schema is None:
            schema, first = file_schema, path
        elif not file_schema.equals(schema):
            raise ParquetSourceError(
                f"from_parquet: {path!r} has another schema than {first!r}: "
                f"{_schema_text(file_schema)} instead of {_schema_text(schema)}")
        infos.append(ParquetFileInfo(path, tuple(meta.row_group(g).num_rows for g in range(meta.num_row_groups))))
    assert schema is not None
    return schema, infos


def _schema_text(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"


class ParquetSplitReader(SplitReader):
    """Reads one split's pieces as Arrow record batches; `position` = rows emitted so far."""

    def __init__(self, source: ParquetSource, split: SourceSplit) -> None:
        self.source = source
        self.split = split
        self.pieces = source.pieces[split.index]
        self.size = split.end or 0
        self.position = 0
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._leftover: pa.RecordBatch | None = None

    def seek(self, position: int) -> None:
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= self.size:
            raise ValueError(f"cannot seek split {self.split.split_id!r} to position {position!r} "
                             f"(the split has {self.size} rows)")
        self.position = position
        self._batches = None
        self._leftover = None

    def _iterate_from(self, position: int) -> Iterator[pa.RecordBatch]:
        skip = position
        for piece in self.pieces:
            if skip >= piece.num_rows:
                skip -= piece.num_rows
                continue
            first = 0
            while skip >= piece.row_groups[first]:
                skip -= piece.row_groups[first]
                first += 1
            with self.source.filesystem.open_input_file(piece.path) as handle:
                parquet = pq.ParquetFile(handle)
                groups = list(piece.group_indices[first:])
                for batch in parquet.iter_batches(READ_BATCH_ROWS, row_groups=groups, use_threads=False,
                                                  columns=self.source.columns_read):
                    if skip:
                        if skip >= batch.num_rows:
                            skip -= batch.num_rows
                            continue
                        batch, skip = batch.slice(skip), 0
                    if batch.num_rows:
                        yield batch
            skip = 0

    def read_batch(self, max_records: int) -> pa.RecordBatch | None:
        """Up to `max_records` next rows as one record batch (None at the end of the split).

        Raises:
            RuntimeError: the split's files hold fewer rows than when the job was built (names it).
        """
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
                               f"{self.size}; they changed since the job was built")
        out = parts[0] if len(parts) == 1 else pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
        self.position += out.num_rows
        if self.finished():
            self._batches = None
        return out

    def read(self, max_records: int) -> list[Record] | pa.RecordBatch:
        batch = self.read_batch(max_records)
        if batch is None:
            return []
        return batch if self.source.vectorised else batch.to_pylist()

    def finished(self) -> bool:
        return self.position >= self.size

    def __repr__(self) -> str:
        return f"ParquetSplitReader({self.split.split_id}, position={self.position}/{self.size})"
