"""Barrier handlers: the checkpoint decisions behind a `CheckpointedInputGate`.

`BarrierAligner` (exactly-once, aligned; optional alignment timeout), `UnalignedBarrierHandler`
(exactly-once, barriers overtake data) and `BarrierTracker` (at-least-once).
"""

from runtime.core.barriers.aligner import BarrierAligner
from runtime.core.barriers.handler import (
    AlignmentStats,
    BarrierHandler,
    BarrierProtocolError,
    CheckpointListener,
    HandlerStats,
    InputView,
)
from runtime.core.barriers.tracker import MAX_CHECKPOINTS_TO_TRACK, BarrierTracker
from runtime.core.barriers.unaligned import UnalignedBarrierHandler

__all__ = [
    "MAX_CHECKPOINTS_TO_TRACK",
    "AlignmentStats",
    "BarrierAligner",
    "BarrierHandler",
    "BarrierProtocolError",
    "BarrierTracker",
    "CheckpointListener",
    "HandlerStats",
    "InputView",
    "UnalignedBarrierHandler",
]
