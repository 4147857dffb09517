"""The `barrierflow` command line: `demo`, `run MODULE:FUNCTION`, `checkpoints`, `bench`,
`calibrate MODULE:FUNCTION`, `whatif`.

Conventions: a usage error (a bad option, a builder that cannot be loaded or returns no
environment) prints one `barrierflow: error: ...` line naming the option and exits 2; a job that
fails exits 1 with one such line; no traceback unless `--debug`.
"""

from __future__ import annotations

import logging
import re
import sys

from runtime.cli.options import UsageError
from runtime.cli.parser import build_parser

#: a terminal control sequence (colours)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _error_exit_code(exc: BaseException) -> int:
    from runtime.core.graph import JobGraphError
    from vocabulary.options import InvalidOptionError

    return 2 if isinstance(exc, UsageError | InvalidOptionError | JobGraphError) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # kazoo logs every failed connection attempt; the error that ends the run names them all
    logging.getLogger("kazoo").setLevel(logging.DEBUG if args.debug else logging.CRITICAL)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("barrierflow: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        if not sys.stderr.isatty():  # a user function's message may carry terminal colours
            text = _ANSI.sub("", text)
        if not isinstance(exc, UsageError):
            text = f"{type(exc).__name__}: {text} (--debug shows the traceback)"
        print(f"barrierflow: error: {text}", file=sys.stderr)
        return _error_exit_code(exc)

