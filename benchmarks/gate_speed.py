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
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from runtime.barriers import BarrierAligner, BarrierTracker, UnalignedBarrierHandler
from runtime.barriers.handler import AlignmentStats, BarrierHandler
from runtime.input_gate import CheckpointedInputGate
from runtime.messages import Buffer, BufferOrEvent, CheckpointBarrier
from runtime.ports import ManualClock

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
    parser.add_argument("--buffers", type=int, default=200_000, help="buffers pushed per run (default 200000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the fastest is reported (default 3)")
    parser.add_argument("--json", default="bench-out/gate_speed.json", help="where to write the results")
    args = parser.parse_args(argv)
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

    header = f"{'handler':<24} {'skew':>5} {'buffers':>9} {'seconds':>8} {'buffers/s':>11} {'ckpts':>6} {'held max':>10}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.handler:<24} {r.barrier_skew:>5} {r.buffers:>9} {r.seconds:>8.3f} "
            f"{r.buffers_per_s:>11,.0f} {r.checkpoints:>6} {r.bytes_held_max:>10,}"
        )
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
    directory = os.path.dirname(args.json)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
