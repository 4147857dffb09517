"""Restoring a job from a completed checkpoint: whether it fits, which task gets which state (rescaled by key group), and in-flight data redistributed to another parallelism."""
