"""Starting a job from a landed checkpoint (`env.restore_from_landed(spark, target, id)`).

The landed rows of one checkpoint are collected as Arrow (`DataFrame.toArrow()`) and re-encoded
into state files plus a `CompletedCheckpoint` (`tables.checkpoint_from_tables`); the executor
then restores from it exactly as from a native checkpoint. Because the keyed state is rebuilt from
the `keyed_state` rows, state edited with Spark and landed again is what the job starts from.
"""

from __future__ import annotations

from typing import Any

from checkpoint.completed import CompletedCheckpoint
from checkpoint.storage.layout import CheckpointStorage
from spark_bridge.io.landing import read_checkpoint
from spark_bridge.io.tables import SCHEMAS, checkpoint_from_tables

__all__ = ["checkpoint_from_landed"]


def checkpoint_from_landed(spark: Any, target: str, checkpoint_id: int | None = None
                           ) -> tuple[CompletedCheckpoint, CheckpointStorage]:
    """The landed checkpoint `checkpoint_id` (default: the latest) as a restorable checkpoint.

    Returns:
        `(completed, storage)`, what `env.execute(..., restore_from=...)` takes.

    Raises:
        LandingError: nothing (or not that checkpoint) is landed at `target`.
    """
    landed = read_checkpoint(spark, target, checkpoint_id)
    tables = {}
    for name, schema in SCHEMAS.items():
        tables[name] = landed[name].toArrow().select(schema.names).cast(schema)
    return checkpoint_from_tables(tables)
