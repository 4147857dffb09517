"""The job's committer: the in-memory `CollectCommitter`, its durable form beside the checkpoints, and the file publisher behind `SparkSink`."""
