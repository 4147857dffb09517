"""NexMark events as Parquet files: the events a `NexmarkSource` emits, for Spark, Flink or
`env.from_parquet` to read.

One table of the union record (`generator.EVENT_SCHEMA`: a `kind` column, each kind's own columns,
null elsewhere), in event order, cut into `files` files of consecutive events
(`events-00000-of-00004.parquet`, ...), row groups of `row_group_rows`. Beside them,
`_nexmark.json` holds the config and the count that produced them (a leading `_` keeps it out of
what pyarrow and Spark read as data).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.generator import EVENT_SCHEMA, NexmarkGenerator

__all__ = ["MANIFEST", "write_events"]

MANIFEST = "_nexmark.json"
#: events generated per call while writing
_CHUNK = 1 << 16


def write_events(config: NexmarkConfig, count: int, out: str, *, files: int = 1,
                 row_group_rows: int = 100_000) -> list[str]:
    """Write events 0 .. count-1 of `config` into directory `out` (created; files already there with
    the same names are replaced) and return the files' paths.

    Raises:
        ValueError: `count` < 0, `files` < 1 or `row_group_rows` < 1 (named).
    """
    for name, value, low in (("count", count, 0), ("files", files, 1), ("row_group_rows", row_group_rows, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"write_events: {name} must be an integer >= {low}, got {value!r}")
    os.makedirs(out, exist_ok=True)
    generator = NexmarkGenerator(config, count)
    bounds = [count * i // files for i in range(files + 1)]
    paths = []
    for index in range(files):
        path = os.path.join(out, f"events-{index:05d}-of-{files:05d}.parquet")
        with pq.ParquetWriter(path, EVENT_SCHEMA) as writer:
            for start in range(bounds[index], bounds[index + 1], row_group_rows):
                stop = min(start + row_group_rows, bounds[index + 1])
                batches = [generator.batch(np.arange(first, min(first + _CHUNK, stop), dtype=np.int64))
                           for first in range(start, stop, _CHUNK)]
                writer.write_table(pa.Table.from_batches(batches, EVENT_SCHEMA), row_group_size=row_group_rows)
        paths.append(path)
    with open(os.path.join(out, MANIFEST), "w") as handle:
        json.dump({"count": count, "files": files, "config": config.to_dict()}, handle, indent=1)
    return paths
