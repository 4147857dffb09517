"""The Spark bridge below the API: local sessions, schema and value conversion, the
two-phase-commit `SparkSink`, checkpoints landed as Parquet tables and restored from them.
The API-facing part (`spark_bridge.source`, the package facade) sits above it."""
