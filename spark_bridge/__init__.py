"""The Spark bridge: the only package that imports pyspark.

- `from_spark(env, df, splits=N)`: a replayable source seeded from a DataFrame.
- `SparkSink(path, format="parquet")`: a two-phase-commit file sink Spark reads.
- `land_checkpoint(spark, checkpoint_dir, checkpoint_id, target)` / `read_checkpoint(spark,
  target, checkpoint_id=None)`: checkpoints as Parquet tables and back as DataFrames;
  `read_checkpoint(...).state("count")`: one keyed state with its keys and values in their natural
  Spark types (strings, longs, doubles, structs, arrays; JSON text only when they mix).
- `local_session(app_name, cores=2)`: a local Spark session listening on 127.0.0.1 only.
- `checkpoint_from_landed(spark, target, checkpoint_id)`: what
  `env.restore_from_landed(...)` restores from.
"""

from spark_bridge.io.landing import (
    CheckpointLander,
    LandedCheckpoint,
    LandingError,
    land_checkpoint,
    landed_checkpoint_ids,
    read_checkpoint,
)
from spark_bridge.io.restore import checkpoint_from_landed
from spark_bridge.io.schema import SchemaError, to_arrow_schema
from spark_bridge.io.session import local_session
from spark_bridge.io.sink import SparkSink, SparkSinkError
from spark_bridge.io.tables import TABLES
from spark_bridge.io.values import ValueEncodingError, decode_value, encode_value
from spark_bridge.source import ParquetSplitSource, from_spark

__all__ = [
    "TABLES",
    "CheckpointLander",
    "LandedCheckpoint",
    "LandingError",
    "ParquetSplitSource",
    "SchemaError",
    "SparkSink",
    "SparkSinkError",
    "ValueEncodingError",
    "checkpoint_from_landed",
    "decode_value",
    "encode_value",
    "from_spark",
    "land_checkpoint",
    "landed_checkpoint_ids",
    "local_session",
    "read_checkpoint",
    "to_arrow_schema",
]
