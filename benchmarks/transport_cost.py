"""What a hop between two worker processes costs: a Ray actor call against a plain socket.

    python -m benchmarks.transport_cost [--calls 3000] [--rate 300] [--repeat 3] [--quick]

Two Ray actors on this node, a sender and a receiver, each its own process as two workers of a
job are. The sender delivers `--calls` data calls `(task, "push", (epoch, channel, seq,
payloads))` to the receiver, which checks the sequence numbers and counts the records, in two
ways (`TRANSPORTS`):

* `ray`: the receiver's `send` method as a Ray actor call without a result object
  (`num_returns=0`), the way the workers' data calls go (`runtime.ray.slots`);
* `socket`: each call a length-prefixed pickle (protocol 5, which a `Buffer` reduces to one Arrow
  IPC stream as it does for Ray) over one TCP connection to the receiver, where a thread of its
  own reads them and makes the same call (`SocketInbox`).

with three payloads (`PAYLOADS`): `credits` (no buffer: what returning credits sends), `small` (a
buffer of 17 page-view records, what a 5 ms buffer timeout flushes at 5,000 records/s) and `full`
(a full buffer of 1,000 records), each sent flat out and paced at `--rate` calls a second (a paced
call also pays for waking the threads that handle it, which a stream of calls flat out does not).
Per call: the CPU both processes spent (every thread, `time.process_time`) from the first call to
the last one handled, and the wall time. The transports alternate within each round, rounds
repeat; the table gives the medians with their range, the load average, and the CPU of a `ray`
call over a `socket` call.

The socket side is only what a hop needs to be measured (no reconnection, no failure handling):
it prices the alternative; the job's workers talk through Ray.
"""

from __future__ import annotations

import argparse
import os
import pickle
import socket
import statistics
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.report import (
    add_output_arguments,
    add_sized_argument,
    at_least_one,
    load_line,
    markdown_table,
    parse_args,
    write_with_plot,
)

TRANSPORTS = ("ray", "socket")
#: payload name -> records in the buffer (None: a call without a buffer, as credits are)
PAYLOADS = {"credits": None, "small": 17, "full": 1000}
_FRAME = struct.Struct("!I")


def page_views(count: int) -> Any:
    """A data buffer of `count` page-view records, as a source task cuts it."""
    from runtime.records.messages import Buffer

    return Buffer.from_records([{"user": i, "page": f"/p/{i % 50}", "created_at": 1.0e9 + i} for i in range(count)])


class Receiver:
    """The receiving worker: `send((task, method, args))` takes one data call; `SocketInbox`
    threads feed it the socket's calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received = 0
        self._records = 0
        self._next_seq = 0
        self._done = threading.Condition(self._lock)
        self._server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True, name="inbox-accept").start()

    def address(self) -> tuple[str, int]:
        return self._server.getsockname()

    def send(self, call: tuple[str, str, tuple[Any, ...]]) -> None:
        _task, _method, (_epoch, _channel, seq, payloads) = call
        with self._lock:
            if seq != self._next_seq:
                raise RuntimeError(f"receiver: seq {seq}, expected {self._next_seq}")
            self._next_seq = seq + 1
            self._received += 1
            self._records += sum(len(p) for p in payloads)
            self._done.notify_all()

    def reset(self) -> None:
        with self._lock:
            self._received = self._records = self._next_seq = 0

    def wait_for(self, calls: int, timeout: float = 120.0) -> tuple[int, float]:
        """Block until `calls` calls were handled: (records received, process CPU seconds)."""
        with self._lock:
            if not self._done.wait_for(lambda: self._received >= calls, timeout):
                raise TimeoutError(f"receiver: {self._received} of {calls} calls in {timeout} s")
            return self._records, time.process_time()

    def cpu(self) -> float:
        return time.process_time()

    def _accept(self) -> None:
        while True:
            conn, _ = self._server.accept()
            threading.Thread(target=self._read, args=(conn,), daemon=True, name="inbox").start()

    def _read(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb", buffering=1 << 16)
        while header := reader.read(_FRAME.size):
            (size,) = _FRAME.unpack(header)
            self.send(pickle.loads(reader.read(size)))


class Sender:
    """The sending worker: `run` sends `calls` data calls through one transport."""

    def __init__(self, receiver: Any, address: tuple[str, int]) -> None:
        import ray

        self._ray = ray
        self._receiver = receiver
        self._socket = socket.create_connection(address)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def run(self, transport: str, payload: str, calls: int, rate: float | None) -> dict[str, float]:
        records = PAYLOADS[payload]
        payloads = [] if records is None else [page_views(records)]
        self._ray.get(self._receiver.reset.remote())
        receiver_cpu = self._ray.get(self._receiver.cpu.remote())
        cpu, started = time.process_time(), time.perf_counter()
        for seq in range(calls):
            if rate:
                delay = started + seq / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            call = ("task", "push", (0, 0, seq, payloads))
            if transport == "ray":
                self._receiver.send.remote(call)
            else:
                data = pickle.dumps(call, protocol=5)
                self._socket.sendall(_FRAME.pack(len(data)) + data)
        sender_cpu = time.process_time() - cpu
        received, receiver_done = self._ray.get(self._receiver.wait_for.remote(calls))
        wall = time.perf_counter() - started
        expected = calls * (records or 0)
        if received != expected:
            raise RuntimeError(f"transport {transport}: {received} records received, {expected} sent")
        return {"sender_cpu_us": 1e6 * sender_cpu / calls, "receiver_cpu_us": 1e6 * (receiver_done - receiver_cpu) / calls,
                "wall_us": 1e6 * wall / calls}


def measure(calls: int, rate: float, repeat: int) -> list[dict[str, Any]]:
    """Every transport, payload and pacing in each of `repeat` rounds (transports alternating)."""
    import ray

    # by reference, even when this file runs as __main__: the actors' processes import it
    from benchmarks.transport_cost import Receiver, Sender
    from runtime.ray.cluster import ensure_ray

    started_ray = ensure_ray()
    try:
        options = {"num_cpus": 0, "enable_task_events": False}
        receiver = ray.remote(Receiver).options(**options).remote()
        sender = ray.remote(Sender).options(**options).remote(receiver, ray.get(receiver.address.remote()))
        runs = []
        for round_ in range(repeat):
            for payload in PAYLOADS:
                for paced in (None, rate):
                    order = TRANSPORTS if round_ % 2 == 0 else tuple(reversed(TRANSPORTS))
                    for transport in order:
                        figures = ray.get(sender.run.remote(transport, payload, calls, paced))
                        runs.append({"round": round_, "transport": transport, "payload": payload,
                                     "paced": f"{paced:g}/s" if paced else "flat out", **figures,
                                     "cpu_us": figures["sender_cpu_us"] + figures["receiver_cpu_us"],
                                     "load_1m": os.getloadavg()[0]})
        return runs
    finally:
        if started_ray:
            ray.shutdown()


def summary(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per payload, pacing and transport: medians over the rounds, with their range, and
    the `ray` row's CPU over the `socket` row's."""
    rows: list[dict[str, Any]] = []
    keys = sorted({(r["payload"], r["paced"], r["transport"]) for r in runs},
                  key=lambda k: (list(PAYLOADS).index(k[0]) if k[0] in PAYLOADS else 99, k[1], k[2]))
    for payload, paced, transport in keys:
        mine = [r for r in runs if (r["payload"], r["paced"], r["transport"]) == (payload, paced, transport)]
        row: dict[str, Any] = {"payload": payload, "paced": paced, "transport": transport, "rounds": len(mine)}
        for key in ("cpu_us", "sender_cpu_us", "receiver_cpu_us", "wall_us"):
            values = [r[key] for r in mine]
            row[key] = statistics.median(values)
            row[f"{key} range"] = f"{min(values):.0f}-{max(values):.0f}"
        row["load_1m"] = f"{min(r['load_1m'] for r in mine):.1f}-{max(r['load_1m'] for r in mine):.1f}"
        rows.append(row)
    socket_cpu = {(r["payload"], r["paced"]): r["cpu_us"] for r in rows if r["transport"] == "socket"}
    for row in rows:
        base = socket_cpu.get((row["payload"], row["paced"]))
        row["cpu vs socket"] = row["cpu_us"] / base if base else None
    return rows


def plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["payload"], r["paced"]) for r in rows}, key=lambda g: [r["payload"] for r in rows].index(g[0]))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(TRANSPORTS)
    for i, transport in enumerate(TRANSPORTS):
        values = [next((r["cpu_us"] for r in rows if (r["payload"], r["paced"], r["transport"]) == (*g, transport)), 0)
                  for g in groups]
        ax.bar([x + i * width for x in range(len(groups))], values, width, label=transport)
    ax.set_xticks([x + width * (len(TRANSPORTS) - 1) / 2 for x in range(len(groups))])
    ax.set_xticklabels([f"{p}\n{paced}" for p, paced in groups], fontsize=8)
    ax.set_ylabel("CPU per call, µs (sender + receiver)")
    ax.set_title("A data call between two worker processes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sized_argument(parser, "--calls", full=3000, quick=200, type=at_least_one, help="calls per run")
    add_sized_argument(parser, "--repeat", full=3, quick=1, type=at_least_one, help="rounds")
    parser.add_argument("--rate", type=float, default=300.0, help="calls a second of the paced runs (default 300)")
    add_output_arguments(parser, "transport_cost", quick_help="200 calls per run, 1 round")
    args = parse_args(parser, argv)
    load_before = os.getloadavg()
    runs = measure(args.calls, args.rate, args.repeat)
    rows = summary(runs)
    load = load_line(load_before)
    write_with_plot(args, "transport_cost", {"calls": args.calls, "rate": args.rate, "runs": runs, "rows": rows,
                                             "load": load}, f"{markdown_table(rows)}\n\n{load}", lambda p: plot(rows, p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
