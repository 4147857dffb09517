"""Connectors: sources that read external systems (they do I/O, so they sit outside the pure
`operators` package). `parquet`: Parquet files as a replayable, rescalable source."""
