"""`python -m runtime.workloads.nexmark --events N --out DIR`: NexMark events as Parquet files."""

from __future__ import annotations

import argparse
import sys
import time

from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.dataset import MANIFEST, write_events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.workloads.nexmark",
        description="Write NexMark events (persons, auctions, bids in one table with a `kind` column, in event "
                    "order) as Parquet files: the events a NexmarkSource with the same options emits.")
    parser.add_argument("--events", type=int, required=True, help="number of events")
    parser.add_argument("--out", required=True, help="directory for the files (created)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--rate", type=int, default=NexmarkConfig.event_rate,
                        help="events per second of event time (default %(default)s)")
    parser.add_argument("--hot-ratio", type=int, default=None,
                        help="skew: every hot ratio (auctions, sellers, bidders); a bid or auction is hot with "
                             "probability 1 - 1/ratio (default: NexMark's 2, 4, 4)")
    parser.add_argument("--out-of-order", type=int, default=1, metavar="GROUP",
                        help="shuffle events within groups of this many (default 1: in order)")
    parser.add_argument("--files", type=int, default=1, help="number of files (default 1)")
    parser.add_argument("--row-group-rows", type=int, default=100_000, help="rows per row group (default 100000)")
    args = parser.parse_args(argv)
    try:
        config = NexmarkConfig(seed=args.seed, event_rate=args.rate, out_of_order_group_size=args.out_of_order)
        if args.hot_ratio is not None:
            config = config.with_hot_ratio(args.hot_ratio)
        started = time.perf_counter()
        paths = write_events(config, args.events, args.out, files=args.files, row_group_rows=args.row_group_rows)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"wrote {args.events:,} events in {len(paths)} file(s) to {args.out} "
          f"({time.perf_counter() - started:.1f} s; config in {MANIFEST})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
