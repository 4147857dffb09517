"""Barrier handlers: the checkpoint decisions behind a `CheckpointedInputGate`.

`BarrierAligner` (exactly-once, aligned; optional alignment timeout), `UnalignedBarrierHandler`
(exactly-once, barriers overtake data) and `BarrierTracker` (at-least-once).
"""

from runtime.barriers.aligner import BarrierAligner
from runtime.barriers.handler import (
    AlignmentStats,
    BarrierHandler,
    BarrierProtocolError,
    CheckpointListener,
    HandlerStats,
    InputView,
)
from runtime.barriers.tracker import MAX_CHECKPOINTS_TO_TRACK, BarrierTracker
from runtime.barriers.unaligned import UnalignedBarrierHandler

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
