"""How a Ray job reads when one of its service actors held in memory dies: one wording each,
whichever component notices first (a task's or the coordinator's call, or the driver's ping).

Ray-free, so the swarms' judging (`runtime.verify.judging`) matches the same words.
"""

from __future__ import annotations

#: what every message about a dead in-memory checkpoint storage begins with
MEMORY_STORAGE_DIED = "the in-memory checkpoint storage (a Ray actor) died"
#: what every message about a dead committer held in memory says of its output
MEMORY_COMMITTER_DIED = "the sinks' committer service died, and the output it held in memory with it"


def memory_storage_died(detail: str) -> str:
    """The one message of a dead in-memory checkpoint storage (`detail`: what Ray said, one line)."""
    return (f"{MEMORY_STORAGE_DIED}, and every checkpoint with it: nothing is left to restore; keep "
            f"checkpoints in a directory with enable_checkpointing(storage=DIR) ({detail})")


def memory_committer_died(detail: str) -> str:
    """The one message of a dead committer service that held the sinks' output in memory."""
    return (f"{MEMORY_COMMITTER_DIED} (committed and staged transactions); keep it on disk beside the "
            f"checkpoints with enable_checkpointing(storage=DIR) ({detail})")
