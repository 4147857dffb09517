"""Buffers per second through a `CheckpointedInputGate`.

The headline row is the aligned gate with 4 channels and a barrier every 1,000 buffers: pushes go
round-robin over the channels, the gate is polled after every push, and the 100-row buffers are
built once and reused (so Arrow conversion is not measured). Rows for the tracker and the
unaligned handler, and an aligned run with skewed barriers (so data is held), are added for
comparison.

    python -m benchmarks.gate_speed [--buffers N] [--repeat R] [--json PATH]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from benchmarks.report import add_output_arguments, add_sized_argument, markdown_table, output_of, parse_args
from runtime.core.barriers import BarrierAligner, BarrierTracker, UnalignedBarrierHandler
from runtime.core.barriers.handler import AlignmentStats, BarrierHandler
from runtime.core.input_gate import CheckpointedInputGate
from runtime.records.messages import Buffer, BufferOrEvent, CheckpointBarrier
from vocabulary.ports import ManualClock

NUM_CHANNELS = 4
BARRIER_EVERY = 1_000
ROWS_PER_BUFFER = 100


class _CountingListener:
    def __init__(self) -> None:
        self.triggered = 0
        self.aborted = 0

    def trigger_checkpoint(self, barrier: CheckpointBarrier, stats: AlignmentStats) -> None:
        self.triggered += 1

    def abort_checkpoint(self, checkpoint_id: int, reason: object) -> None:
        self.aborted += 1

    def add_input_channel_state(self, checkpoint_id: int, channel: int, buffers: Sequence[Buffer]) -> None:
        pass

    def finish_input_channel_state(self, checkpoint_id: int) -> None:
        pass


@dataclass(frozen=True)
class Row:
    handler: str
    barrier_skew: int
    buffers: int
    seconds: float
    buffers_per_s: float
    checkpoints: int
    bytes_held_max: int


def run_once(make_handler: Callable[..., BarrierHandler], num_buffers: int, skew: int) -> Row:
    """Push `num_buffers` round-robin over 4 channels, polling after each push.

    A barrier goes out every `BARRIER_EVERY` buffers; channel c emits it `c * skew` of its own
    buffers late (skew 0: all four barriers back to back).
    """
    listener = _CountingListener()
    handler = make_handler(NUM_CHANNELS, listener, clock=ManualClock())
    gate = CheckpointedInputGate(NUM_CHANNELS, handler)
    per_channel = [
        BufferOrEvent(ch, Buffer.from_records([{"channel": ch, "value": i, "key": f"k{i % 7}"} for i in range(ROWS_PER_BUFFER)]))
        for ch in range(NUM_CHANNELS)
    ]
    per_channel_barrier_every = BARRIER_EVERY // NUM_CHANNELS
    # for each channel, the positions (in its own buffer count) after which it emits a barrier
    push, poll = gate.push, gate.poll
    next_barrier = [per_channel_barrier_every + ch * skew for ch in range(NUM_CHANNELS)]
    next_id = [1] * NUM_CHANNELS
    sent = [0] * NUM_CHANNELS
    start = time.perf_counter()
    for i in range(num_buffers):
        ch = i % NUM_CHANNELS
        push(per_channel[ch])
        sent[ch] += 1
        if sent[ch] == next_barrier[ch]:
            push(BufferOrEvent(ch, CheckpointBarrier(next_id[ch])))
            next_id[ch] += 1
            next_barrier[ch] += per_channel_barrier_every
        while poll() is not None:
            pass
    seconds = time.perf_counter() - start
    return Row(
        handler=type(handler).__name__,
        barrier_skew=skew,
        buffers=num_buffers,
        seconds=seconds,
        buffers_per_s=num_buffers / seconds,
        checkpoints=listener.triggered,
        bytes_held_max=gate.stats().bytes_held_max,
    )


def best_of(repeat: int, *args) -> Row:
    return min((run_once(*args) for _ in range(repeat)), key=lambda r: r.seconds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate_speed", description=__doc__.splitlines()[0])
    add_output_arguments(parser, "gate_speed")
    add_sized_argument(parser, "--buffers", full=200_000, quick=20_000, help="buffers pushed per run")
    add_sized_argument(parser, "--repeat", full=3, quick=1, help="runs per row; the fastest is reported")
    args = parse_args(parser, argv)
    if args.buffers < BARRIER_EVERY:
        parser.error(f"--buffers must be at least {BARRIER_EVERY}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    cases = [
        (BarrierAligner, 0),
        (BarrierAligner, 50),
        (UnalignedBarrierHandler, 0),
        (BarrierTracker, 0),
    ]
    rows = [best_of(args.repeat, factory, args.buffers, skew) for factory, skew in cases]

    table = markdown_table([asdict(r) for r in rows])
    print(table)
    out = {
        "benchmark": "gate_speed",
        "channels": NUM_CHANNELS,
        "barrier_every": BARRIER_EVERY,
        "rows_per_buffer": ROWS_PER_BUFFER,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "headline_buffers_per_s": rows[0].buffers_per_s,
        "rows": [asdict(r) for r in rows],
    }
    files = output_of(args, "gate_speed").write(out, table)
    print(f"\nwrote {', '.join(files)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
