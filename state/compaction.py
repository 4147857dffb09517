"""Compaction policy for merged files: bound the space lost to dead segments.

Theory of operation
-------------------
With file merging a physical file can only be deleted once *every* segment in it is dead, so a
file whose segments die at different times keeps its dead bytes on disk. The *space
amplification* of a file is its physical size over the bytes of its still-live segments. The task
that wrote a file knows which of its segments its latest confirmed checkpoint still uses, so it
decides: a closed file above the threshold (default 2.0, as Flink) is compacted — at the next
checkpoint its live segments are copied into that checkpoint's new file and the chains point at
the copies; once that checkpoint completes and the older checkpoints are dropped, no reference to
the old file is left and the shared-state registry releases it.

Pure: decisions only. The snapshot writer reads and rewrites the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_COMPACTION_THRESHOLD = 2.0


def space_amplification(physical_bytes: int, live_bytes: int) -> float:
    """physical / live; 1.0 for an empty file, infinity for a file with nothing live."""
    if physical_bytes <= 0:
        return 1.0
    return physical_bytes / live_bytes if live_bytes > 0 else float("inf")


def check_threshold(threshold: float | None) -> float | None:
    """Validate a compaction threshold (None disables compaction).

    Raises:
        ValueError: not a number > 1.
    """
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not threshold > 1.0:
        raise ValueError(f"compaction_threshold must be a number > 1 (or None to disable), got {threshold!r}")
    return float(threshold)


def files_to_compact(files: Mapping[str, tuple[int, int]], threshold: float | None) -> set[str]:
    """The files worth compacting.

    Args:
        files: path -> (physical bytes, live bytes) of closed files that still hold live segments.
        threshold: compact above this amplification; None: never.

    Returns:
        The paths whose amplification exceeds `threshold` and that have live bytes to move (a
        file with nothing live is simply released, not compacted).
    """
    if threshold is None:
        return set()
    return {path for path, (physical, live) in files.items()
            if live > 0 and space_amplification(physical, live) > threshold}
